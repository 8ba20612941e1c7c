"""Finding connector classes (entry points) and turning config dicts into config models.

Every connector, built-in or third-party, is found the same way: an entry point in the
``memsync.connectors`` group whose name is the connector ``type`` and whose value is the
class, e.g. ``mine = "my_package.connector:MyConnector"``, or its
:class:`~memsync.connectors.declaration.ConnectorDeclaration`, e.g. ``zendesk =
"memsync.connectors.tickets.declaration:ZENDESK"``. Loading refuses a bad class or
declaration, a name that differs from its ``type`` and a type offered twice, naming the
entry point and its distribution, so a broken plugin fails at start-up with a message
pointing at the package to fix, never halfway through a run. The application's
registry (:func:`load_registry`) sets such a plugin aside as *broken*, with that message,
and every other connector keeps working; it imports a connector's module only when its
type is first asked for, so a command that syncs one connector never imports the
client libraries of the others. A declared type's class is imported only when a
connector of it is built: validating a configuration and listing the types read the
declaration alone.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import TYPE_CHECKING, Any, TypeAlias

from pydantic import ValidationError

from memsync.connectors.config import ConnectorConfig, did_you_mean
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy, check_declared
from memsync.connectors.errors import ConnectorConfigError, ConnectorDefinitionError

if TYPE_CHECKING:
    from memsync.connectors.base import Connector
    from memsync.stopping import Sleeper

    AnyConnector: TypeAlias = Connector[Any, Any]

__all__ = [
    "ENTRY_POINT_GROUP",
    "ConnectorInfo",
    "ConnectorRegistry",
    "load_registry",
]

ENTRY_POINT_GROUP = "memsync.connectors"


# What every command that lists, addresses or schedules a connector reads of it.
_IDENTITY_FIELDS = frozenset({"name", "type", "subject", "tenant", "schedule"})


@dataclass(frozen=True, slots=True)
class ConnectorInfo:
    """One registered connector type and where it came from: ``declared`` is its class,
    or its declaration while the class is not imported yet (both carry the declared
    attributes read here); ``found_at`` is the entry point it was loaded from, or a
    description of where it was given."""

    type: str
    declared: builtins.type[AnyConnector] | ConnectorDeclaration
    found_at: str | EntryPoint

    @property
    def origin(self) -> str:
        """Where the connector came from, in words: the entry point and its distribution's
        name and version (read from the distribution's metadata now, as only messages
        and listings need it)."""
        found_at = self.found_at
        return found_at if isinstance(found_at, str) else _describe(found_at)

    @property
    def key_policy(self) -> KeyPolicy:
        return self.declared.key_policy

    @property
    def key_rationale(self) -> str:
        return self.declared.key_rationale

    @property
    def example_key(self) -> str:
        return self.declared.example_key

    @property
    def deletions(self) -> str:
        """What deletions the connector observes, or ``""``: none."""
        return self.declared.deletions

    @property
    def config_model(self) -> builtins.type[ConnectorConfig]:
        return self.declared.config_model

    @property
    def subject_fields(self) -> frozenset[str]:
        return self.declared.subject_fields


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
        self._broken: dict[str, str] = {}
        # Entry points found but not imported yet, by name (only with ``keep_going``).
        self._unloaded: dict[str, EntryPoint] = {}
        self._loading = threading.Lock()
        for info in infos:
            self._add(info)

    def _add(self, info: ConnectorInfo, *, checked: bool = False) -> None:
        if checked:
            pass  # by :meth:`_load`, which names the entry point in what it refuses
        elif isinstance(info.declared, ConnectorDeclaration):
            check_declared(info.origin, info.declared)
        else:
            from memsync.connectors.base import validate_connector_class

            validate_connector_class(info.declared)
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
        entry point is recorded in :attr:`broken` instead, and the others work; each is
        then imported when its type is first asked for (thread-safe), not here.
        """
        registry = cls()
        for entry_point in entry_points(group=ENTRY_POINT_GROUP) if found is None else found:
            earlier = registry._unloaded.get(entry_point.name)
            if earlier is None:
                registry._unloaded[entry_point.name] = entry_point
                continue
            twice = ConnectorDefinitionError(
                f"connector type '{entry_point.name}' is registered twice: by "
                f"{_describe(earlier)} and by {_describe(entry_point)}; uninstall one of "
                "them or rename its type"
            )
            if not keep_going:
                raise twice
            registry._broken.setdefault(entry_point.name, str(twice))
        if not keep_going:
            for name in list(registry._unloaded):
                registry._load(registry._unloaded.pop(name))
        return registry

    def _resolve(self, connector_type: object) -> ConnectorInfo | None:
        """The registered connector of this type, importing its entry point on first use;
        ``None`` if there is none or it is broken (then :attr:`broken` says why)."""
        if not isinstance(connector_type, str):
            return None
        with self._loading:
            entry_point = self._unloaded.pop(connector_type, None)
            if entry_point is not None:
                try:
                    self._load(entry_point)
                except ConnectorDefinitionError as error:
                    self._broken[connector_type] = str(error)
        return self._infos.get(connector_type)

    def _resolve_all(self) -> None:
        for name in list(self._unloaded):
            self._resolve(name)

    @property
    def broken(self) -> dict[str, str]:
        """Entry points set aside when loaded with ``keep_going``: name → what is wrong.
        Asking imports every connector not imported yet."""
        self._resolve_all()
        return dict(self._broken)

    def _load(self, entry_point: EntryPoint) -> None:
        try:
            loaded = entry_point.load()
        except Exception as error:
            where = _describe(entry_point)
            raise ConnectorDefinitionError(f"{where} failed to import: {error}") from error
        try:
            if isinstance(loaded, ConnectorDeclaration):
                what = "declaration"
                check_declared(f"the declaration {entry_point.value}", loaded)
            else:
                from memsync.connectors.base import Connector, validate_connector_class

                if not (isinstance(loaded, type) and issubclass(loaded, Connector)):
                    raise ConnectorDefinitionError(
                        "names neither a Connector subclass nor a ConnectorDeclaration"
                    )
                what = "class"
                validate_connector_class(loaded)
        except ConnectorDefinitionError as error:
            raise ConnectorDefinitionError(f"{_describe(entry_point)}: {error}") from error
        if loaded.type != entry_point.name:
            raise ConnectorDefinitionError(
                f"{_describe(entry_point)}: the entry point name must equal the {what}'s "
                f"type '{loaded.type}'"
            )
        self._add(ConnectorInfo(loaded.type, loaded, entry_point), checked=True)

    @classmethod
    def from_classes(cls, classes: Iterable[type[AnyConnector]]) -> ConnectorRegistry:
        """A registry of the given classes, refused like entry points would be."""
        return cls(
            ConnectorInfo(
                type=connector.type,
                declared=connector,
                found_at=f"class {connector.__module__}.{connector.__qualname__}",
            )
            for connector in classes
        )

    def __iter__(self) -> Iterator[ConnectorInfo]:
        """Registered connectors, sorted by type (every one imported)."""
        self._resolve_all()
        return iter(sorted(self._infos.values(), key=lambda info: info.type))

    def __contains__(self, connector_type: object) -> bool:
        return self._resolve(connector_type) is not None

    @property
    def types(self) -> list[str]:
        """Registered types, sorted (every one imported)."""
        self._resolve_all()
        return sorted(self._infos)

    def get(self, connector_type: str) -> type[AnyConnector]:
        """The class registered for ``connector_type``, imported now if only its
        declaration was; ``KeyError`` lists the known ones, and a declared class that
        fails to import or check raises :class:`ConnectorDefinitionError` naming the
        entry point."""
        info = self._resolve(connector_type)
        if info is None:
            raise KeyError(self._unknown_type(connector_type))
        if not isinstance(info.declared, ConnectorDeclaration):
            return info.declared
        with self._loading:
            try:
                loaded = info.declared.load()
            except ConnectorDefinitionError as error:
                raise ConnectorDefinitionError(f"{info.origin}: {error}") from error
            self._infos[info.type] = ConnectorInfo(info.type, loaded, info.found_at)
        return loaded

    def _unknown_type(self, connector_type: object) -> str:
        broken = self.broken
        if isinstance(connector_type, str) and connector_type in broken:
            return (
                f"connector type {connector_type!r} is installed but could not be loaded: "
                f"{broken[connector_type]}"
            )
        return (
            f"unknown connector type {connector_type!r}"
            f"{did_you_mean(str(connector_type), self.types, otherwise='')}; known types: "
            f"{', '.join(self.types) or 'none (is memsync installed?)'}"
        )

    def parse_configs(
        self,
        raw_configs: Sequence[Mapping[str, object]],
        *,
        source: str | None = None,
        unknown: Mapping[int, Collection[str]] | None = None,
    ) -> list[ConnectorConfig]:
        """Validate a list of connector config dicts (as read from YAML) into models.

        All problems are collected and raised together as one
        :class:`ConnectorConfigError`, each naming the connector, the source file and
        the field, e.g. "connector 'gh' in config/memsync.yaml: overlap 'soon' is not a
        duration (e.g. 2h, 30m, 7d)". Instance names must be unique; an unknown type
        lists the known ones; a subject template may only name fields the connector
        offers.

        ``unknown`` names, by position (from 0), fields of an entry whose values this
        process does not know (a secret from an environment variable that is not set
        here). Such an entry is checked without them (a field it requires is not
        reported missing) and comes back as a plain :class:`ConnectorConfig` of the
        fields every connector has: enough to list, address and schedule it, never to
        build it (:meth:`build` refuses it). Its name, type, subject, tenant and
        schedule must be known.
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
            left_out = frozenset((unknown or {}).get(position - 1, ()))
            if left_out & _IDENTITY_FIELDS:
                problems.extend(
                    f"{prefix}: {field}: its value is not known here (an environment "
                    "variable is not set); a connector's name, type, subject, tenant and "
                    "schedule are needed by every command that lists or schedules it"
                    for field in sorted(left_out & _IDENTITY_FIELDS)
                )
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
            info = self._resolve(connector_type)
            if info is None:
                problems.append(f"{prefix}: type: {self._unknown_type(connector_type)}")
                continue
            connector = info.declared
            known = {key: value for key, value in raw.items() if key not in left_out}
            try:
                config = connector.config_model.model_validate(known)
            except ValidationError as error:
                fields = list(connector.config_model.model_fields)
                said = list(_field_messages(error, fields, left_out=left_out))
                problems.extend(f"{prefix}: {message}" for message in said)
                if said or not left_out:
                    continue
            if left_out:
                # Never the connector's own model: validated without a secret it could
                # pass (an optional token), and a connector built from it would run
                # without the credentials the file asks for.
                common = ConnectorConfig.model_fields
                config = ConnectorConfig.model_validate(
                    {key: value for key, value in known.items() if key in common}
                )
            # A config may offer more (a source declared in a file the config names).
            offers = connector.subject_fields | getattr(config, "subject_fields_offered", set())
            unknown_fields = config.subject.fields - offers
            if unknown_fields:
                offered = ", ".join(sorted(offers)) or "none"
                problems.append(
                    f"{prefix}: subject: template '{config.subject}' names "
                    f"{', '.join(repr(f) for f in sorted(unknown_fields))}, which "
                    f"{connector.type} records do not have (fields offered: {offered})"
                )
                continue
            if config.webhook is not None and not getattr(connector, "webhooks", ""):
                problems.append(
                    f"{prefix}: webhook: {connector.type} connectors take no webhooks "
                    "(remove it; the scheduled re-read is how this source is read)"
                )
                continue
            configs.append(config)
        if problems:
            raise ConnectorConfigError(problems)
        return configs

    def build(self, config: ConnectorConfig, *, sleeper: Sleeper | None = None) -> AnyConnector:
        """Instantiate the connector class for a config returned by :meth:`parse_configs`;
        ``ConnectorConfigError`` for one whose own fields are not known (see
        ``unknown`` there).

        ``sleeper`` is what its waits wait on (the runtime's stop event: a stop cuts
        them short); ``None``: plain waits.
        """
        connector = self.get(config.type)
        if not isinstance(config, connector.config_model):
            raise ConnectorConfigError(
                [
                    f"connector '{config.name}' cannot be built: only the fields every "
                    "connector has are known, not its own (is an environment variable "
                    "it names not set?)"
                ]
            )
        return connector(config, sleeper=sleeper)


def _field_messages(
    error: ValidationError, fields: list[str], *, left_out: Collection[str] = ()
) -> Iterator[str]:
    for detail in error.errors(include_url=False):
        if detail["type"] == "missing" and detail["loc"] and detail["loc"][0] in left_out:
            continue  # not known here, not missing from the file
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
