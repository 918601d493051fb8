"""Settings, from flags, the environment (REFLEXGUARD_*), a YAML file and defaults.

Precedence, highest first: command-line flags, environment variables, the YAML file
named by --config (or REFLEXGUARD_CONFIG), then the defaults below.

Every mistake is a `ConfigError`: one line naming where the bad value came from (the
flag, the variable, or the file and its key). A file that is not YAML, or not a mapping,
and a key or a REFLEXGUARD_* variable that names no setting, are refused the same way.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from reflexguard.core.choice import OnExhausted
from reflexguard.core.fault_spec import FaultSpec, FaultSpecError, parse_fault_spec
from reflexguard.core.grounding import DEFAULT_PATTERN
from reflexguard.core.ladder import MAX_REPAIRS_CEILING
from reflexguard.core.limits import (
    DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_JSON_DEPTH,
    DEFAULT_MAX_SCHEMA_NODES,
)
from reflexguard.core.loop_guard import LoopMode
from reflexguard.core.loops import DEFAULT_REPEATS
from reflexguard.core.repair import ConstrainedMode
from reflexguard.core.urls import endpoint_suffix, redact, without_endpoint
from reflexguard.dialects.native import DIALECTS, DialectName

ToolCallFormat = Literal["openai", "content"]
ENV_PREFIX = "REFLEXGUARD_"
# REFLEXGUARD_* variables the project reads that are not settings (grep the repository
# for REFLEXGUARD_ when adding one): they must not be refused as unknown settings.
OTHER_VARIABLES = frozenset({
    "REFLEXGUARD_CONFIG",  # the YAML file (cli/main.py)
    "REFLEXGUARD_HOME",  # the model and wheel cache (embedded/model_store.py, setup.sh)
    "REFLEXGUARD_LLAMA_CPU",  # the llama.cpp build flavour (scripts/llama_build.py)
    "REFLEXGUARD_TAU2_LOG_LEVEL",  # the bench's tau2 logging (bench/__init__.py)
    "REFLEXGUARD_TEST_LITELLM_LOG",  # the LiteLLM test probe's output (tests/fakes)
})


class ConfigError(ValueError):
    """A configuration mistake, said in one line that names its flag, variable or file."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    upstream: str | None = Field(None, description="base URL of the model server, e.g. .../v1")
    upstream_api_key: SecretStr | None = Field(None, description="sent upstream as a bearer")
    upstream_timeout: float = Field(600.0, gt=0, description="seconds per upstream request")
    upstream_connect_timeout: float = Field(10.0, gt=0)
    upstream_max_connections: int = Field(256, ge=1)
    request_timeout: float = Field(
        900.0, gt=0, description="seconds for one client request, every attempt included")
    tool_call_format: ToolCallFormat = "openai"
    # The dialects the upstream serves itself; the others are translated to chat there.
    # NoDecode: the env form is a comma list ("chat"), not JSON.
    upstream_dialects: Annotated[list[DialectName], NoDecode] = Field(
        default_factory=lambda: list(DIALECTS))
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    repair: bool = True
    max_repairs: int = Field(2, ge=0, le=MAX_REPAIRS_CEILING)
    constrained_retry: ConstrainedMode = "off"
    json_repair: bool = False
    snap_names: bool = False
    snap_threshold: float = Field(85.0, ge=0, le=100)
    # The meaning-preserving fixes: optional nulls dropped, numbers and booleans written
    # as strings read as such, arguments encoded twice decoded (docs/repair.md).
    safe_fixes: bool = True
    # best: the least bad attempt, the first answer unless a later one is strictly better.
    on_exhausted: OnExhausted = "best"
    # The length of every re-ask and constrained attempt (docs/repair.md): this many
    # tokens, or by default twice the first answer's, within the floor and the ceiling;
    # never more than the client's own limit.
    reask_max_tokens: int | None = Field(None, ge=1, description="fixed re-ask max_tokens")
    reask_tokens_floor: int = Field(256, ge=1)
    reask_tokens_ceiling: int = Field(2048, ge=1)
    # The loop guard (docs/repair.md, "Repeated calls"): a valid call that repeats one the
    # conversation made `loop_repeats` times with one result. `stop` by measurement
    # (docs/bench.md, "Multi-turn"; docs/decisions.md).
    loop_guard: LoopMode = Field(
        "stop", description="a call repeating one already made loop_repeats times with the "
        "same result: off, observe (count it), repair (re-ask once) or stop (re-ask once, "
        "then end the loop with a text answer)")
    loop_repeats: int = Field(
        DEFAULT_REPEATS, ge=1, le=100, description="earlier identical calls with one result "
        "that make a call a repeat (default 2)")
    grounding: bool = False
    grounding_pattern: str = DEFAULT_PATTERN
    grounding_include_system: bool = False
    max_body_bytes: int = Field(32 * 1024 * 1024, ge=1024)
    max_answer_bytes: int = Field(
        DEFAULT_MAX_ANSWER_BYTES, ge=1024, description="an upstream answer (or a guarded "
        "stream in all) past this many bytes is closed: 502, or an error event once "
        "streaming (docs/reliability.md)")
    max_json_depth: int = Field(DEFAULT_MAX_JSON_DEPTH, ge=8, le=200)
    max_schema_nodes: int = Field(
        DEFAULT_MAX_SCHEMA_NODES, ge=100, le=10_000_000,
        description="a tool schema expanding past this many nodes gets 400 (issue 18)")
    # Client connections (docs/reliability.md, "Stream and connection bounds").
    header_timeout: float = Field(
        15.0, gt=0, description="seconds a connection may take to send a request's headers")
    body_timeout: float = Field(
        120.0, gt=0, description="seconds a request's body may take to arrive once its "
        "headers have")
    keepalive_timeout: float = Field(
        75.0, gt=0, description="seconds an idle keep-alive connection is kept open")
    max_client_connections: int | None = Field(
        None, ge=1, description="concurrent client connections per process; unset: the "
        "file limit less the upstream pool and a reserve")
    admin_token: SecretStr | None = Field(
        None, description="bearer token required by /metrics and /reflexguard/*")
    # Scale-out (docs/scaling.md): worker processes on one port, and where sessions live.
    workers: int = Field(1, ge=1, le=64, description="worker processes sharing the port")
    worker_grace: float = Field(
        30.0, gt=0, description="seconds a worker may drain in-flight requests on SIGTERM")
    state: str = Field("memory", description="'memory' or redis://HOST:PORT/DB")
    state_timeout: float = Field(
        0.05, gt=0, le=5, description="seconds any request may wait on the session store")
    session_ttl: float = Field(86_400.0, gt=0, description="seconds a session is kept")
    # The agent's error budget (docs/repair.md): K failed tool calls end its episode.
    error_budget: int | None = Field(
        None, ge=1, le=1000, description="default budget when no x-reflexguard-error-budget")
    tool_error_pattern: str = Field(
        r"^Error:", description="regex: a chat `tool` message that reports a failed call")
    responses_error_pattern: str = Field(
        r"^Error:", description="regex: a Responses function_call_output reporting a failure")
    # Logit margins (docs/screen.md; the study: docs/margins.md).
    margins: bool = Field(False, description="ask the upstream for logprobs; measure margins")
    margin_threshold: float = Field(
        1.0, ge=0, description="a tool name's margin (nats) below this is 'thin'")
    events: Path | None = Field(None, description="append one JSON line per attempt here")
    otel: bool = Field(False, description="OpenTelemetry GenAI spans and metrics over OTLP, "
                       "to OTEL_EXPORTER_OTLP_ENDPOINT (docs/observability.md)")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Testing only (docs/config.md, "Fault injection"): damage a seeded share of the
    # upstream's tool calls before validation. Off unless set; a WARNING at start-up and
    # on /healthz and /readyz while on. NoDecode: the env form is `k=v,...`, not JSON.
    inject_faults: Annotated[FaultSpec | None, NoDecode] = Field(
        None, description="TESTING ONLY: damage tool calls at these rates, e.g. "
        "unknown_tool=0.2,malformed_args=0.1,schema_violation=0.1,seed=7,reasks=on")
    model_variant: str = "Q4_K_M"
    model_ctx: int = Field(8192, ge=512)
    model_threads: int | None = Field(None, ge=1)

    @field_validator("*", mode="before")
    @classmethod
    def _on_off(cls, value: Any, info: ValidationInfo) -> Any:
        """`on`/`off` for every switch, as the flags write them (`--repair off`)."""
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and field.annotation is bool and isinstance(value, str) \
                and value.lower() in ("on", "off"):
            return value.lower() == "on"
        return value

    @field_validator("upstream_dialects", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("upstream_dialects")
    @classmethod
    def _serves_chat(cls, value: list[DialectName]) -> list[DialectName]:
        if "chat" not in value:  # translation targets chat: an upstream must speak it
            raise ValueError("must include chat")
        return list(dict.fromkeys(value))

    @field_validator("inject_faults", mode="before")
    @classmethod
    def _fault_spec(cls, value: Any) -> Any:
        try:
            return parse_fault_spec(value)
        except FaultSpecError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("grounding_pattern", "tool_error_pattern", "responses_error_pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value

    @field_validator("upstream")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        try:
            host = urlsplit(value).hostname
            urlsplit(value).port  # noqa: B018 -- raises ValueError on a port that is not a number
        except ValueError as exc:
            raise ValueError(f"not a URL: {exc}") from None
        if not host:
            raise ValueError("names no host")
        suffix = endpoint_suffix(value)
        if suffix is not None:
            # reflexguard appends the endpoint itself: .../v1/chat/completions would 404.
            raise ValueError(f"is an endpoint ({suffix}), not a base URL: use "
                             f"{redact(without_endpoint(value))}")
        return value.rstrip("/")

    @field_validator("state")
    @classmethod
    def _state_url(cls, value: str) -> str:
        """`memory` or a Redis URL the client can parse; caught here, not at first use."""
        if value == "memory":
            return value
        url = urlsplit(value)
        if url.scheme in ("redis", "rediss") and url.hostname:
            url.port  # noqa: B018 -- raises ValueError on a port that is not a number
            db = url.path.strip("/")
            if db and not db.isdigit():
                raise ValueError(f"the Redis database must be a number, not {db!r}")
            return value
        if url.scheme == "unix" and url.path:
            return value
        raise ValueError("must be 'memory' or a redis://HOST:PORT/DB, rediss:// or unix:// URL")


class _FileSource(PydanticBaseSettingsSource):
    """The YAML file's settings, read and checked by `read_file`."""

    def __init__(self, settings_cls: type[BaseSettings], data: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self._data = dict(data)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._data.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._data)


def _suggestion(name: str, known: Any, prefix: str = "") -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def read_file(path: Path) -> dict[str, Any]:
    """The settings in a YAML file: a mapping whose every key names a setting."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {exc.problem or exc.context}"
                          ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:  # an empty file, or only comments
        return {}
    if not isinstance(data, dict):
        kind = "list" if isinstance(data, list) else type(data).__name__
        raise ConfigError(f"{path}: must be a mapping of settings (key: value), not a {kind}")
    for key in data:
        if not isinstance(key, str) or key not in Settings.model_fields:
            raise ConfigError(f"{path}: unknown key {key!r}"
                              f"{_suggestion(str(key), Settings.model_fields)}")
    return data


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """REFLEXGUARD_* variables that name neither a setting nor one of OTHER_VARIABLES.
    pydantic-settings reads the environment case-insensitively, so this does too."""
    known = {ENV_PREFIX + name.upper() for name in Settings.model_fields} | OTHER_VARIABLES
    return sorted(name for name in environ
                  if name.upper().startswith(ENV_PREFIX) and name.upper() not in known)


def _origin(name: str, flags: Mapping[str, Any], environ: Mapping[str, str],
            config_file: Path | None, data: Mapping[str, Any]) -> str:
    """Where setting `name`'s value came from, in precedence order."""
    if name in flags:
        return f"--{name.replace('_', '-')}"
    variable = ENV_PREFIX + name.upper()
    if any(key.upper() == variable for key in environ):
        return variable
    if config_file is not None and name in data:
        return f"{config_file}: {name}"
    return "its default"


def describe(error: ValidationError, flags: Mapping[str, Any], environ: Mapping[str, str],
             config_file: Path | None = None, data: Mapping[str, Any] | None = None) -> str:
    """One line for the first error: the setting, where its value came from, what is wrong."""
    errors = error.errors()
    first = errors[0]
    name = str(first["loc"][0]) if first["loc"] else "settings"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    if first["type"] == "extra_forbidden":
        return f"unknown setting {name!r}{_suggestion(name, Settings.model_fields)}{more}"
    message = str(first["msg"]).removeprefix("Value error, ")
    origin = _origin(name, flags, environ, config_file, data or {})
    field = Settings.model_fields.get(name)
    shown = ""
    if field is not None and "SecretStr" not in str(field.annotation) \
            and isinstance(first.get("input"), str | int | float | bool):
        shown = f" (got {redact(str(first['input'])) if name == 'upstream' else first['input']!r})"
        shown = shown if len(shown) < 120 else ""
    return f"invalid setting {name} (from {origin}): {message}{shown}{more}"


def load_settings(flags: Mapping[str, Any], config_file: Path | None = None) -> Settings:
    """Settings with flags over env over file over defaults. Raises ConfigError, one line."""
    environ = os.environ
    unknown = unknown_variables(environ)
    if unknown:
        known = [ENV_PREFIX + n.upper() for n in Settings.model_fields] + sorted(OTHER_VARIABLES)
        raise ConfigError(f"unknown environment variable {unknown[0]}"
                          f"{_suggestion(unknown[0].upper(), known)}: it names no setting "
                          f"(docs/config.md)")
    data = read_file(config_file) if config_file is not None else {}

    class _Layered(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return (init_settings, env_settings, _FileSource(settings_cls, data))

    given = {k: v for k, v in flags.items() if v is not None}
    try:
        return _Layered(**given)
    except ValidationError as exc:
        raise ConfigError(describe(exc, given, environ, config_file, data)) from exc
