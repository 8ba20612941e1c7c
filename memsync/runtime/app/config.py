"""Configuration: one YAML file, ``${ENV_VAR}`` interpolation, validated with pydantic.

Errors name the file and the field (``config/memsync.yaml: api.port: Input should be
a valid integer``). Secrets come from the environment; every value that came from an
environment variable, and every field whose name says it is a secret, is redacted
in :func:`redacted_dump`.

A variable that is not set is an error where the file names it, except in a
connector's fields: there it matters only to the commands that build that connector
(a sync, a check, a worker running its job), which fail with
:class:`MissingVariables`; every other command, and every other connector, works
without it. A host that runs only the API needs no connector's token.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from memsync.compile.label_terms import PolicyAction, PolicyMode, normalise_labels
from memsync.compile.layout import BundleLayout
from memsync.fields import empty_list
from memsync.runtime.compiling.settings import CompileSettings
from memsync.schedule import parse_schedule

if TYPE_CHECKING:
    from memsync.compile.sensitivity import ReadPolicy

__all__ = [
    "ApiKey",
    "ApiSettings",
    "ConfigError",
    "ContextSettings",
    "JobsSettings",
    "MissingVariables",
    "PolicyRuleSettings",
    "ReadPolicySettings",
    "Settings",
    "hash_api_key",
    "load_settings",
    "redacted_dump",
    "redacted_store_url",
]

STORE_ENV = "MEMSYNC_STORE"
CONFIG_ENV = "MEMSYNC_CONFIG"
DEFAULT_STORE = "sqlite:///memsync.db"
REDACTED = "***"
_SECRET_NAMES = re.compile(r"(token|secret|password|api_key|^key$)", re.IGNORECASE)
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_CONNECTOR_FIELD = re.compile(r"connectors\[(?P<position>\d+)\]\.(?P<field>[^.\[]+)")


class ConfigError(Exception):
    """Invalid configuration. The message names the file and the field."""


class MissingVariables(ConfigError):
    """A connector was about to be built whose configuration names environment
    variables this process does not have. The message is one line naming the connector,
    the file, and each field and variable."""


def hash_api_key(key: str) -> str:
    """The stored form of an API key: ``sha256:<hex>``. Keys are random, so no salt."""
    return "sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApiKey(_Strict):
    """One API key: its hash (or, from the environment, the key itself) and tenants.

    ``tenants`` lists the tenants the key may act for; ``["*"]`` means any. The first
    tenant is the default when a request sends no ``X-Tenant-ID``.
    """

    name: str
    sha256: str | None = Field(default=None, description="hex SHA-256 of the key")
    key: str | None = Field(default=None, description="the key itself, e.g. ${MEMSYNC_API_KEY}")
    tenants: list[str] = Field(default_factory=lambda: ["default"], min_length=1)

    @field_validator("sha256")
    @classmethod
    def _is_hex_digest(cls, value: str | None) -> str | None:
        if value is None:
            return None
        digest = value.removeprefix("sha256:").lower()
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError("sha256 must be 64 hex characters (see `memsync keys new`)")
        return digest

    def stored_hash(self) -> str:
        if self.sha256 is not None:
            return "sha256:" + self.sha256
        if self.key:
            return hash_api_key(self.key)
        raise ValueError(f"API key {self.name!r} needs either sha256 or key")

    def allows(self, tenant_id: str) -> bool:
        return "*" in self.tenants or tenant_id in self.tenants

    @property
    def bound_tenant(self) -> str | None:
        """The one tenant this key may act for, or ``None`` if it may act for several."""
        only = self.tenants[0]
        return only if len(self.tenants) == 1 and only != "*" else None


def _agent_reads() -> list[str]:
    """The paths :class:`ApiSettings` lets in first by default: the reads an agent
    waits on (``POST /v1/context``, ``GET /v1/memories/search``)."""
    return ["/v1/context", "/v1/memories/search"]


class ApiSettings(_Strict):
    """The HTTP API.

    ``require_tenant``: refuse (400) a request that sends no ``X-Tenant-ID`` unless its
    API key is bound to exactly one tenant, instead of acting for ``default_tenant`` or
    the key's first tenant. Off by default.

    ``concurrent_requests``: how many requests a process of the API works on at once;
    more wait their turn, first come, first served, their bodies received (``/healthz``,
    ``/readyz`` and ``/metrics`` never wait). A request's Python work holds the GIL, so
    past a few at once more only take turns at one core and lengthen every request: 4
    served a mixed load faster than 8 or 16, and at 64 clients kept every kind of
    request's p99 within a factor of 1.2 of the others where cheap writes had overtaken
    reads kept waiting over a second (docs/benchmarks.md). The store keeps as many
    connections open, and one more per job worker. Raise it for a store far away, where
    requests mostly wait on it.

    ``prioritized_paths``: requests to these paths (exact; by default the context
    bundle and memory search, the reads an agent waits on before it answers) are let in
    ahead of the other waiting requests. ``overtake_limit``: the oldest of the other
    waiting requests is passed over by at most this many of them, then goes first, so
    ingest, timelines and compiles keep at least one place in ``overtake_limit + 1``
    while both wait; 0 lets every request in in arrival order.
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8100, ge=0, le=65535)
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    max_batch_size: int = Field(default=1000, ge=1, le=100_000)
    concurrent_requests: int = Field(default=4, ge=1, le=256)
    prioritized_paths: list[str] = Field(default_factory=_agent_reads)
    overtake_limit: int = Field(default=2, ge=0, le=1000)
    default_tenant: str = "default"
    require_tenant: bool = False
    keys: list[ApiKey] = Field(default_factory=empty_list)
    session_secret: SecretStr | None = Field(
        default=None,
        description="signs the admin page's session cookie, e.g. ${MEMSYNC_SESSION_SECRET}; "
        "set it when several replicas serve /ui/ (without it each process makes its own)",
    )

    @field_validator("prioritized_paths")
    @classmethod
    def _paths_from_the_root(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not a path from the root, e.g. /v1/context")
        return paths

    @property
    def auth_enabled(self) -> bool:
        return bool(self.keys)

    def binds_loopback_only(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class JobsSettings(_Strict):
    """Background jobs: triggers, leases, retries and the nightly schedule.

    ``compile_every_n_episodes``: enqueue a compile of a subject once it has this many
    uncompiled episodes (0: off). ``serve_workers``: worker threads ``memsync serve``
    runs beside the API, so async compiles and syncs complete against a plain server
    (0: none, for deployments that run ``memsync worker`` processes instead).
    ``nightly_compile``: a crontab line (in ``timezone``) at which every subject with
    uncompiled episodes gets a compile job (empty: off). See docs/operations.md for
    leases, retries and misfires.
    """

    compile_every_n_episodes: int = Field(default=0, ge=0)
    nightly_compile: str | None = None
    timezone: str = "UTC"
    lease_seconds: float = Field(default=60.0, gt=0)
    poll_seconds: float = Field(default=1.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    retry_backoff_seconds: float = Field(default=10.0, ge=0)
    retry_backoff_max_seconds: float = Field(default=600.0, ge=0)
    misfire_grace_seconds: int = Field(default=3600, ge=1)
    serve_workers: int = Field(default=1, ge=0, le=64)

    @field_validator("timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (e.g. UTC, Europe/Lisbon)") from None
        return value

    @field_validator("nightly_compile")
    @classmethod
    def _valid_crontab(cls, value: str | None) -> str | None:
        if not value:
            return None
        if parse_schedule(value).kind != "cron":
            raise ValueError(f"{value!r} is not a crontab line (e.g. '0 3 * * *')")
        return value


class ContextSettings(_Strict):
    """Context bundles. ``layout``: how ``assembled_context`` is written when a request
    does not say — ``memsync`` (plain headings) or ``statewave`` (Markdown sections, as
    Statewave's clients expect)."""

    layout: BundleLayout = BundleLayout.MEMSYNC


class PolicyRuleSettings(_Strict):
    """One read-policy rule: any of ``labels`` on a memory, and a caller matching
    ``caller_id`` / ``caller_type`` (each a name or a list; absent: any caller) →
    ``action``."""

    name: str | None = Field(default=None, description="shown in logs and metrics; default rule-N")
    labels: list[str] = Field(min_length=1)
    caller_id: str | list[str] | None = None
    caller_type: str | list[str] | None = None
    action: PolicyAction

    @field_validator("labels")
    @classmethod
    def _normalised(cls, value: list[str]) -> list[str]:
        return list(normalise_labels(value))


class ReadPolicySettings(_Strict):
    """The read policy (``read_policy:``): rules in order, first match wins."""

    policy_mode: PolicyMode = PolicyMode.ENFORCE
    require_caller_identity: bool = False
    rules: list[PolicyRuleSettings] = Field(default_factory=empty_list)

    def to_policy(self) -> ReadPolicy:
        """The policy these settings describe (each call builds a new, equal one)."""
        from memsync.compile.sensitivity import PolicyRule, ReadPolicy

        return ReadPolicy(
            tuple(
                PolicyRule(
                    rule.name or f"rule-{position}",
                    frozenset(rule.labels),
                    rule.action,
                    _names(rule.caller_id),
                    _names(rule.caller_type),
                )
                for position, rule in enumerate(self.rules, start=1)
            ),
            self.policy_mode,
            self.require_caller_identity,
        )


def _names(value: str | list[str] | None) -> frozenset[str]:
    if value is None:
        return frozenset()
    return frozenset([value] if isinstance(value, str) else value)


class Settings(_Strict):
    """The whole configuration file."""

    store: str = DEFAULT_STORE
    api: ApiSettings = Field(default_factory=ApiSettings)
    # Connector instances stay raw here; the connector registry validates each one
    # against its own type's model, so errors still name the file and the field.
    connectors: list[dict[str, Any]] = Field(default_factory=empty_list)
    compile: CompileSettings = Field(default_factory=CompileSettings)
    jobs: JobsSettings = Field(default_factory=JobsSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    read_policy: ReadPolicySettings = Field(default_factory=ReadPolicySettings)

    source_path: Path | None = Field(default=None, exclude=True)
    secret_paths: frozenset[str] = Field(default_factory=frozenset, exclude=True)
    unset_in_connectors: dict[int, dict[str, str]] = Field(default_factory=dict, exclude=True)
    """By connector position: each field naming a variable that is not set, and what is
    missing (``token: environment variable GITHUB_TOKEN is not set (...)``)."""

    def missing_variables(self) -> dict[str, str]:
        """By connector name, for each connector naming environment variables that are
        not set: one line naming the connector, the file, and each field and variable
        (the message of the :class:`MissingVariables` its use raises)."""
        source = self.source_path or "the configuration"
        return {
            str(self.connectors[position].get("name")): (
                f"connector '{self.connectors[position].get('name')}' in {source}: "
                + "; ".join(unset.values())
            )
            for position, unset in sorted(self.unset_in_connectors.items())
        }


ConnectorCheck = Callable[[list[Any], str, Mapping[int, Collection[str]]], list[str]]
"""Validates the raw ``connectors:`` list of a file (its label given, and by position
the fields whose variables are not set, to be left out): the problems."""


def load_settings(
    path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    check_connectors: ConnectorCheck | None = None,
    strict_environment: bool = False,
) -> Settings:
    """Load settings from ``path`` (or ``$MEMSYNC_CONFIG``; none: all defaults).

    ``$MEMSYNC_STORE`` overrides the store URL of the file. Every problem found is
    reported at once in one ``ConfigError``, one line each naming the file and the
    field; with ``check_connectors`` the connectors section is checked too, even when
    the rest of the file has problems. A variable a connector names that is not set is
    not a problem here (see :attr:`Settings.unset_in_connectors`), unless
    ``strict_environment``.
    """
    env = os.environ if environ is None else environ
    if path is None and env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV])
    document: dict[str, Any] = {}
    secret_paths: set[str] = set()
    problems: list[str] = []
    unset: dict[int, dict[str, str]] = {}
    label = str(path) if path is not None else "<defaults>"
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(
                f"{path}: cannot read the configuration file ({error.strerror})"
            ) from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: not valid YAML: {error}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping (store:, api:, ...)")
        problems.extend(
            f"{label}: {at}: a secret is never written in the file; take it from the "
            f"environment, e.g. {at.rsplit('.', 1)[-1]}: ${{{_env_name(at)}}}"
            for at in _literal_secrets(loaded, "")
        )
        missing: list[tuple[str, str]] = []
        document = _interpolate(loaded, env, "", secret_paths, missing)
        for at, variable in missing:
            said = (
                f"{at}: environment variable {variable} is not set "
                f"(set it, or write ${{{variable}:-default}})"
            )
            in_connector = _CONNECTOR_FIELD.match(at)
            if in_connector is None or strict_environment:
                problems.append(f"{label}: {said}")
            if in_connector is not None:
                # Said when the connector is built; the path within it names the field.
                position, field = int(in_connector["position"]), in_connector["field"]
                line = said.removeprefix(f"connectors[{position}].")
                fields = unset.setdefault(position, {})
                fields[field] = f"{fields[field]}; {line}" if field in fields else line
    if env.get(STORE_ENV):
        document["store"] = env[STORE_ENV]
    settings: Settings | None = None
    try:
        settings = Settings.model_validate(document)
    except ValidationError as error:
        problems.extend(_describe(label, error))
    raw_connectors = document.get("connectors")
    if check_connectors is not None and isinstance(raw_connectors, list):
        problems.extend(check_connectors(raw_connectors, label, unset))
    if problems or settings is None:
        raise ConfigError("\n".join(problems))
    if settings.compile.claims or settings.compile.policies or settings.compile.thresholds:
        # Empty sections are the built-in rules, which need no check (nor the compile
        # modules the check imports).
        from memsync.runtime.compiling.rules import CompileRules

        try:
            CompileRules.from_settings(settings.compile)
        except (ValueError, TypeError) as error:
            raise ConfigError(f"{label}: compile: {error}") from None
    for api_key in settings.api.keys:
        try:
            api_key.stored_hash()
        except ValueError as error:
            raise ConfigError(f"{label}: api.keys: {error}") from None
    return settings.model_copy(
        update={
            "source_path": path,
            "secret_paths": frozenset(secret_paths),
            "unset_in_connectors": unset,
        }
    )


def _interpolate(
    value: Any, env: Mapping[str, str], at: str, secrets: set[str], missing: list[tuple[str, str]]
) -> Any:
    """``value`` with every ``${VAR}`` replaced; each variable not set (and with no
    default) becomes an empty string and is added to ``missing`` with its path."""
    if isinstance(value, dict):
        return {
            key: _interpolate(item, env, f"{at}.{key}" if at else str(key), secrets, missing)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _interpolate(item, env, f"{at}[{index}]", secrets, missing)
            for index, item in enumerate(value)
        ]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        missing.append((at, name))
        return ""

    secrets.add(at)
    return _INTERPOLATION.sub(substitute, value)


def _literal_secrets(value: Any, at: str) -> Iterator[str]:
    """Paths of fields named like secrets whose value is written out, not ``${VAR}``."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{at}.{key}" if at else str(key)
            if isinstance(item, str) and _SECRET_NAMES.search(str(key)):
                # A default (``${VAR:-value}``) would be a secret written in the file too.
                if not _INTERPOLATION.fullmatch(item.strip()) or ("${" in item and ":-" in item):
                    yield path
            else:
                yield from _literal_secrets(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _literal_secrets(item, f"{at}[{index}]")


def _env_name(at: str) -> str:
    """A plausible environment variable for a secret at ``at``: MEMSYNC_<PATH>."""
    return "MEMSYNC_" + re.sub(r"[^A-Za-z0-9]+", "_", at).strip("_").upper()


def _describe(label: str, error: ValidationError) -> list[str]:
    # Imported on the error path only: the module builds the connectors' config models,
    # which a command that reads no connector (``runs list``) never needs.
    from memsync.connectors.config import did_you_mean

    lines = []
    for problem in error.errors():
        loc = problem["loc"]
        field = ".".join(f"[{part}]" if isinstance(part, int) else str(part) for part in loc)
        message = problem["msg"]
        if problem["type"] == "extra_forbidden":
            message = "unknown field" + did_you_mean(str(loc[-1]), _fields_at(loc[:-1]))
        lines.append(f"{label}: {field.replace('.[', '[') or '<top level>'}: {message}")
    return lines


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The field names of the settings model at ``loc`` (list indexes skipped)."""
    model: type[BaseModel] | None = Settings
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        candidates = [annotation, *get_args(annotation)]
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if model is None:  # e.g. list[ApiKey]
            for candidate in candidates:
                inner = [a for a in get_args(candidate) if isinstance(a, type)]
                model = next((a for a in inner if issubclass(a, BaseModel)), model)
    return list(model.model_fields) if model is not None else []


def redacted_dump(settings: Settings) -> dict[str, Any]:
    """The settings as plain data with every secret replaced by ``***``."""
    dumped: dict[str, Any] = _redact(settings.model_dump(mode="json"), settings.secret_paths, "")
    return dumped


def _redact(value: Any, secrets: frozenset[str], at: str) -> Any:
    if isinstance(value, dict):
        redacted: dict[str, Any] = {}
        for key, item in value.items():
            path = f"{at}.{key}" if at else str(key)
            if path == "store" and isinstance(item, str):
                # A store URL is worth seeing; only its password is secret.
                redacted[key] = redacted_store_url(item)
            elif item is not None and (path in secrets or _SECRET_NAMES.search(str(key))):
                redacted[key] = REDACTED
            else:
                redacted[key] = _redact(item, secrets, path)
        return redacted
    if isinstance(value, list):
        return [_redact(item, secrets, f"{at}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, str) and at in secrets:
        return REDACTED
    return value


def redacted_store_url(url: str) -> str:
    """A store URL fit to print: its password, if any, replaced by ``***``."""
    return re.sub(r"(://[^:/@]+:)[^@]+@", r"\1" + REDACTED + "@", url)
