"""`inject_faults` is a setting like every other: flag, environment, YAML; off by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from reflexguard.core.fault_spec import FaultSpec
from reflexguard.ops.config import ConfigError, Settings, load_settings


def test_off_by_default():
    assert Settings().inject_faults is None


def test_flag_environment_and_yaml_all_read_it(monkeypatch, tmp_path: Path):
    expected = FaultSpec(unknown_tool=0.2, malformed_args=0.1, seed=7, reasks=True)
    assert load_settings({"inject_faults": "unknown_tool=0.2,malformed_args=0.1,seed=7,"
                                           "reasks=on"}).inject_faults == expected
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text("inject_faults:\n  unknown_tool: 0.2\n  malformed_args: 0.1\n"
                       "  seed: 7\n  reasks: on\n")
    assert load_settings({}, mapping).inject_faults == expected
    text = tmp_path / "text.yaml"
    text.write_text("inject_faults: unknown_tool=0.2,malformed_args=0.1,seed=7,reasks=on\n")
    assert load_settings({}, text).inject_faults == expected
    monkeypatch.setenv("REFLEXGUARD_INJECT_FAULTS", "unknown_tool=0.4,seed=1")
    assert load_settings({}, text).inject_faults == FaultSpec(unknown_tool=0.4, seed=1)
    assert load_settings({"inject_faults": "off"}, text).inject_faults is None


def test_a_mistake_names_where_it_came_from(monkeypatch):
    monkeypatch.setenv("REFLEXGUARD_INJECT_FAULTS", "unknown_tool=0.9,schema_violation=0.2")
    with pytest.raises(ConfigError, match=r"inject_faults \(from REFLEXGUARD_INJECT_FAULTS\)"
                                          r": the rates add up to 1\.1"):
        load_settings({})


def test_a_worker_reads_back_what_the_parent_dumped():
    settings = load_settings({"inject_faults": "schema_violation=0.3,seed=2"})
    dumped = settings.model_dump(mode="json")
    assert Settings(**{k: v for k, v in dumped.items() if k == "inject_faults"}
                    ).inject_faults == settings.inject_faults
