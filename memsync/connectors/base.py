"""The connector contract: one narrow extension point, driven by the framework.

A connector reads one source. It declares, as class attributes (or in a
:class:`~memsync.connectors.declaration.ConnectorDeclaration` it takes them from), its
``type``, its ``key_policy`` and a written ``key_rationale``; it implements :meth:`Connector.fetch`
(read everything updated in a window), :meth:`Connector.idempotency_key` and a few small
hooks that map a record to an episode. A source that falls into parts read on their own
(a repository's issues, its comments; a Slack channel each) declares them as streams
(:class:`Stream`), each checkpointed by the runner on its own. A connector that can see
deletions says which in ``deletions`` and reports them from ``fetch`` as a
:class:`~memsync.episode.Tombstone` (this record is gone) or a :class:`Listing` (every
record of this scope that exists is among these). The framework owns the rest: windows
and overlap, cursors and checkpoints, batching, ingest, run records, and the retry
policy (connectors call :mod:`memsync.connectors.retry` with the configured caps).
"""

from __future__ import annotations

import abc
import builtins
import inspect
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Protocol,
    TypeVar,
    final,
    runtime_checkable,
)

from memsync.connectors.checkpoints import (
    DEFAULT_STREAM,
    STREAM_NAME_LENGTH,
    Cursor,
    Window,
    require_aware,
)
from memsync.connectors.config import (
    ConnectorConfig,
    SubjectTemplateError,
    SubjectTemplateField,
)
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy, check_declared
from memsync.connectors.errors import ConnectorDefinitionError, SkipRecord
from memsync.connectors.webhooks import WebhookReceiver
from memsync.episode import SOURCE_UPDATED_AT, EpisodeDraft, JSONObject, KeyScope, Tombstone
from memsync.scrub import secret_values
from memsync.stopping import Sleeper, StopEvent

if TYPE_CHECKING:
    # Only a type here: what a record says of its session is read by sessions, which
    # imports the support types of memsync.compile, more than a connector needs to load.
    from memsync.connectors.sessions import SessionResolution

# KeyScope and Tombstone (from memsync.episode) are what a connector reports deletions
# with, so the contract offers them too.
__all__ = [
    "DEFAULT_STREAM",
    "ConfigT",
    "Connector",
    "Cursor",
    "Deletion",
    "KeyPolicy",
    "KeyScope",
    "Listing",
    "Progress",
    "RecordConnector",
    "RecordT",
    "SessionRecord",
    "SourceRecord",
    "SourceRecordT",
    "Stream",
    "Tombstone",
    "Window",
    "fetch_every_stream",
    "validate_connector_class",
]


@dataclass(frozen=True, slots=True)
class Listing:
    """A fetch's statement that it read a whole scope: every record of ``scope`` that
    exists at the source now has its key in ``present``, so a stored record of the
    scope that is not there is gone (the runtime tombstones it).

    Only a complete read proves an absence: a connector yields a listing only after it
    read the scope to its end, never for a read cut short, a page limit or a filter
    that hides records (edited-only, updated-since). The keys must be those the
    records map to. Subclasses may decide absence differently (:meth:`gone`).
    """

    scope: KeyScope
    present: frozenset[str]

    def gone(self, key: str) -> bool:
        """Whether the stored record ``key`` (in :attr:`scope`) is absent at the source."""
        return key not in self.present


Deletion = Tombstone | Listing
"""What a fetch may yield besides records: what it saw deleted."""


@dataclass(frozen=True, slots=True)
class Progress:
    """A fetch's statement of where its read stands, yielded between records: every
    record and deletion of the read before this point has been yielded, and a read of
    the stream given a :class:`Cursor` carrying ``token`` continues from here.

    It lets a stream whose read does not hand records out as it goes (a re-read that
    looks for edits among old records) resume where it stopped: the runner stores
    ``token`` and ``note`` with the stream's checkpoint in the transaction that commits
    what was yielded before it (at once when nothing waits to be stored, else with the
    batch it joins), and gives that cursor to the next read. Repeats: a read yields as
    many as it likes; the latest committed one counts, and the checkpoint's position
    still only moves forward. When a stream is read to its end, the last one is stored
    with the checkpoint at the run start, so a token may carry what the next read needs
    to know about this one. ``note`` says the same for people (``state show``, the run
    record, a foreground ``sync``), e.g. "overlap re-read 8,400/≈20,160 messages in 3
    runs, resumes at ts …". A backfill ignores both.
    """

    token: str
    note: str | None = None
    #: Whether the read got further than the token it started from; ``False`` when the
    #: connector only says why it did not (then a run that stored nothing is ``failed``).
    advanced: bool = True


@dataclass(frozen=True, slots=True)
class Stream:
    """A part of a source that is read, and checkpointed, on its own: a repository's
    issues, its comments, one Slack channel.

    ``name`` is stable across runs: the runner keeps the stream's checkpoint under it,
    so a stream that gets another name (a channel configured by id instead of name) is
    read from ``start`` again (keys keep that idempotent). ``ordered`` promises what lets
    the runner checkpoint a stream after every committed batch: the stream yields its
    records in non-decreasing :meth:`Connector.record_cursor` order, or at least every
    record not yet yielded would be read again by a read of the stream starting at the
    highest position yielded so far (boundary ties included: windows are inclusive). An
    unordered stream is checkpointed only when it was read to its end.
    """

    name: str
    ordered: bool = False

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip() or self.name == "*":
            raise ValueError(f"stream name {self.name!r} must be non-empty text, not '*'")
        if len(self.name) > STREAM_NAME_LENGTH:
            raise ValueError(
                f"stream name {self.name[:40]!r}… is over {STREAM_NAME_LENGTH} characters"
            )


ConfigT = TypeVar("ConfigT", bound=ConnectorConfig)
RecordT = TypeVar("RecordT")


class Connector(abc.ABC, Generic[ConfigT, RecordT]):
    """Reads one source and maps its records to episode drafts.

    Subclasses set the class attributes and implement the abstract methods; the
    framework calls :meth:`fetch` with a window, then :meth:`to_episode` on each record,
    and ingests the drafts. Contract, including repeats and conflicts:

    - Re-reading is normal: windows overlap on purpose and backfills re-read
      everything. The same logical record must always give the same key, so a repeat
      is recognised by ingest and stores nothing.
    - Under ``identity``, an edited record keeps its key and changes its payload, so
      ingest stores a revision. Under ``content``, an edited record gets a new key.
    - Two different records must never share a key; if they did, one would overwrite
      (revise) the other.
    - A record whose subject changes keeps its key: ingest moves it (a revision).
    - Deletions are reported only when the source shows them (see :attr:`deletions`):
      a :class:`~memsync.episode.Tombstone` for a record seen deleted, a
      :class:`Listing` after reading a whole scope. Reporting a deletion again is
      harmless; reporting one that did not happen retires true memories, so a
      connector that cannot tell says nothing.
    - Connectors never touch storage, the scheduler or the clock of the run loop.
    """

    #: The registry name, also the first segment of every key (``zendesk:…``).
    type: ClassVar[str]
    #: What "the same event" means; see :class:`KeyPolicy`.
    key_policy: ClassVar[KeyPolicy]
    #: One or two sentences on why the key is built the way it is. Required.
    key_rationale: ClassVar[str]
    #: The config model (a :class:`ConnectorConfig` subclass) the registry validates.
    # builtins.type: inside this class body, ``type`` is the attribute above.
    config_model: ClassVar[builtins.type[ConnectorConfig]]
    #: A realistic key, for docs and ``memsync connectors list``.
    example_key: ClassVar[str]
    #: The fields a record offers to the subject template (checked when config loads).
    subject_fields: ClassVar[frozenset[str]] = frozenset()
    #: What deletions ``fetch`` observes and reports, and what it cannot see, in a
    #: sentence or two (shown by ``memsync connectors list``). Empty: it reports none.
    deletions: ClassVar[str] = ""
    #: What pushed deliveries :meth:`webhook_receiver` takes, in a few words; empty: none
    #: (a ``webhook:`` in the configuration is refused when it is validated).
    webhooks: ClassVar[str] = ""
    #: For a connector with one stream (the default :meth:`streams`): whether ``fetch``
    #: yields records in non-decreasing :meth:`record_cursor` order (see
    #: :class:`Stream`). Only then may the runner checkpoint in the middle of a run;
    #: otherwise a record with an earlier position could still be on its way when a
    #: run stops.
    ordered_by_cursor: ClassVar[bool] = False
    #: Where the attributes above came from, if the class was declared with
    #: ``declaration=`` (see :mod:`memsync.connectors.declaration`); else ``None``.
    declaration: ClassVar[ConnectorDeclaration | None] = None

    def __init_subclass__(
        cls, declaration: ConnectorDeclaration | None = None, **kwargs: Any
    ) -> None:
        """``class MyConnector(Connector[...], declaration=MINE)`` takes the declared
        attributes from ``MINE``, so the registry can read them without importing
        this class and they are written once."""
        super().__init_subclass__(**kwargs)
        if declaration is None:
            return
        cls.declaration = declaration
        cls.type = declaration.type
        cls.key_policy = declaration.key_policy
        cls.key_rationale = declaration.key_rationale
        cls.config_model = declaration.config_model
        cls.example_key = declaration.example_key
        cls.subject_fields = declaration.subject_fields
        cls.deletions = declaration.deletions
        cls.webhooks = declaration.webhooks

    def __init__(self, config: ConfigT, *, sleeper: Sleeper | None = None) -> None:
        """``sleeper`` is what the connector's waits (its :class:`~memsync.connectors.
        retry.Retrier`'s) wait on: the runtime hands in its process's stop event, so a
        stop cuts a wait short; by default nothing does. A subclass that overrides
        ``__init__`` accepts ``sleeper`` as a keyword and passes it on (the registry
        builds every connector with it, and refuses a class that does not take it)."""
        self.config = config
        self.sleeper: Sleeper = sleeper or StopEvent()

    @property
    def name(self) -> str:
        """The configured instance name."""
        return self.config.name

    # --- what a connector implements ----------------------------------------------------

    @abc.abstractmethod
    def fetch(
        self, window: Window, cursor: Cursor | None
    ) -> Iterator[RecordT | Deletion | Progress]:
        """Yield every record updated in ``window``, paginating to the end, and the
        deletions it saw (a connector with :attr:`deletions` only).

        Repeats: may yield records ingested before (the window overlaps the previous
        one); that is expected. Retries: transient failures are retried within the
        configured caps, honouring ``Retry-After`` / reset headers; past the caps it
        raises :class:`~memsync.connectors.errors.RateLimitExhausted` or
        :class:`~memsync.connectors.errors.RetryableError`. Fatal conditions raise
        :class:`~memsync.connectors.errors.StopRun`. Records already yielded stay valid
        when a later page fails. ``cursor`` is the last committed checkpoint; the
        window was already derived from it, so connectors may ignore it, unless they
        yield :class:`Progress` and resume from its ``token``.
        """

    def streams(self) -> Sequence[Stream]:
        """The streams this instance reads, in the order a run reads them; names unique.

        The default is one stream, :data:`DEFAULT_STREAM`, read by :meth:`fetch` and
        ordered as :attr:`ordered_by_cursor` says. A connector with several overrides
        this and :meth:`fetch_stream` (and reads every stream in :meth:`fetch`, e.g. with
        :func:`fetch_every_stream`). Computed from the configuration alone: no request.
        """
        return (Stream(DEFAULT_STREAM, ordered=self.ordered_by_cursor),)

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[RecordT | Deletion | Progress]:
        """Yield what ``stream`` (one of :meth:`streams`) holds updated in ``window``, and
        the deletions seen in it, as :meth:`fetch` does for the whole source.

        The runner reads each stream with its own window, derived from the stream's own
        checkpoint (``cursor``). A :class:`Listing` yielded here must cover only what
        this stream read completely. The default, for a connector with one stream, is
        :meth:`fetch`.
        """
        return self.fetch(window, cursor)

    @abc.abstractmethod
    def idempotency_key(self, record: RecordT) -> str:
        """Return the record's key: readable, namespaced by :attr:`type`, stable forever.

        Repeats: the same logical record returns the same key on every call, in every
        process, across versions. Conflicts: two different records never share a key.
        Under ``identity`` the key never includes editable content.
        """

    @abc.abstractmethod
    def record_cursor(self, record: RecordT) -> datetime:
        """The record's position for checkpointing (e.g. ``updated_at``), aware UTC.

        The runtime advances its cursor to the latest committed value, never past the
        run's start and never backwards, so a value in the future is harmless.
        """

    @abc.abstractmethod
    def subject_values(self, record: RecordT) -> Mapping[str, SubjectTemplateField]:
        """The record's fields the ``subject`` template may use (see ``subject_fields``)."""

    @abc.abstractmethod
    def episode_type(self, record: RecordT) -> str:
        """The episode type, e.g. ``zendesk.ticket``; stable for a given record."""

    @abc.abstractmethod
    def occurred_at(self, record: RecordT) -> datetime:
        """When the source event happened, as an aware datetime."""

    @abc.abstractmethod
    def payload(self, record: RecordT) -> JSONObject:
        """The episode payload: JSON values only.

        Under ``identity`` a changed payload for the same key is a revision, so include
        what a reader cares about and leave out volatile noise (view counters, ETags).
        Under ``content`` the payload must be a function of the key alone.
        """

    def session_of(self, record: RecordT) -> str | None:
        """The support session the record belongs to (a ticket's comments and status
        changes: the ticket's), carried on its episode; ``None``, the default: none.
        Stable for a given record, as its key is."""
        return None

    def resolution_of(self, record: RecordT) -> SessionResolution | None:
        """How the record's session stands, when the record says so (a ticket, from its
        status); ``None``, the default: it says nothing. The runner records it when the
        record's episode is created or revised, never over a newer one (see
        :mod:`memsync.connectors.sessions`)."""
        return None

    def close(self) -> None:
        """Release what the connector holds (an HTTP session). The runtime calls it once
        after each run; closing twice is harmless. The default holds nothing."""

    def check(self, now: datetime) -> str:
        """Reach the source once, cheaply, with the configured credentials, and say what
        answered (``memsync check NAME``). Stores nothing and moves no cursor.

        Raises what :meth:`fetch` raises: :class:`~memsync.connectors.errors.StopRun`
        for refused credentials or a missing resource, a retryable error when the
        source does not answer. The default reads the last minute and stops at the
        first record; a connector with a cheaper request (an identity endpoint)
        overrides it.
        """
        records = self.fetch(Window(start=now - timedelta(minutes=1), end=now), None)
        try:
            first = next((item for item in records if not isinstance(item, Progress)), None)
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                close()  # stop paging: one answer is all a check needs
        changed = "a record changed" if first is not None else "nothing changed"
        return f"reached; {changed} in the last minute"

    def source_updated_at(self, record: RecordT) -> datetime | None:
        """When the source last changed ``record`` (its ``updated_at``), aware; ``None``
        when the source does not say (the default).

        Conflicts: ingest never lets a version older than the stored one replace it,
        so a pushed edit is not undone by a re-read that read the record before the
        edit and was ingested after it. Equal times keep arrival order. Only a time
        that moves forward with every change of the payload may be returned here.
        """
        return None

    def webhook_receiver(self) -> WebhookReceiver[RecordT] | None:
        """What receives this instance's pushed deliveries (``POST /v1/webhooks/{name}``),
        when its type has a receiver and its config a ``webhook:``; ``None`` otherwise
        (the endpoint answers 404). The records it parses are this connector's own, so
        :meth:`to_episode` maps a pushed record exactly as its re-read. The default has
        none."""
        return None

    def secret_values(self) -> list[str]:
        """The secrets this instance sends to its source, so the framework can scrub them
        from error texts, run records and log lines (a source may echo a request back).

        The default is every ``SecretStr`` of the config; override to add a derived
        credential the connector sends (URL- and base64-encoded forms are covered)."""
        return secret_values(self.config)

    # --- what the framework owns --------------------------------------------------------

    @final
    def to_episode(self, record: RecordT) -> EpisodeDraft:
        """Map a record to the draft ingest stores. Not overridable: override the hooks.

        Raises :class:`~memsync.connectors.errors.SkipRecord` when the subject template
        cannot be rendered for this record (the registry already checked that the
        template only names fields the connector offers, so this is a record with an
        empty field), and ``ValueError`` when a hook returns a naive ``occurred_at``
        (a connector bug, not a property of the record).
        """
        occurred_at = require_aware(self.occurred_at(record), f"{self.type}.occurred_at")
        try:
            subject_id = self.config.subject.render(self.subject_values(record))
        except SubjectTemplateError as error:
            raise SkipRecord(f"{self.idempotency_key(record)}: {error}") from error
        return EpisodeDraft(
            subject_id=subject_id,
            source=self.type,
            type=self.episode_type(record),
            payload=self.payload(record),
            idempotency_key=self.idempotency_key(record),
            occurred_at=occurred_at,
            provenance=self._provenance(record),
            session_id=self.session_of(record),
        )

    def _provenance(self, record: RecordT) -> JSONObject:
        provenance: JSONObject = {"connector": self.config.name, "connector_type": self.type}
        updated_at = self.source_updated_at(record)
        if updated_at is not None:
            provenance[SOURCE_UPDATED_AT] = require_aware(
                updated_at, f"{self.type}.source_updated_at"
            ).isoformat()
        return provenance


def fetch_every_stream(
    connector: Connector[Any, RecordT], window: Window, cursor: Cursor | None
) -> Iterator[RecordT | Deletion | Progress]:
    """Every stream of ``connector`` in turn over one window: :meth:`Connector.fetch` of
    a connector that reads its source as several streams."""
    for stream in connector.streams():
        yield from connector.fetch_stream(stream, window, cursor)


class SourceRecord(Protocol):
    """A record that knows how it becomes an episode.

    A source with several kinds of record (issues, comments, events) gives each kind
    its own class implementing this protocol, so mapping asks the record instead of
    switching on its type. Each member has the contract of the :class:`Connector`
    hook of the same purpose; :class:`RecordConnector` delegates to them.
    """

    def key(self) -> str:
        """The idempotency key; see :meth:`Connector.idempotency_key`."""
        ...

    @property
    def position(self) -> datetime:
        """The position for checkpointing; see :meth:`Connector.record_cursor`."""
        ...

    @property
    def occurred_at(self) -> datetime:
        """When the source event happened, aware; see :meth:`Connector.occurred_at`."""
        ...

    @property
    def episode_type(self) -> str:
        """The episode type; see :meth:`Connector.episode_type`. A record type whose
        episodes all share one type declares it as a ``ClassVar[str]``."""
        ...

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        """Fields the subject template may use; see :meth:`Connector.subject_values`."""
        ...

    def payload(self) -> JSONObject:
        """The episode payload, JSON values only; see :meth:`Connector.payload`."""
        ...


@runtime_checkable
class SessionRecord(Protocol):
    """A :class:`SourceRecord` of a support session (a ticket and what belongs to it):
    what :meth:`Connector.session_of` and :meth:`Connector.resolution_of` answer for
    it under :class:`RecordConnector`."""

    @property
    def session_id(self) -> str | None:
        """See :meth:`Connector.session_of`."""
        ...

    @property
    def resolution(self) -> SessionResolution | None:
        """See :meth:`Connector.resolution_of`."""
        ...


SourceRecordT = TypeVar("SourceRecordT", bound=SourceRecord)


class RecordConnector(Connector[ConfigT, SourceRecordT]):
    """A connector whose records map themselves (:class:`SourceRecord`).

    Every mapping hook asks the record, so a subclass implements :meth:`fetch` and
    sets the class attributes; what a key, a position or a payload is lives beside
    the record type it belongs to.
    """

    @final
    def idempotency_key(self, record: SourceRecordT) -> str:
        return record.key()

    @final
    def record_cursor(self, record: SourceRecordT) -> datetime:
        return record.position

    @final
    def subject_values(self, record: SourceRecordT) -> Mapping[str, SubjectTemplateField]:
        return record.subject_values()

    @final
    def episode_type(self, record: SourceRecordT) -> str:
        return record.episode_type

    @final
    def occurred_at(self, record: SourceRecordT) -> datetime:
        return record.occurred_at

    @final
    def payload(self, record: SourceRecordT) -> JSONObject:
        return record.payload()

    @final
    def session_of(self, record: SourceRecordT) -> str | None:
        return record.session_id if isinstance(record, SessionRecord) else None

    @final
    def resolution_of(self, record: SourceRecordT) -> SessionResolution | None:
        return record.resolution if isinstance(record, SessionRecord) else None


def validate_connector_class(cls: type[Connector[Any, Any]]) -> None:
    """Refuse a connector class that does not declare the contract's class attributes.

    Raises :class:`ConnectorDefinitionError` naming the class and the attribute.
    """
    where = f"{cls.__module__}.{cls.__qualname__}"
    if not (isinstance(cls, type) and issubclass(cls, Connector)):
        raise ConnectorDefinitionError(f"{where} is not a memsync Connector subclass")
    if getattr(cls, "__abstractmethods__", None):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise ConnectorDefinitionError(f"{where} does not implement: {missing}")
    check_declared(where, cls)
    if not _accepts_sleeper(cls):
        raise ConnectorDefinitionError(
            f"{where}.__init__ must accept the keyword argument 'sleeper' and pass it to "
            "Connector.__init__, so that a stopping worker cuts the connector's waits short"
        )


def _accepts_sleeper(cls: type[Connector[Any, Any]]) -> bool:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return any(
        parameter.kind is inspect.Parameter.VAR_KEYWORD
        or (parameter.name == "sleeper" and parameter.kind is not inspect.Parameter.VAR_POSITIONAL)
        for parameter in parameters
    )
