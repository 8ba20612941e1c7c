"""The connector that reads a declared :class:`~memsync.connectors.http.declarations.HttpSource`.

A subclass sets ``source`` and takes its contract attributes from a
:class:`~memsync.connectors.declaration.ConnectorDeclaration`; everything else is here:
requests (httpx, created on first use), auth headers, pagination, incremental
parameters, records (:class:`HttpRecord` or the stream's builder), parent → child reads,
deletions, and the mapping of HTTP outcomes to the connector errors:

========================================  ===============================================
response                                  raised (through the :class:`Retrier`)
========================================  ===============================================
429 (or a declared status), 403 with      :class:`RateLimited`, waited out per
``X-RateLimit-Remaining: 0``, a GraphQL   ``Retry-After`` / ``X-RateLimit-Reset``, then
rate-limit error code; a success with     :class:`RateLimitExhausted` (the run: partial)
``X-RateLimit-Remaining: 0`` and a reset  (the next request waits for the reset first)
5xx, timeout, connection error            :class:`RetryableError`, retried with backoff
401, 403                                  :class:`StopRun` with the source's auth hint
404, 410                                  per the stream's ``on_not_found``
other 4xx, a body that is not JSON, a     :class:`StopRun` naming the request
GraphQL error, a body of the wrong shape
========================================  ===============================================
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from memsync.clock import Clock, SystemClock
from memsync.connectors._parsing import parse_iso_time
from memsync.connectors.base import (
    ConfigT,
    Cursor,
    Deletion,
    KeyScope,
    Listing,
    Progress,
    RecordConnector,
    SourceRecordT,
    Stream,
    Window,
    fetch_every_stream,
)
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import RateLimited, RetryableError, StopRun
from memsync.connectors.http.declarations import (
    HttpSource,
    HttpStream,
    Item,
    NotFound,
    Page,
    PageRequest,
    RestartAtLatest,
    dig,
)
from memsync.connectors.retry import Retrier, retry_after_from_headers
from memsync.episode import JSONObject, Tombstone
from memsync.stopping import Sleeper

if TYPE_CHECKING:
    import httpx

    from memsync.connectors.sessions import SessionResolution

__all__ = ["HttpConnector", "HttpRecord"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BODY_SNIPPET_CHARS = 200
_DEFAULT_TIMEOUT_SECONDS = 30.0
# What reading yields, and fetch_stream keeps to itself, for a record updated after the
# window's end: it exists, but was not read (nor its children).
_LEFT_FOR_NEXT_RUN = object()


@dataclass(frozen=True, slots=True)
class HttpRecord:
    """A record of a declared stream: its fields, and what the declaration made of them.

    Built by the connector, never by hand: ``record_key`` from the stream's key template,
    ``position`` from its incremental field (a child's is its parent's), ``subject`` its
    ``stream``, ``id`` and ``parent_id`` and what its ``subject_fields`` name. The payload
    is ``data`` without the stream's ``exclude``.
    """

    stream: str
    data: JSONObject
    record_key: str
    position: datetime
    occurred_at: datetime
    episode_type: str
    subject: Mapping[str, SubjectTemplateField]
    exclude: frozenset[str] = frozenset()
    session_id: str | None = None
    resolution: SessionResolution | None = None

    def key(self) -> str:
        return self.record_key

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.subject

    def payload(self) -> JSONObject:
        return {name: value for name, value in self.data.items() if name not in self.exclude}


class _Gone(StopRun):
    """HTTP 404 or 410: what it means depends on the stream (:class:`NotFound`)."""


@dataclass(frozen=True, slots=True)
class _Parent:
    """A record children are read for: the record, its fields and its position."""

    record: Any
    data: Mapping[str, Any]
    position: datetime


class HttpConnector(RecordConnector[ConfigT, SourceRecordT]):
    """Reads the :class:`HttpSource` its subclass declares as ``source``.

    Repeats: every read of a window re-reads what changed in it, children included;
    keys make repeats free. A record that shows itself deleted (``deleted_when``) is a
    tombstone, reported again on every read that sees it (harmless). A full read of a
    stream with ``absent_from_full_read`` ends with a :class:`Listing` of every key it
    yielded, only when it read every page and left nothing for the next run.
    Conflicts: two records giving one key would revise each other, so key templates are
    built from ids.
    """

    #: The declared source; set by every subclass.
    source: ClassVar[HttpSource]

    def __init__(
        self,
        config: ConfigT,
        *,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        sleeper: Sleeper | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(config, sleeper=sleeper)
        #: What this instance reads: the class's :attr:`source` (see :meth:`source_of`).
        self.http_source: HttpSource = self.source_of(config)
        self._clock: Clock = clock or SystemClock()
        self._client = client
        self._transport = transport
        self._owns_client = client is None
        # Sent with each request rather than set on the client, so that a client handed
        # in (shared, or a test's) authenticates too.
        self._auth_headers = (
            {} if self.http_source.auth is None else self.http_source.auth.headers(config)
        )
        self.retrier = Retrier(config.retry.policy(), sleeper=self.sleeper, clock=clock)
        self._spent_until: datetime | None = None

    def source_of(self, config: ConfigT) -> HttpSource:
        """The source an instance with ``config`` reads: the class's :attr:`source`. A
        connector whose source is declared by its configuration (the YAML form)
        overrides this."""
        return self.source

    @property
    def base_url(self) -> str:
        """The configured ``base_url``, else the source's, rendered from the config."""
        return self.config.base_url or self.http_source.base_url.format(config=self.config)

    def secret_values(self) -> list[str]:
        """The config's secrets and the credentials the auth derives from them."""
        derived = (
            []
            if self.http_source.auth is None
            else self.http_source.auth.secret_values(self.config)
        )
        return [*super().secret_values(), *derived]

    def close(self) -> None:
        """Close the HTTP client if this connector created it."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> httpx.Client:
        """The HTTP client. Created on first use (httpx is imported by an instance, not
        the class): mapping records (the conformance kit, a dry run) needs no pool."""
        if self._client is None:
            import httpx

            timeout = getattr(self.config, "timeout", None)
            headers = {"Accept": "application/json", "User-Agent": "memsync-connector"}
            headers.update(self.http_source.headers)
            self._client = httpx.Client(
                transport=self._transport,
                timeout=_DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout.total_seconds(),
                headers=headers,
            )
        return self._client

    # --- streams --------------------------------------------------------------------------

    def streams(self) -> tuple[Stream, ...]:
        """The source's top-level streams; children are read within their parent's."""
        return tuple(Stream(s.name, ordered=s.ordered) for s in self.http_source.streams)

    def fetch(
        self, window: Window, cursor: Cursor | None
    ) -> Iterator[SourceRecordT | Deletion | Progress]:
        """Every stream in turn (see :meth:`fetch_stream`)."""
        return fetch_every_stream(self, window, cursor)

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[SourceRecordT | Deletion | Progress]:
        """Every record of ``stream`` updated in ``window`` (those updated after its end
        are left for the next run), each followed by its children, and the deletions
        seen; a :class:`Listing` last when the read was full and the stream declares
        ``absent_from_full_read``."""
        [declared] = [s for s in self.http_source.streams if s.name == stream.name]
        since = self._since(declared, window)
        present: set[str] = set()
        # Only a read that saw everything may list what exists: not one that left a
        # record for the next run (its children unread), nor one with a child stream off.
        complete = all(self._enabled(child) for child in _descendants(declared))
        restart = declared.pagination
        reading = (
            self._read_restarting(declared, window, since, restart)
            if isinstance(restart, RestartAtLatest)
            else self._read(declared, window, since, parent=None)
        )
        for item in reading:
            if item is _LEFT_FOR_NEXT_RUN:
                complete = False
                continue
            if not isinstance(item, Tombstone | Listing):
                present.add(self.idempotency_key(item))
            yield item
        full = declared.incremental is None or since is None
        if declared.absent_from_full_read and full and complete:
            prefix = declared.absent_from_full_read.format(config=self.config)
            yield Listing(KeyScope(f"{self.type}:{prefix}"), frozenset(present))

    def _since(self, stream: HttpStream, window: Window) -> datetime | None:
        """Where an incremental read starts: ``None`` for a read from the beginning."""
        if stream.incremental is None:
            return None
        return window.start or self.config.start

    def _read(
        self, stream: HttpStream, window: Window, since: datetime | None, parent: _Parent | None
    ) -> Iterator[Any]:
        request: PageRequest | None = self._first_request(stream, window, since, parent)
        seen: set[str] = set()
        while request is not None:
            try:
                body, next_link = self._send(stream, request)
            except _Gone:
                if stream.on_not_found is NotFound.STOP or parent is None:
                    raise
                if stream.on_not_found is NotFound.PARENT_GONE:
                    yield Tombstone(parent.record.key(), with_children=True)
                return
            items = self._items(stream, request, body)
            for data in items:
                yield from self._records(stream, data, window, parent)
            request = self._next_request(stream, request, Page(body, next_link, len(items)), seen)

    def _read_restarting(
        self,
        stream: HttpStream,
        window: Window,
        since: datetime | None,
        restart: RestartAtLatest,
    ) -> Iterator[Any]:
        """A top-level stream paged by :class:`RestartAtLatest`: each page is the first
        one again, from the latest update time read (``latest``), without the records of
        that time already read."""
        latest, read_at_latest = since, set[str]()
        while True:
            request = self._first_request(stream, window, latest, None)
            body, _ = self._send(stream, request)
            items = self._items(stream, request, body)
            moved = False
            for data in items:
                position = self._position(stream, data)
                identity = json.dumps(dig(data, restart.id_field))
                if latest is not None and (
                    position < latest or (position == latest and identity in read_at_latest)
                ):
                    continue  # read on an earlier page
                if latest is None or position > latest:
                    latest, read_at_latest, moved = position, set(), True
                read_at_latest.add(identity)
                yield from self._records(stream, data, window, None)
            if len(items) < restart.size:
                return
            if not moved:
                raise StopRun(
                    self._malformed(
                        stream,
                        request,
                        f"a whole page of {len(items)} records updated at {latest}: the "
                        f"start cannot move past it; raise the page size ({restart.size})",
                    )
                )

    def _items(
        self, stream: HttpStream, request: PageRequest, body: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """The page's records (``stream.records``); :class:`StopRun` if it has none."""
        records_path = stream.records or stream.name
        items = dig(body, records_path)
        if not isinstance(items, list):
            raise StopRun(self._malformed(stream, request, f"no '{records_path}' list"))
        for data in items:
            if not isinstance(data, dict):
                raise StopRun(self._malformed(stream, request, f"a record is {data!r}"))
        return items

    def _records(
        self, stream: HttpStream, data: dict[str, Any], window: Window, parent: _Parent | None
    ) -> Iterator[Any]:
        position = parent.position if parent is not None else self._position(stream, data)
        if position > window.end:
            yield _LEFT_FOR_NEXT_RUN
            return
        records = (
            list(stream.build(Item(data, parent.record if parent else None, self.config)))
            if stream.build is not None
            else [self._record(stream, data, position, parent)]
        )
        if stream.deleted_when is not None and stream.deleted_when.matches(data):
            for record in records:
                yield Tombstone(record.key(), with_children=stream.deleted_when.with_children)
            return
        for record in records:
            yield record
            for child in stream.children:
                if self._enabled(child):
                    yield from self._read(child, window, None, _Parent(record, data, position))

    def _enabled(self, stream: HttpStream) -> bool:
        return stream.enabled_by is None or bool(getattr(self.config, stream.enabled_by))

    def _record(
        self, stream: HttpStream, data: dict[str, Any], position: datetime, parent: _Parent | None
    ) -> HttpRecord:
        parent_data = parent.data if parent is not None else {}
        occurred_path = (
            stream.occurred_at or (stream.incremental and stream.incremental.field) or ""
        )
        occurred = self._time(dig(data, occurred_path), f"{stream.name} {occurred_path}", False)
        # Every record offers its stream and ids; the declaration adds what it names.
        subject: dict[str, SubjectTemplateField] = {
            "stream": stream.name,
            "id": _subject_value(data.get("id")),
            "parent_id": _subject_value(parent_data.get("id")),
        }
        subject |= {
            name: _subject_value(
                dig(parent_data, path.removeprefix("parent."))
                if path.startswith("parent.")
                else dig(data, path)
            )
            for name, path in stream.subject_fields.items()
        }
        sessions = stream.sessions
        return HttpRecord(
            stream=stream.name,
            data=data,
            record_key=f"{self.type}:{self._render(stream.key, data, parent_data)}",
            position=position,
            occurred_at=occurred,
            episode_type=stream.episode_type or f"{self.type}.{stream.name}",
            subject=subject,
            exclude=stream.exclude,
            session_id=None
            if sessions is None
            else f"{self.type}:{self._render(sessions.session, data, parent_data)}",
            # Dated by the record's own update time: where it was read may differ.
            resolution=None if sessions is None else sessions.resolution(data, occurred),
        )

    def _position(self, stream: HttpStream, data: Mapping[str, Any]) -> datetime:
        if stream.incremental is None:
            return self._time(dig(data, stream.occurred_at or ""), stream.name, False)
        field = stream.incremental.field
        return self._time(dig(data, field), f"{stream.name} {field}", stream.incremental.epoch)

    def _time(self, value: object, what: str, epoch: bool) -> datetime:
        if epoch or (isinstance(value, int | float) and not isinstance(value, bool)):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise StopRun(f"{self.type}: {what} is {value!r}, expected epoch seconds")
            return datetime.fromtimestamp(value, UTC)
        return parse_iso_time(value, what, source=self.type)

    def _render(self, template: str, data: Mapping[str, Any], parent: Mapping[str, Any]) -> str:
        try:
            return template.format_map({**data, "parent": parent, "config": self.config})
        except (KeyError, IndexError, AttributeError) as error:
            raise StopRun(
                f"{self.type} '{self.name}': template {template!r} names a field the "
                f"response lacks: {error}"
            ) from error

    # --- requests -------------------------------------------------------------------------

    def _first_request(
        self, stream: HttpStream, window: Window, since: datetime | None, parent: _Parent | None
    ) -> PageRequest:
        parent_data = parent.data if parent is not None else {}
        params: dict[str, str | int] = {
            name: self._render(value, {}, parent_data) for name, value in stream.params.items()
        }
        variables = dict(stream.variables)
        incremental = stream.incremental
        if incremental is not None and parent is None:
            start = min(since or _EPOCH, window.end - incremental.min_age)
            value = incremental.value.format(
                since=start,
                since_iso=start.isoformat(),
                since_epoch=max(int(start.timestamp()), 0),
                config=self.config,
            )
            if incremental.param is not None:
                params[incremental.param] = value
            if incremental.variable is not None:
                variables[incremental.variable] = value
        request = PageRequest(self._render(stream.path, {}, parent_data), params, variables)
        return request if stream.pagination is None else stream.pagination.first(request)

    def _next_request(
        self, stream: HttpStream, request: PageRequest, page: Page, seen: set[str]
    ) -> PageRequest | None:
        if stream.pagination is None:
            return None
        try:
            following = stream.pagination.next(request, page)
        except ValueError as error:
            raise StopRun(self._malformed(stream, request, str(error))) from error
        if following is None:
            return None
        # A source that hands out the same page again would be read forever.
        seen.add(_identity(request))
        if _identity(following) in seen:
            raise StopRun(self._malformed(stream, request, f"pagination repeats {following}"))
        return following

    def _send(self, stream: HttpStream, request: PageRequest) -> tuple[dict[str, Any], str | None]:
        return self.retrier.call(
            lambda: self._send_once(stream, request), what=f"{self.type} '{self.name}'"
        )

    def _send_once(
        self, stream: HttpStream, request: PageRequest
    ) -> tuple[dict[str, Any], str | None]:
        import httpx

        what = self._describe(stream, request)
        if self._spent_until is not None:
            # The last response said no request is left until its reset: wait for it
            # (through the retrier, so within its caps) instead of sending one refused.
            wait = max((self._spent_until - self._clock.now()).total_seconds(), 0.0)
            self._spent_until = None
            raise RateLimited(f"{what}: not sent, X-RateLimit-Remaining was 0", retry_after=wait)
        # Parameters are added to a query the path already has (a declared
        # ``?sort=updated_at``), where httpx's ``params=`` would replace it.
        url = httpx.URL(f"{self.base_url}{request.path}").copy_merge_params(dict(request.params))
        try:
            if stream.graphql is None:
                response = self.client.get(url, headers=self._auth_headers)
            else:
                query = {"query": stream.graphql, "variables": dict(request.variables)}
                response = self.client.post(url, json=query, headers=self._auth_headers)
        except httpx.TimeoutException as error:
            raise RetryableError(f"{what} timed out ({type(error).__name__})") from error
        except httpx.TransportError as error:
            raise RetryableError(f"{what} failed: {type(error).__name__}: {error}") from error
        body = _json_object(response)
        self._raise_for_status(what, response, body)
        if body is None:
            vendor = self.http_source.vendor or self.type
            raise StopRun(
                f"{what}: HTTP {response.status_code} with a body that is not a JSON object "
                f"(content-type {response.headers.get('content-type', 'none')!r}): "
                f"{_snippet(response)}. Is base_url pointing at a {vendor} API?"
            )
        if stream.graphql is not None and body.get("errors"):
            raise StopRun(f"{what}: GraphQL errors: {_snippet(response)}")
        self._note_spent_budget(response)
        next_link = response.links.get("next", {}).get("url")
        return body, next_link

    def _note_spent_budget(self, response: httpx.Response) -> None:
        """Remember when the budget comes back if this response spent its last request."""
        if response.headers.get("x-ratelimit-remaining", "").strip() != "0":
            return
        wait = retry_after_from_headers(response.headers, self._clock.now())
        if wait:
            self._spent_until = self._clock.now() + timedelta(seconds=wait)

    def _raise_for_status(
        self, what: str, response: httpx.Response, body: dict[str, Any] | None
    ) -> None:
        status = response.status_code
        wait = retry_after_from_headers(response.headers, self._clock.now())
        if (
            status in self.http_source.rate_limit_statuses
            or (status == 403 and response.headers.get("x-ratelimit-remaining") == "0")
            or self._graphql_rate_limited(body)
        ):
            raise RateLimited(f"{what}: HTTP {status} {_snippet(response)}", retry_after=wait)
        if status >= 500:
            raise RetryableError(f"{what}: HTTP {status} {_snippet(response)}", retry_after=wait)
        hints = {"config": self.config, "base_url": self.base_url}
        if status in (401, 403):
            raise StopRun(f"{what}: HTTP {status}: {self.http_source.auth_hint.format_map(hints)}")
        if status in (404, 410):
            hint = self.http_source.not_found_hint.format_map(hints)
            raise _Gone(f"{what}: HTTP {status}: not found. {hint}")
        if status >= 400:
            raise StopRun(f"{what}: HTTP {status} {_snippet(response)}")

    def _graphql_rate_limited(self, body: Mapping[str, Any] | None) -> bool:
        errors = body.get("errors") if body is not None else None
        return isinstance(errors, list) and any(
            dig(error, "extensions.code") in self.http_source.graphql_rate_limit_codes
            for error in errors
        )

    def _describe(self, stream: HttpStream, request: PageRequest) -> str:
        method = "GET" if stream.graphql is None else "POST"
        return f"{self.type} '{self.name}': {method} {request.path.partition('?')[0]}"

    def _malformed(self, stream: HttpStream, request: PageRequest, problem: str) -> str:
        return f"{self._describe(stream, request)}: unexpected response shape: {problem}"


def _descendants(stream: HttpStream) -> Iterator[HttpStream]:
    for child in stream.children:
        yield child
        yield from _descendants(child)


def _identity(request: PageRequest) -> str:
    return json.dumps([request.path, request.params, request.variables], sort_keys=True)


def _subject_value(value: object) -> SubjectTemplateField:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _snippet(response: httpx.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    if len(text) > _BODY_SNIPPET_CHARS:
        text = text[:_BODY_SNIPPET_CHARS] + "…"
    return repr(text)
