"""What a REST or GraphQL source is, declared: frozen dataclasses, no behaviour of their own
beyond computing the next request from a page.

Everything here is pure (no request is sent, httpx is not imported): a declaration can be
built, compared and printed by the registry, the docs and a YAML loader alike.
:class:`~memsync.connectors.http.connector.HttpConnector` reads a source as its
:class:`HttpSource` says.

Templates (``path``, ``params``, ``key``, ``base_url``, hints) are Python format strings
rendered with :meth:`str.format_map`: a record's fields by name (``{id}``,
``{fields[project][key]}``), its parent's as ``{parent[id]}``, the configuration as
``{config.subdomain}``. A ``SecretStr`` of the configuration renders as ``**********``, so
a template cannot leak a secret; credentials reach a request only through :data:`Auth`.
Paths into a body (``records``, ``field``, pagination fields) are dotted: ``meta.has_more``,
``data.issues.nodes``, ``errors.0.extensions.code``.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import SecretStr

# At run time, not only for type checking: the YAML form validates these dataclasses
# with pydantic, which resolves every field's annotation.
from memsync.connectors._parsing import dig
from memsync.connectors.base import SourceRecord
from memsync.connectors.config import ConnectorConfig
from memsync.connectors.errors import ConnectorDefinitionError
from memsync.connectors.sessions import TicketSessions

__all__ = [
    "ApiKeyHeader",
    "Auth",
    "BasicAuth",
    "BearerAuth",
    "BodyCursor",
    "DeclarationError",
    "DeletedWhen",
    "FirstOf",
    "GraphQLPageInfo",
    "HttpSource",
    "HttpStream",
    "Incremental",
    "Item",
    "LinkHeader",
    "NextUrl",
    "NotFound",
    "OffsetLimit",
    "Page",
    "PageNumber",
    "PageRequest",
    "Pagination",
    "RecordBuilder",
    "RestartAtLatest",
    "TokenConfig",
    "dig",
]

JSONValue = Any


class DeclarationError(ConnectorDefinitionError, ValueError):
    """A declaration that cannot work (a stream without a key template, say). A
    ``ValueError`` too, so that validating the YAML form reports it where it is."""


def config_secret(config: object, field_name: str) -> str:
    """The configuration's ``field_name`` as the text a request sends (a ``SecretStr``
    revealed); refused (:class:`ConnectorDefinitionError`) when the config has no such
    text field."""
    value = getattr(config, field_name, None)
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    if isinstance(value, str):
        return value
    raise ConnectorDefinitionError(
        f"auth names config field '{field_name}', which {type(config).__name__} does not have "
        "as text or a SecretStr"
    )


class TokenConfig(ConnectorConfig):
    """A connector config with the one credential most sources need: ``token``, a
    ``SecretStr`` (write ``token: ${MY_TOKEN}`` to take it from the environment), never
    shown in reprs, logs or errors. The default auth fields read it."""

    token: SecretStr


# --- auth -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BearerAuth:
    """``Authorization: Bearer <token>`` (or another ``scheme``), the token read from the
    config field ``token``. An OAuth access token from the environment is this, with the
    config saying ``token: ${MY_OAUTH_TOKEN}``."""

    token: str = "token"
    scheme: str = "Bearer"

    def headers(self, config: object) -> dict[str, str]:
        """The headers every request carries."""
        return {"Authorization": f"{self.scheme} {config_secret(config, self.token)}"}

    def secret_values(self, config: object) -> list[str]:
        """Credentials derived from the config's secrets (scrubbed from errors and logs)."""
        return []


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """HTTP basic auth: ``username`` is a template over the config (``"{config.email}/token"``
    for Zendesk), the password the config field ``password``."""

    username: str
    password: str = "token"

    def _pair(self, config: object) -> str:
        return f"{self.username.format(config=config)}:{config_secret(config, self.password)}"

    def headers(self, config: object) -> dict[str, str]:
        """The headers every request carries."""
        encoded = base64.b64encode(self._pair(config).encode()).decode("ascii")
        return {"Authorization": f"Basic {encoded}"}

    def secret_values(self, config: object) -> list[str]:
        """The ``user:password`` pair, which is what basic auth sends (base64)."""
        return [self._pair(config)]


@dataclass(frozen=True, slots=True)
class ApiKeyHeader:
    """An API key in a header of its own (``X-API-Key: <key>``), or bare in
    ``Authorization`` as Linear wants it; ``prefix`` goes before the key."""

    header: str = "X-API-Key"
    token: str = "token"
    prefix: str = ""

    def headers(self, config: object) -> dict[str, str]:
        """The headers every request carries."""
        return {self.header: f"{self.prefix}{config_secret(config, self.token)}"}

    def secret_values(self, config: object) -> list[str]:
        """Nothing beyond the config's secrets: the key is sent as it is."""
        return []


Auth = BearerAuth | BasicAuth | ApiKeyHeader


# --- requests and pages ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One request of a stream: ``path`` (with its query, relative to the base URL),
    query ``params`` and, for GraphQL, the ``variables`` posted with the query."""

    path: str
    params: Mapping[str, str | int] = field(default_factory=dict)
    variables: Mapping[str, JSONValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Page:
    """One response: its JSON ``body``, its ``next_link`` (the ``Link`` header's
    ``rel="next"``, if any) and how many records it held."""

    body: Mapping[str, JSONValue]
    next_link: str | None
    record_count: int


def _path_and_query(url: str) -> str:
    # Only the path and query of a next link are followed: the host stays the configured
    # one, so credentials never travel to a host a response names.
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}" if parts.query else parts.path


@dataclass(frozen=True, slots=True)
class LinkHeader:
    """Follow the ``Link`` header's ``rel="next"`` URL (GitHub, RFC 8288) until there is none."""

    def first(self, request: PageRequest) -> PageRequest:
        """The first request: unchanged."""
        return request

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """The next page's request, or ``None`` after the last page."""
        return None if page.next_link is None else PageRequest(_path_and_query(page.next_link))


@dataclass(frozen=True, slots=True)
class NextUrl:
    """Follow a next-page URL the body holds at ``url`` (``next_page``, ``links.next``),
    while ``only_if`` (a path, if given) is ``true``."""

    url: str
    only_if: str | None = None

    def first(self, request: PageRequest) -> PageRequest:
        """The first request: unchanged."""
        return request

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """The next page's request, or ``None`` after the last page."""
        if self.only_if is not None and dig(page.body, self.only_if) is not True:
            return None
        target = dig(page.body, self.url)
        return PageRequest(_path_and_query(target)) if isinstance(target, str) and target else None


@dataclass(frozen=True, slots=True)
class BodyCursor:
    """A next-page token in the body at ``cursor``, sent back as the query parameter
    ``param`` (or the GraphQL variable, with ``variable=True``). Reading ends when the
    token is missing or empty, or when ``done`` (a path) is ``true``; a source that
    declares ``done`` and gives no new token before it is malformed. ``keep_params``:
    whether the next request repeats the first one's parameters (Jira's
    ``nextPageToken``) or sends the token alone (Zendesk's export ``cursor``)."""

    cursor: str
    param: str
    done: str | None = None
    keep_params: bool = True
    variable: bool = False

    def first(self, request: PageRequest) -> PageRequest:
        """The first request: unchanged."""
        return request

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """The next page's request, or ``None`` after the last page; ``ValueError`` when
        the body says there is more but gives no token."""
        if self.done is not None and dig(page.body, self.done) is True:
            return None
        token = dig(page.body, self.cursor)
        if not isinstance(token, str | int) or token == "":
            if self.done is not None:
                raise ValueError(f"not {self.done} but no new {self.cursor}")
            return None
        if self.variable:
            return PageRequest(
                request.path, request.params, {**request.variables, self.param: token}
            )
        params = {**request.params, self.param: token} if self.keep_params else {self.param: token}
        return PageRequest(request.path, params, request.variables)


@dataclass(frozen=True, slots=True)
class OffsetLimit:
    """``offset``/``limit`` parameters: pages of ``limit`` records; a shorter page is the last."""

    limit: int = 100
    offset_param: str = "offset"
    limit_param: str = "limit"

    def first(self, request: PageRequest) -> PageRequest:
        """The first request, asking for ``limit`` records from offset 0."""
        params = {**request.params, self.offset_param: 0, self.limit_param: self.limit}
        return PageRequest(request.path, params, request.variables)

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """The next page's request, or ``None`` after a short page."""
        if page.record_count < self.limit:
            return None
        offset = int(request.params[self.offset_param]) + page.record_count
        return PageRequest(request.path, {**request.params, self.offset_param: offset})


@dataclass(frozen=True, slots=True)
class PageNumber:
    """Numbered pages (``page=1,2,…`` and ``per_page``); a shorter page is the last."""

    size: int = 100
    param: str = "page"
    size_param: str = "per_page"
    first_page: int = 1

    def first(self, request: PageRequest) -> PageRequest:
        """The first request, for page ``first_page``."""
        params = {**request.params, self.param: self.first_page, self.size_param: self.size}
        return PageRequest(request.path, params, request.variables)

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """The next page's request, or ``None`` after a short page."""
        if page.record_count < self.size:
            return None
        number = int(request.params[self.param]) + 1
        return PageRequest(request.path, {**request.params, self.param: number})


@dataclass(frozen=True, slots=True)
class GraphQLPageInfo:
    """Relay connections: ``page_info`` is the path of ``pageInfo {hasNextPage endCursor}``;
    the next request sets the variable ``after`` to ``endCursor`` (and ``first`` to ``size``)."""

    page_info: str
    size: int = 50
    after: str = "after"
    first_variable: str = "first"

    def first(self, request: PageRequest) -> PageRequest:
        """The first request, asking for ``size`` nodes."""
        variables = {**request.variables, self.first_variable: self.size, self.after: None}
        return PageRequest(request.path, request.params, variables)

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """The next page's request, or ``None`` when ``hasNextPage`` is not ``true``."""
        info = dig(page.body, self.page_info)
        if not isinstance(info, Mapping) or info.get("hasNextPage") is not True:
            return None
        end = info.get("endCursor")
        if not isinstance(end, str) or not end:
            raise ValueError(f"{self.page_info}.hasNextPage but no endCursor")
        return PageRequest(request.path, request.params, {**request.variables, self.after: end})


@dataclass(frozen=True, slots=True)
class RestartAtLatest:
    """For a list sorted by update time, ascending, that pages by offset: every next page
    is the first page again, with the incremental start moved to the latest update time
    read so far (records of that time already read, by ``id_field``, are dropped). A
    record updated meanwhile goes to the end of the list and nothing moves across a page
    boundary, which offsets cannot promise (GitHub's ``since`` lists page this way).
    Needs the stream's ``incremental`` parameter to be inclusive. ``size`` records a
    page (``size_param``); a shorter page is the last. A whole page of one update time
    cannot be passed by moving the start: the read stops (:class:`StopRun`) and says to
    raise ``size``."""

    size: int = 100
    size_param: str = "per_page"
    id_field: str = "id"

    def first(self, request: PageRequest) -> PageRequest:
        """A request for ``size`` records."""
        return PageRequest(request.path, {**request.params, self.size_param: self.size})

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """``None``: the connector restarts the list itself (it knows the positions)."""
        return None


@dataclass(frozen=True, slots=True)
class FirstOf:
    """The first of ``alternatives`` that names a next page (Zendesk's per-ticket lists
    answer with cursor ``links.next`` or offset ``next_page``)."""

    alternatives: tuple[LinkHeader | NextUrl | BodyCursor | OffsetLimit | PageNumber, ...]

    def first(self, request: PageRequest) -> PageRequest:
        """The first request, as the first alternative makes it."""
        return self.alternatives[0].first(request)

    def next(self, request: PageRequest, page: Page) -> PageRequest | None:
        """The next page's request of the first alternative that has one."""
        for alternative in self.alternatives:
            following = alternative.next(request, page)
            if following is not None:
                return following
        return None


Pagination = (
    LinkHeader
    | NextUrl
    | BodyCursor
    | OffsetLimit
    | PageNumber
    | GraphQLPageInfo
    | RestartAtLatest
    | FirstOf
)


# --- streams --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Incremental:
    """How a stream reads only what changed: the window's start (minus the overlap,
    which the runner already took off; else the config's ``start``; else 1970) goes into
    the request as the query parameter ``param`` or the GraphQL variable ``variable``,
    rendered by the template ``value`` (``{since_iso}``, ``{since_epoch}``, ``{since:%Y-%m-%d
    %H:%M}``, ``{config.…}``: also a filter such as a JQL ``updated >= "…"``).

    ``field`` is the record's update time (ISO 8601, or epoch seconds with
    ``epoch=True``): its position, checkpointed by the runner. A record updated after the
    window's end is left for the next run. ``min_age``: how far before now the source
    accepts a start (Zendesk refuses a start less than a minute ago)."""

    field: str
    param: str | None = None
    variable: str | None = None
    value: str = "{since_iso}"
    epoch: bool = False
    min_age: timedelta = timedelta(0)


@dataclass(frozen=True, slots=True)
class DeletedWhen:
    """A record that shows it is deleted: ``field`` holds one of ``values`` (a status
    such as ``deleted``) or, with no values, anything but null or false (an archive flag
    or an ``archivedAt`` time). It becomes a tombstone for its key (and with
    ``with_children`` everything below it); its children are not read."""

    field: str
    values: tuple[JSONValue, ...] = ()
    with_children: bool = True

    def matches(self, item: Mapping[str, JSONValue]) -> bool:
        """Whether ``item`` shows itself deleted."""
        value = dig(item, self.field)
        if self.values:
            return value in self.values
        return value is not None and value is not False


class NotFound(enum.StrEnum):
    """What a 404 or 410 means for a stream's request.

    ``stop``: the run is misconfigured (a wrong account or path): :class:`StopRun`.
    ``empty``: the stream has nothing (a parent deleted while its children were read).
    ``parent_gone``: the parent was deleted: a tombstone for it and all below it (the
    re-read of a record that is gone)."""

    STOP = "stop"
    EMPTY = "empty"
    PARENT_GONE = "parent_gone"


@dataclass(frozen=True, slots=True)
class Item:
    """What a :data:`RecordBuilder` turns into records: one element of a page's record
    list, the parent record it was read for (a child stream's), and the configuration."""

    data: Mapping[str, JSONValue]
    parent: SourceRecord | None
    config: Any


RecordBuilder = Callable[[Item], Iterable[SourceRecord]]
"""For a source whose records need more than fields (Zendesk's audits give one record
per status change): item → records. Without one, a stream's records are
:class:`~memsync.connectors.http.connector.HttpRecord` built from the declaration."""


@dataclass(frozen=True, slots=True)
class HttpStream:
    """One list a source serves, read page by page.

    ``name`` names the runner's checkpoint (top-level streams) and ``episode_type``
    (``{type}.{name}`` by default) the episodes. ``path`` and ``params`` are templates
    (a child's path names its parent's fields: ``/tickets/{parent[id]}/comments``);
    ``records`` is the path of the record list in the body (by default ``name``).
    ``graphql`` makes the request a ``POST`` of ``{"query": graphql, "variables": …}``.

    ``key`` is the idempotency-key template, after ``{type}:`` (its rationale is the
    connector's ``key_rationale``): build it from ids only, never from content.
    ``occurred_at`` is the path of the record's event time (the incremental field by
    default); ``subject_fields`` maps a subject-template name to a record path (a
    ``parent.`` path reads the parent). ``exclude``: fields left out of the payload
    (volatile ones that would make revisions of nothing).

    A child stream's records are read for every record of its parent, have the
    parent's position, and are left out when the config's boolean ``enabled_by`` is
    false. ``ordered``: the source hands records out by non-decreasing ``incremental``
    field (see :class:`~memsync.connectors.base.Stream`), so the runner checkpoints
    after every committed batch. ``absent_from_full_read``: a key prefix (after
    ``{type}:``, a template over the config) under which a stored record that a full
    read (no start: a first run or a backfill without ``start``) did not yield is gone.
    ``sessions``: the records are a support ticket's (a ticket source), which says
    their session id and how the ticket's status maps to a resolution (see
    :mod:`memsync.connectors.sessions`); records a ``build`` makes say it themselves.
    """

    name: str
    path: str
    records: str | None = None
    key: str = ""
    episode_type: str = ""
    pagination: Pagination | None = None
    params: Mapping[str, str] = field(default_factory=dict)
    graphql: str | None = None
    variables: Mapping[str, JSONValue] = field(default_factory=dict)
    incremental: Incremental | None = None
    occurred_at: str | None = None
    subject_fields: Mapping[str, str] = field(default_factory=dict)
    exclude: frozenset[str] = frozenset()
    deleted_when: DeletedWhen | None = None
    on_not_found: NotFound = NotFound.STOP
    children: tuple[HttpStream, ...] = ()
    enabled_by: str | None = None
    ordered: bool = False
    absent_from_full_read: str | None = None
    build: RecordBuilder | None = None
    sessions: TicketSessions | None = None

    def __post_init__(self) -> None:
        if self.build is None and not self.key:
            raise DeclarationError(f"http stream '{self.name}' needs a key template")
        if isinstance(self.pagination, RestartAtLatest) and (
            self.incremental is None or self.incremental.param is None
        ):
            raise DeclarationError(
                f"http stream '{self.name}': restart_at_latest pagination needs an "
                "incremental parameter to restart at"
            )
        if self.build is None and self.incremental is None and self.occurred_at is None:
            raise DeclarationError(
                f"http stream '{self.name}' needs occurred_at or an incremental field"
            )


@dataclass(frozen=True, slots=True)
class HttpSource:
    """A whole source: where it is, how it authenticates, its streams, how it fails.

    ``base_url`` is a template over the config; a configured ``base_url`` (a fake
    server, a gateway) replaces it. ``vendor`` names the source in error messages (the
    connector type by default);
    ``auth_hint`` and ``not_found_hint`` (templates over ``config`` and ``base_url``)
    say what to check after a 401/403 and a 404. ``rate_limit_statuses`` are the
    statuses that mean "rate limited" (besides 429, GitHub's 403 with
    ``X-RateLimit-Remaining: 0`` always does); ``graphql_rate_limit_codes`` the GraphQL
    ``errors[].extensions.code`` values that do, whatever the status (Linear's
    ``RATELIMITED`` arrives as HTTP 400).
    """

    base_url: str
    streams: tuple[HttpStream, ...]
    auth: Auth | None = None
    vendor: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    auth_hint: str = "check the credentials"
    not_found_hint: str = "check base_url {base_url}"
    rate_limit_statuses: frozenset[int] = frozenset({429})
    graphql_rate_limit_codes: frozenset[str] = frozenset({"RATELIMITED"})
