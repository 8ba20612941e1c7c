"""Receipts: what a context bundle served with ``emit_receipt`` was asked, showed and
hashed to — read back, listed, and replayed.

A receipt keeps the request (subject, task, budget, layout, the ``as_of`` and
``valid_at`` asked for),
the bundle's own ``as_of`` (its transaction time: the moment of the store it shows),
the memories and episodes that went in with their scores, and ``context_hash``, the
SHA-256 of the exact bytes served. The bytes themselves are not kept: an **exact**
replay builds the bundle again as of the receipt's ``as_of`` and compares its hash, so
``reproduced`` says whether the store can still show what it showed then, not that a
copy was kept. A **current** replay builds today's bundle for the same request (without
its ``as_of``, keeping its ``valid_at``) and says which memories and episodes came and
went.

Field names are Statewave's (``receipt_id``, ``parent_receipt_id``, ``mode``,
``selected_entries``, ``context_hash``); docs/api.md says where memsync differs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.clock import Clock, utc
from memsync.compile.bundle import Bundle, BundleLayout
from memsync.episode import canonical_json
from memsync.runtime.reading.bundles import ContextReader
from memsync.runtime.reading.labels import EVERYTHING, Visibility
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store

__all__ = [
    "BadCursor",
    "ContextRequest",
    "Receipt",
    "ReceiptMode",
    "ReceiptPage",
    "Receipts",
    "Replay",
    "ReplayMode",
    "SelectedEntry",
    "ServedBundle",
    "delete_subject_receipts",
]

_receipts = tables.receipts


class ReceiptMode(StrEnum):
    """How a receipt came to be (Statewave's ``mode``)."""

    RETRIEVAL = "retrieval"
    """``POST /v1/context`` with ``emit_receipt``."""
    AS_OF_REPLAY = "as_of_replay"
    """A ``current`` replay of another receipt (its ``parent_receipt_id``)."""


class ReplayMode(StrEnum):
    """What a replay rebuilds."""

    EXACT = "exact"
    """The bundle as of the receipt's ``as_of``: the same bytes, if the store still
    holds what it showed."""
    CURRENT = "current"
    """Today's bundle for the same request (Statewave's meaning of a replay)."""


class BadCursor(ValueError):
    """A listing cursor that this server did not hand out."""


@dataclass(frozen=True, slots=True)
class ContextRequest:
    """What a bundle is built from; ``layout`` is the one used (a request naming none
    gets the configured default, recorded so a later change of it replays alike)."""

    subject_id: str
    task: str
    max_tokens: int
    as_of: datetime | None
    layout: BundleLayout
    valid_at: datetime | None = None
    """The valid time asked about (the memories that held then), if any."""


@dataclass(frozen=True, slots=True)
class SelectedEntry:
    """One memory or episode in a bundle: where it is, and the score that placed a
    memory there (episodes have none)."""

    section: str
    """``facts``, ``procedures`` or ``episodes``."""
    id: uuid.UUID
    score: float | None = None

    def key(self) -> tuple[str, uuid.UUID]:
        """What a diff matches entries by: a memory re-ranked is the same entry."""
        return ("episode" if self.section == "episodes" else "memory", self.id)

    def to_json(self) -> dict[str, Any]:
        """Statewave's shape: ``memory_id`` or ``episode_id``, plus where and why."""
        if self.section == "episodes":
            return {"episode_id": str(self.id), "section": self.section}
        return {"memory_id": str(self.id), "section": self.section, "score": self.score}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SelectedEntry:
        if "episode_id" in value:
            return cls(value["section"], uuid.UUID(value["episode_id"]))
        return cls(value["section"], uuid.UUID(value["memory_id"]), value["score"])


@dataclass(frozen=True, slots=True)
class Receipt:
    """A stored receipt. Written once, never changed."""

    id: uuid.UUID
    tenant_id: str
    mode: ReceiptMode
    parent_receipt_id: str | None
    query_id: str | None
    task_id: str | None
    request: ContextRequest
    as_of: datetime
    """The bundle's transaction time: what ``provenance.as_of`` said."""
    context_hash: str
    token_estimate: int
    selected_entries: tuple[SelectedEntry, ...]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ServedBundle:
    """The bytes of a bundle as served, and its receipt when one was asked for."""

    body: bytes
    receipt: Receipt | None


@dataclass(frozen=True, slots=True)
class ReceiptPage:
    """Receipts newest first, and the cursor of the next page (None: no more)."""

    receipts: list[Receipt]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Replay:
    """A replay of ``original``: the bytes built now, their hash, and what changed."""

    original: Receipt
    mode: ReplayMode
    body: bytes
    context_hash: str
    receipt: Receipt | None
    """The replay's own receipt (``current`` replays serve a new bundle; an exact one
    serves the original again and writes none)."""
    added: tuple[SelectedEntry, ...]
    removed: tuple[SelectedEntry, ...]
    common: int

    @property
    def reproduced(self) -> bool:
        """Whether the bytes built now are the bytes served then (SHA-256 equal)."""
        return self.context_hash == self.original.context_hash


class Receipts:
    """Serves context bundles with receipts, and reads, lists and replays receipts.

    Receipts belong to a tenant: every read filters by it, so another tenant's receipt
    id is unknown (None). Repeats: serving the same request twice writes two receipts
    (two servings), with equal ``context_hash`` when the store did not change; replaying
    never changes the original, and an exact replay writes nothing.
    """

    def __init__(self, store: Store, context: ContextReader, clock: Clock) -> None:
        self._store = store
        self._context = context
        self._clock = clock

    def request(
        self,
        subject_id: str,
        task: str,
        max_tokens: int,
        as_of: datetime | None,
        layout: BundleLayout | None,
        valid_at: datetime | None = None,
    ) -> ContextRequest:
        """The request with the layout that will be used."""
        return ContextRequest(
            subject_id,
            task,
            max_tokens,
            utc(as_of) if as_of is not None else None,
            layout or self._context.layout,
            utc(valid_at) if valid_at is not None else None,
        )

    def serve(
        self,
        tenant_id: str,
        request: ContextRequest,
        *,
        emit_receipt: bool,
        query_id: str | None = None,
        task_id: str | None = None,
        parent_receipt_id: str | None = None,
        visibility: Visibility = EVERYTHING,
    ) -> ServedBundle:
        """The bundle's canonical JSON; with ``emit_receipt``, a receipt is written
        and the body carries its ``receipt_id`` and ``receipt_emitted: true`` (so the
        hash covers the very bytes the caller got). ``visibility``: what the read
        policy lets this caller see (the receipt records what was served)."""
        bundle = self._build(tenant_id, request, request.as_of, visibility)
        if not emit_receipt:
            return ServedBundle(canonical_json(bundle.to_dict()).encode(), None)
        return self._receipted(
            tenant_id, request, bundle, ReceiptMode.RETRIEVAL, parent_receipt_id, query_id, task_id
        )

    def get(self, tenant_id: str, receipt_id: str) -> Receipt | None:
        """The tenant's receipt of that id; None when unknown, malformed or another
        tenant's (indistinguishable on purpose)."""
        try:
            key = uuid.UUID(receipt_id)
        except ValueError:
            return None
        with self._store.read() as connection:
            row = connection.execute(
                sa.select(_receipts).where(
                    _receipts.c.tenant_id == tenant_id, _receipts.c.id == key
                )
            ).first()
        return _receipt(row) if row is not None else None

    def list(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> ReceiptPage:
        """The subject's receipts created in ``[since, until)``, newest first, a page of
        ``limit`` after ``cursor``. Raises :class:`BadCursor` for a cursor not handed
        out by this method. Receipts written meanwhile never shift a page: the cursor is
        a position (created_at, id), not an offset."""
        query = sa.select(_receipts).where(
            _receipts.c.tenant_id == tenant_id, _receipts.c.subject_id == subject_id
        )
        if since is not None:
            query = query.where(_receipts.c.created_at >= since)
        if until is not None:
            query = query.where(_receipts.c.created_at < until)
        if cursor is not None:
            created_at, last_id = _decode_cursor(cursor)
            query = query.where(
                sa.or_(
                    _receipts.c.created_at < created_at,
                    sa.and_(_receipts.c.created_at == created_at, _receipts.c.id < last_id),
                )
            )
        query = query.order_by(_receipts.c.created_at.desc(), _receipts.c.id.desc()).limit(
            limit + 1
        )
        with self._store.read() as connection:
            rows = connection.execute(query).all()
        receipts = [_receipt(row) for row in rows[:limit]]
        more = len(rows) > limit
        return ReceiptPage(receipts, _encode_cursor(receipts[-1]) if more else None)

    def replay(
        self,
        tenant_id: str,
        receipt_id: str,
        mode: ReplayMode,
        visibility: Visibility = EVERYTHING,
    ) -> Replay | None:
        """Replay the tenant's receipt (None if it has none of that id).

        ``exact``: the bundle as of the receipt's ``as_of``, with the original
        ``receipt_id`` in it, hashed and compared; nothing is written. ``current``:
        today's bundle for the same request (its ``as_of`` dropped), served with a new
        receipt (``as_of_replay``, parent the original); the original never changes.
        Either is built for the replaying caller's ``visibility``.
        """
        original = self.get(tenant_id, receipt_id)
        if original is None:
            return None
        if mode is ReplayMode.EXACT:
            bundle = self._build(tenant_id, original.request, original.as_of, visibility)
            body = _body(bundle, original.id)
            return _replay(original, mode, body, None, _selected(bundle))
        request = original.request
        # Today's store, asked the same valid-time question.
        current = replace(request, as_of=None)
        served = self._receipted(
            tenant_id,
            current,
            self._build(tenant_id, current, None, visibility),
            ReceiptMode.AS_OF_REPLAY,
            str(original.id),
            original.query_id,
            original.task_id,
        )
        assert served.receipt is not None
        return _replay(original, mode, served.body, served.receipt, served.receipt.selected_entries)

    # -- internals ------------------------------------------------------------------

    def _build(
        self,
        tenant_id: str,
        request: ContextRequest,
        as_of: datetime | None,
        visibility: Visibility,
    ) -> Bundle:
        return self._context.bundle(
            tenant_id,
            request.subject_id,
            request.task,
            request.max_tokens,
            as_of,
            layout=request.layout,
            valid_at=request.valid_at,
            visibility=visibility,
        )

    def _receipted(
        self,
        tenant_id: str,
        request: ContextRequest,
        bundle: Bundle,
        mode: ReceiptMode,
        parent_receipt_id: str | None,
        query_id: str | None,
        task_id: str | None,
    ) -> ServedBundle:
        receipt_id = uuid.uuid4()
        body = _body(bundle, receipt_id)
        receipt = Receipt(
            id=receipt_id,
            tenant_id=tenant_id,
            mode=mode,
            parent_receipt_id=parent_receipt_id,
            query_id=query_id,
            task_id=task_id,
            request=request,
            as_of=bundle.as_of,
            context_hash=_sha256(body),
            token_estimate=bundle.token_estimate,
            selected_entries=_selected(bundle),
            created_at=self._clock.now(),
        )
        self._write(receipt)
        return ServedBundle(body, receipt)

    def _write(self, receipt: Receipt) -> None:
        request = receipt.request
        with self._store.write_one_statement() as connection:
            connection.execute(
                _receipts.insert().values(
                    tenant_id=receipt.tenant_id,
                    id=receipt.id,
                    subject_id=request.subject_id,
                    mode=receipt.mode.value,
                    parent_receipt_id=receipt.parent_receipt_id,
                    query_id=receipt.query_id,
                    task_id=receipt.task_id,
                    task=request.task,
                    max_tokens=request.max_tokens,
                    layout=request.layout.value,
                    requested_as_of=request.as_of,
                    requested_valid_at=request.valid_at,
                    as_of=receipt.as_of,
                    context_hash=receipt.context_hash,
                    token_estimate=receipt.token_estimate,
                    selected_entries=[entry.to_json() for entry in receipt.selected_entries],
                    created_at=receipt.created_at,
                )
            )


def delete_subject_receipts(connection: Connection, tenant_id: str, subject_id: str) -> int:
    """Delete the subject's receipts (with the subject: nothing else deletes them)."""
    result = connection.execute(
        _receipts.delete().where(
            _receipts.c.tenant_id == tenant_id, _receipts.c.subject_id == subject_id
        )
    )
    return result.rowcount


def _body(bundle: Bundle, receipt_id: uuid.UUID) -> bytes:
    # The receipt's id is part of what the caller gets, so it is part of what is hashed.
    return canonical_json(
        {**bundle.to_dict(), "receipt_id": str(receipt_id), "receipt_emitted": True}
    ).encode()


def _sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _selected(bundle: Bundle) -> tuple[SelectedEntry, ...]:
    return (
        *(SelectedEntry("facts", item.memory.id, round(item.score, 6)) for item in bundle.facts),
        *(
            SelectedEntry("procedures", item.memory.id, round(item.score, 6))
            for item in bundle.procedures
        ),
        *(SelectedEntry("episodes", episode.id) for episode in bundle.episodes),
    )


def _replay(
    original: Receipt,
    mode: ReplayMode,
    body: bytes,
    receipt: Receipt | None,
    entries: Sequence[SelectedEntry],
) -> Replay:
    before = {entry.key(): entry for entry in original.selected_entries}
    after = {entry.key(): entry for entry in entries}
    return Replay(
        original=original,
        mode=mode,
        body=body,
        context_hash=_sha256(body),
        receipt=receipt,
        added=tuple(entry for key, entry in after.items() if key not in before),
        removed=tuple(entry for key, entry in before.items() if key not in after),
        common=len(before.keys() & after.keys()),
    )


def _receipt(row: sa.Row[Any]) -> Receipt:
    return Receipt(
        id=row.id,
        tenant_id=row.tenant_id,
        mode=ReceiptMode(row.mode),
        parent_receipt_id=row.parent_receipt_id,
        query_id=row.query_id,
        task_id=row.task_id,
        request=ContextRequest(
            row.subject_id,
            row.task,
            row.max_tokens,
            row.requested_as_of,
            BundleLayout(row.layout),
            row.requested_valid_at,
        ),
        as_of=row.as_of,
        context_hash=row.context_hash,
        token_estimate=row.token_estimate,
        selected_entries=tuple(SelectedEntry.from_json(entry) for entry in row.selected_entries),
        created_at=row.created_at,
    )


def _encode_cursor(receipt: Receipt) -> str:
    position = f"{receipt.created_at.isoformat()}|{receipt.id}"
    return base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_at, last_id = base64.urlsafe_b64decode(padded).decode().split("|")
        return utc(datetime.fromisoformat(created_at)), uuid.UUID(last_id)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadCursor(
            "cursor is not one this server handed out: pass next_cursor as it came"
        ) from None
