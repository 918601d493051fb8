"""The fake upstream in a background thread, for the sync and async SDK clients alike."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.fakes.fake_upstream import FakeUpstream
from tests.fakes.threaded_upstream import threaded_fake

# litellm fetches its model cost map from the network on import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    with threaded_fake() as served:
        yield served
