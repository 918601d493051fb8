"""Every example in docs/python.md runs, against the fake upstream, as written."""

from __future__ import annotations

import json

import pytest

from tests.fakes.doc_snippets import (
    EXAMPLE_HOST,
    EXAMPLE_UPSTREAM,
    GOOD_CANCEL,
    fenced,
    wrong_once,
)
from tests.fakes.fake_upstream import FakeUpstream

SNIPPETS = fenced("python.md", "python")


def test_the_page_has_its_examples() -> None:
    assert len(SNIPPETS) == 7


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_python_doc_example_runs(index: int, upstream: tuple[FakeUpstream, str],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    fake, url = upstream
    fake.default = wrong_once
    code = SNIPPETS[index].replace(EXAMPLE_UPSTREAM, url).replace(
        EXAMPLE_HOST, url.removesuffix("/v1"))
    assert code != SNIPPETS[index], "the example must use the example upstream address"
    exec(compile(code, f"docs/python.md#{index}", "exec"), {"__name__": "__doc_example__"})
    out = capsys.readouterr().out
    if "RepairExhausted" in SNIPPETS[index]:
        assert "no valid call" in out and fake.calls == 1
    else:
        assert json.dumps(GOOD_CANCEL) in out or GOOD_CANCEL["reason"] in out
        assert fake.calls == 2
