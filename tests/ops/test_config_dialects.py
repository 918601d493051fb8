"""upstream_dialects from the environment, a flag or the default."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reflexguard.cli.main import _flags, parser
from reflexguard.ops.config import Settings, load_settings


def test_default_is_every_dialect_native():
    assert Settings().upstream_dialects == ["chat", "messages", "responses"]


def test_env_is_a_comma_list(monkeypatch):
    monkeypatch.setenv("REFLEXGUARD_UPSTREAM_DIALECTS", "chat, messages")
    assert Settings().upstream_dialects == ["chat", "messages"]


def test_flag_reaches_the_settings():
    args = parser().parse_args(["serve", "--upstream-dialects", "chat"])
    assert load_settings(_flags(args)).upstream_dialects == ["chat"]


@pytest.mark.parametrize("value", ["messages", "chat,klingon"])
def test_chat_is_required_and_names_are_checked(value):
    with pytest.raises(ValidationError):
        Settings(upstream_dialects=value)
