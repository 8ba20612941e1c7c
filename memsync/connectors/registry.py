"""Finding connector classes (entry points) and turning config dicts into config models.

Every connector, built-in or third-party, is found the same way: an entry point in the
``memsync.connectors`` group whose name is the connector ``type`` and whose value is the
class, e.g. ``zendesk = "memsync.connectors.tickets:ZendeskConnector"``. Loading refuses
a bad class, a name that differs from the class's ``type`` and a type offered twice,
naming the entry point and its distribution, so a broken plugin fails at start-up with
a message pointing at the package to fix, never halfway through a run. The application's
registry (:func:`load_registry`) sets such a plugin aside as *broken*, with that message,
and every other connector keeps working.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import ValidationError

from memsync.connectors.base import Connector, KeyPolicy, validate_connector_class
from memsync.connectors.config import ConnectorConfig, did_you_mean
from memsync.connectors.errors import ConnectorConfigError, ConnectorDefinitionError
from memsync.stopping import Sleeper

__all__ = [
    "ENTRY_POINT_GROUP",
    "ConnectorInfo",
    "ConnectorRegistry",
    "load_registry",
]

ENTRY_POINT_GROUP = "memsync.connectors"

AnyConnector = Connector[Any, Any]


@dataclass(frozen=True, slots=True)
class ConnectorInfo:
    """One registered connector class and where it came from."""

    type: str
    connector_class: builtins.type[AnyConnector]
    origin: str

    @property
    def key_policy(self) -> KeyPolicy:
        return self.connector_class.key_policy

    @property
    def key_rationale(self) -> str:
        return self.connector_class.key_rationale

    @property
    def example_key(self) -> str:
        return self.connector_class.example_key

    @property
    def deletions(self) -> str:
        """What deletions the connector observes, or ``""``: none."""
        return self.connector_class.deletions


def _describe(entry_point: EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    where = f" (distribution {dist.name} {dist.version})" if dist is not None else ""
    return f"entry point '{entry_point.name} = {entry_point.value}'{where}"


class ConnectorRegistry:
    """The connector types available to this process, by ``type``.

    Built from entry points with :meth:`from_entry_points` (or :func:`load_registry`),
    or from classes with :meth:`from_classes` (tests, embedding). Registering the same
    type twice is refused, whatever the two classes are.
    """

    def __init__(self, infos: Iterable[ConnectorInfo] = ()) -> None:
        self._infos: dict[str, ConnectorInfo] = {}
        self.broken: dict[str, str] = {}
        """Entry points set aside when loaded with ``keep_going``: name → what is wrong."""
        for info in infos:
            self._add(info)

    def _add(self, info: ConnectorInfo) -> None:
        validate_connector_class(info.connector_class)
        existing = self._infos.get(info.type)
        if existing is not None:
            raise ConnectorDefinitionError(
                f"connector type '{info.type}' is registered twice: by {existing.origin} "
                f"and by {info.origin}; uninstall one of them or rename its type"
            )
        self._infos[info.type] = info

    @classmethod
    def from_entry_points(
        cls, found: Iterable[EntryPoint] | None = None, *, keep_going: bool = False
    ) -> ConnectorRegistry:
        """Load every entry point of the ``memsync.connectors`` group (or ``found``).

        Raises :class:`ConnectorDefinitionError` naming the entry point and
        distribution for an import failure, a bad class, a name that is not the class's
        ``type``, an empty rationale, or a duplicate type. With ``keep_going`` such an
        entry point is recorded in :attr:`broken` instead, and the others load.
        """
        registry = cls()
        for entry_point in entry_points(group=ENTRY_POINT_GROUP) if found is None else found:
            try:
                registry._load(entry_point)
            except ConnectorDefinitionError as error:
                if not keep_going:
                    raise
                registry.broken[entry_point.name] = str(error)
        return registry

    def _load(self, entry_point: EntryPoint) -> None:
        origin = _describe(entry_point)
        try:
            loaded = entry_point.load()
        except Exception as error:
            raise ConnectorDefinitionError(f"{origin} failed to import: {error}") from error
        if not (isinstance(loaded, type) and issubclass(loaded, Connector)):
            raise ConnectorDefinitionError(f"{origin} does not name a Connector subclass")
        try:
            validate_connector_class(loaded)
        except ConnectorDefinitionError as error:
            raise ConnectorDefinitionError(f"{origin}: {error}") from error
        if loaded.type != entry_point.name:
            raise ConnectorDefinitionError(
                f"{origin}: the entry point name must equal the class's type '{loaded.type}'"
            )
        self._add(ConnectorInfo(type=loaded.type, connector_class=loaded, origin=origin))

    @classmethod
    def from_classes(cls, classes: Iterable[type[AnyConnector]]) -> ConnectorRegistry:
        """A registry of the given classes, refused like entry points would be."""
        return cls(
            ConnectorInfo(
                type=connector.type,
                connector_class=connector,
                origin=f"class {connector.__module__}.{connector.__qualname__}",
            )
            for connector in classes
        )

    def __iter__(self) -> Iterator[ConnectorInfo]:
        """Registered connectors, sorted by type."""
        return iter(sorted(self._infos.values(), key=lambda info: info.type))

    def __contains__(self, connector_type: object) -> bool:
        return connector_type in self._infos

    @property
    def types(self) -> list[str]:
        """Registered types, sorted."""
        return sorted(self._infos)

    def get(self, connector_type: str) -> type[AnyConnector]:
        """The class registered for ``connector_type``; ``KeyError`` lists the known ones."""
        try:
            return self._infos[connector_type].connector_class
        except KeyError:
            raise KeyError(self._unknown_type(connector_type)) from None

    def _unknown_type(self, connector_type: object) -> str:
        if isinstance(connector_type, str) and connector_type in self.broken:
            return (
                f"connector type {connector_type!r} is installed but could not be loaded: "
                f"{self.broken[connector_type]}"
            )
        return (
            f"unknown connector type {connector_type!r}"
            f"{did_you_mean(str(connector_type), self.types, otherwise='')}; known types: "
            f"{', '.join(self.types) or 'none (is memsync installed?)'}"
        )

    def parse_configs(
        self, raw_configs: Sequence[Mapping[str, object]], *, source: str | None = None
    ) -> list[ConnectorConfig]:
        """Validate a list of connector config dicts (as read from YAML) into models.

        All problems are collected and raised together as one
        :class:`ConnectorConfigError`, each naming the connector, the source file and
        the field, e.g. "connector 'gh' in config/memsync.yaml: overlap 'soon' is not a
        duration (e.g. 2h, 30m, 7d)". Instance names must be unique; an unknown type
        lists the known ones; a subject template may only name fields the connector
        offers.
        """
        problems: list[str] = []
        configs: list[ConnectorConfig] = []
        first_seen: dict[str, int] = {}
        suffix = f" in {source}" if source else ""
        for position, raw in enumerate(raw_configs, start=1):
            name = raw.get("name") if isinstance(raw, Mapping) else None
            label = f"connector '{name}'" if isinstance(name, str) else f"connector #{position}"
            prefix = f"{label}{suffix}"
            if not isinstance(raw, Mapping):
                problems.append(f"{prefix}: must be a mapping of fields, got {raw!r}")
                continue
            if isinstance(name, str):
                if name in first_seen:
                    problems.append(
                        f"{prefix}: name '{name}' is used by entries {first_seen[name]} and "
                        f"{position}; connector names must be unique"
                    )
                    continue
                first_seen[name] = position
            connector_type = raw.get("type")
            if connector_type is None:
                problems.append(
                    f"{prefix}: type: field required; known types: {', '.join(self.types)}"
                )
                continue
            if connector_type not in self._infos:
                problems.append(f"{prefix}: type: {self._unknown_type(connector_type)}")
                continue
            connector = self._infos[str(connector_type)].connector_class
            try:
                config = connector.config_model.model_validate(dict(raw))
            except ValidationError as error:
                fields = list(connector.config_model.model_fields)
                problems.extend(
                    f"{prefix}: {message}" for message in _field_messages(error, fields)
                )
                continue
            unknown_fields = config.subject.fields - connector.subject_fields
            if unknown_fields:
                offered = ", ".join(sorted(connector.subject_fields)) or "none"
                problems.append(
                    f"{prefix}: subject: template '{config.subject}' names "
                    f"{', '.join(repr(f) for f in sorted(unknown_fields))}, which "
                    f"{connector.type} records do not have (fields offered: {offered})"
                )
                continue
            configs.append(config)
        if problems:
            raise ConnectorConfigError(problems)
        return configs

    def build(self, config: ConnectorConfig, *, sleeper: Sleeper | None = None) -> AnyConnector:
        """Instantiate the connector class for a config returned by :meth:`parse_configs`.

        ``sleeper`` is what its waits wait on (the runtime's stop event: a stop cuts
        them short); ``None``: plain waits.
        """
        return self.get(config.type)(config, sleeper=sleeper)


def _field_messages(error: ValidationError, fields: list[str]) -> Iterator[str]:
    for detail in error.errors(include_url=False):
        field = ".".join(str(part) for part in detail["loc"]) or "config"
        message = str(detail["msg"]).removeprefix("Value error, ")
        if detail["type"] == "extra_forbidden":
            message = "unknown field" + did_you_mean(str(detail["loc"][-1]), fields)
        elif detail["type"] == "missing":
            message = "field required"
        # Our own validators already start their message with the field name.
        if message.split(" ", 1)[0].rstrip(":") == field.rsplit(".", 1)[-1]:
            yield message
        else:
            yield f"{field}: {message}"


def load_registry() -> ConnectorRegistry:
    """The registry of every installed connector (built-ins included). A plugin that
    fails to load is listed in :attr:`ConnectorRegistry.broken`; the rest work."""
    return ConnectorRegistry.from_entry_points(keep_going=True)
