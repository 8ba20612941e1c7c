"""The YAML form of an :class:`~memsync.connectors.http.declarations.HttpSource`: the same
model, for a source declared without Python.

Field names are those of the dataclasses. A choice among declarations (``auth``,
``pagination``) is a mapping of one key, the kind, to its fields (``auth: {bearer: {}}``,
``pagination: {link_header: {}}``); docs/connectors.md ("The YAML form") has a whole
source.

Durations (``min_age``) are written as in the config (``1m``, ``2h``). Every mistake is
reported, each naming the file and the field (``desk.http.yaml: streams.0.pagination:
unknown kind 'link'; known: …``), as one :class:`HttpYamlError`. A record builder
(``build``) has no YAML form: a source that needs one is declared in Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from memsync.connectors.config import did_you_mean, parse_duration
from memsync.connectors.http.declarations import (
    ApiKeyHeader,
    BasicAuth,
    BearerAuth,
    BodyCursor,
    DeletedWhen,
    FirstOf,
    GraphQLPageInfo,
    HttpSource,
    HttpStream,
    Incremental,
    LinkHeader,
    NextUrl,
    OffsetLimit,
    PageNumber,
    RestartAtLatest,
)

__all__ = ["HttpYamlError", "load_http_source", "source_from_mapping"]

_AUTH_KINDS: dict[str, type[Any]] = {
    "bearer": BearerAuth,
    "basic": BasicAuth,
    "api_key_header": ApiKeyHeader,
}
_PAGINATION_KINDS: dict[str, type[Any]] = {
    "link_header": LinkHeader,
    "next_url": NextUrl,
    "body_cursor": BodyCursor,
    "offset_limit": OffsetLimit,
    "page_number": PageNumber,
    "graphql_page_info": GraphQLPageInfo,
    "restart_at_latest": RestartAtLatest,
    "first_of": FirstOf,
}
# Fields a YAML stream may not set: a builder is Python code.
_PYTHON_ONLY = frozenset({"build"})


class HttpYamlError(ValueError):
    """A YAML declaration that is not a valid source; ``problems`` has one message per
    mistake, each starting with the file and the field."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def load_http_source(path: Path) -> HttpSource:
    """The source the YAML file at ``path`` declares; :class:`HttpYamlError` naming the
    file (and the field) when it cannot be read or is not a valid declaration."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise HttpYamlError([f"{path}: cannot be read: {error.strerror or error}"]) from None
    except yaml.YAMLError as error:
        raise HttpYamlError([f"{path}: not valid YAML: {error}"]) from None
    return source_from_mapping(data, where=str(path))


def source_from_mapping(data: object, *, where: str) -> HttpSource:
    """The source ``data`` (a YAML document's value) declares; ``where`` names it in
    errors. Raises :class:`HttpYamlError` with every mistake found."""
    problems: list[str] = []
    prepared = _Preparer(where, problems).source(data)
    # Validated even after a problem (what could not be converted was left out), so
    # that one reading reports every mistake.
    try:
        source = TypeAdapter(HttpSource).validate_python(prepared)
    except ValidationError as error:
        problems.extend(_messages(where, (), error))
    if problems:
        raise HttpYamlError(problems)
    return source


@dataclasses.dataclass
class _Preparer:
    """Turns the YAML's tagged choices into declaration objects and checks field names;
    what it cannot convert it reports in ``problems`` (pydantic checks the rest)."""

    where: str
    problems: list[str]

    def report(self, at: tuple[str | int, ...], message: str) -> None:
        field = ".".join(str(part) for part in at) or "declaration"
        self.problems.append(f"{self.where}: {field}: {message}")

    def known_fields(
        self, data: Mapping[str, Any], cls: type[Any], at: tuple[str | int, ...]
    ) -> None:
        names = [f.name for f in dataclasses.fields(cls) if f.name not in _PYTHON_ONLY]
        for name in data:
            if name not in names:
                self.report((*at, name), "unknown field" + did_you_mean(str(name), names))

    def source(self, data: object) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            self.report((), f"must be a mapping of fields, got {data!r}")
            return {}
        self.known_fields(data, HttpSource, ())
        prepared = dict(data)
        if "auth" in prepared:
            prepared["auth"] = self.tagged(prepared["auth"], _AUTH_KINDS, ("auth",))
        streams = prepared.get("streams")
        if isinstance(streams, list):
            prepared["streams"] = [self.stream(s, ("streams", i)) for i, s in enumerate(streams)]
        return prepared

    def stream(self, data: object, at: tuple[str | int, ...]) -> object:
        if not isinstance(data, Mapping):
            return data  # pydantic says what is wrong with it
        self.known_fields(data, HttpStream, at)
        prepared = dict(data)
        if "pagination" in prepared:
            pagination = self.tagged(prepared["pagination"], _PAGINATION_KINDS, (*at, "pagination"))
            prepared["pagination"] = pagination
        incremental = prepared.get("incremental")
        if isinstance(incremental, Mapping):
            self.known_fields(incremental, Incremental, (*at, "incremental"))
            min_age = incremental.get("min_age")
            if isinstance(min_age, str):
                try:
                    duration = parse_duration(min_age, field="min_age")
                except ValueError as error:
                    self.report((*at, "incremental", "min_age"), str(error))
                    duration = None
                rest = {k: v for k, v in incremental.items() if k != "min_age"}
                prepared["incremental"] = (
                    rest if duration is None else {**rest, "min_age": duration}
                )
        if isinstance(prepared.get("deleted_when"), Mapping):
            self.known_fields(prepared["deleted_when"], DeletedWhen, (*at, "deleted_when"))
        children = prepared.get("children")
        if isinstance(children, list):
            prepared["children"] = [
                self.stream(child, (*at, "children", i)) for i, child in enumerate(children)
            ]
        return prepared

    def tagged(
        self, data: object, kinds: Mapping[str, type[Any]], at: tuple[str | int, ...]
    ) -> object:
        """``{kind: {fields}}`` as the declaration of that kind, or ``None`` (reported)."""
        known = ", ".join(kinds)
        if not (isinstance(data, Mapping) and len(data) == 1):
            self.report(at, f"must be one of {known} as {{kind: {{fields}}}}, got {data!r}")
            return None
        [(kind, fields)] = data.items()
        cls = kinds.get(kind)
        if cls is None:
            self.report(at, f"unknown kind '{kind}'; known: {known}")
            return None
        fields = {} if fields is None else fields
        if not isinstance(fields, Mapping):
            self.report((*at, kind), f"must be a mapping of fields, got {fields!r}")
            return None
        self.known_fields(fields, cls, (*at, kind))
        if cls is FirstOf:
            alternatives = fields.get("alternatives")
            if not isinstance(alternatives, list) or not alternatives:
                self.report((*at, kind, "alternatives"), "must be a non-empty list")
                return None
            fields = {
                "alternatives": [
                    self.tagged(alt, _PAGINATION_KINDS, (*at, kind, "alternatives", i))
                    for i, alt in enumerate(alternatives)
                ]
            }
        try:
            return TypeAdapter(cls).validate_python(dict(fields))
        except ValidationError as error:
            self.problems.extend(_messages(self.where, (*at, kind), error))
            return None


def _messages(where: str, at: tuple[str | int, ...], error: ValidationError) -> list[str]:
    messages = []
    for detail in error.errors(include_url=False):
        # Union members and dataclass names in the location say nothing to a reader.
        loc = [p for p in detail["loc"] if not (isinstance(p, str) and p[:1].isupper())]
        field = ".".join(str(part) for part in (*at, *loc)) or "declaration"
        message = str(detail["msg"]).removeprefix("Value error, ")
        if detail["type"] == "missing":
            message = "field required"
        messages.append(f"{where}: {field}: {message}")
    return messages
