"""What the store accepts, decided in one place for SQLite and PostgreSQL alike.

The API's request models, ``memsync ingest`` (through the same models) and the sync
runner (for drafts a connector made) all ask these functions, so an input is refused
or accepted the same way whichever database is behind it: the database is never the
one to find out, with a 500 and sometimes half a batch stored.

- Text (keys, subjects, labels, every string and object key inside a JSON document)
  holds no NUL character (PostgreSQL's ``text`` and ``jsonb`` cannot store one) and no
  lone surrogate (it has no UTF-8 form, so it could be neither stored nor answered).
- A JSON document nests at most :data:`MAX_JSON_DEPTH` levels: deeper ones could be
  stored but not serialised back (the episode and its subject's timeline would answer
  500 from then on), and NaN and Infinity are not JSON.
- A moment lies within the years 1 to 9999 *in UTC*:
  ``9999-12-31T23:59:59-14:00`` is a valid ISO 8601 time that no UTC clock can show.

Limits on lengths are the store's column sizes (:mod:`memsync.runtime.storage.schema`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memsync.clock import utc
from memsync.episode import EpisodeDraft
from memsync.runtime.storage.schema import (
    IDEMPOTENCY_KEY_LENGTH,
    LABEL_LENGTH,
    SUBJECT_ID_LENGTH,
)

__all__ = [
    "MAX_EXACT_INTEGER",
    "MAX_JSON_DEPTH",
    "draft_problem",
    "json_problem",
    "moment_problem",
    "text_problem",
]

MAX_JSON_DEPTH = 64
"""Levels of nesting a payload, metadata or provenance object may have (the object
itself is level 1). Responses wrap a payload in a few more levels, well within what
the JSON serialiser handles."""
MAX_EXACT_INTEGER = 2**53 - 1
"""The largest integer a JSON number holds exactly (RFC 8785 reads numbers as doubles)."""


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored, or ``None`` when it can."""
    if value.isascii():
        return "contains a NUL character (U+0000)" if "\x00" in value else None
    if "\x00" in value:
        return "contains a NUL character (U+0000)"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"contains a lone surrogate (U+{ord(value[error.start]):04X}), which is not text"
    return None


def json_problem(
    value: Mapping[str, Any], name: str, max_depth: int = MAX_JSON_DEPTH
) -> str | None:
    """The first reason ``value`` (a JSON object called ``name``) cannot be stored,
    naming where in it (``payload.a.b[2]: …``), or ``None`` when it can."""
    return _json_problem(value, name, 1, max_depth)


def _json_problem(value: Any, where: str, depth: int, max_depth: int) -> str | None:
    if isinstance(value, str):
        problem = text_problem(value)
        return f"{where}: {problem}" if problem else None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: NaN and Infinity are not JSON"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_EXACT_INTEGER:
        # Canonical JSON (RFC 8785), which content hashes are taken over, holds numbers as
        # IEEE 754 doubles: a larger integer would hash as a different number.
        return f"{where}: integers beyond ±(2^53 - 1) are not exact in JSON; send them as strings"
    if isinstance(value, dict | list):
        if depth > max_depth:
            shown = where if len(where) <= 80 else f"{where[:60]}…{where[-16:]}"
            return f"{shown}: nested deeper than {max_depth} levels"
        items = (
            ((f"{where}[{index}]", item) for index, item in enumerate(value))
            if isinstance(value, list)
            else ((f"{where}.{key}", item) for key, item in value.items())
        )
        if isinstance(value, dict):
            for key in value:
                problem = text_problem(key) if isinstance(key, str) else None
                if problem:
                    return f"{where}: a key {problem}"
        for at, item in items:
            problem = _json_problem(item, at, depth + 1, max_depth)
            if problem:
                return problem
    return None


def moment_problem(value: datetime) -> str | None:
    """Why ``value`` is not a moment the store keeps (outside years 1 to 9999 in UTC)."""
    try:
        utc(value)
    except OverflowError:
        return "lies outside the years 1 to 9999 once converted to UTC"
    return None


def draft_problem(draft: EpisodeDraft) -> str | None:
    """Why a connector's draft cannot be stored, or ``None``: the rules the API's models
    apply to a request, applied to a draft (the sync runner skips such a record with
    this reason, and the run goes on)."""
    labels: list[tuple[str, str | None, int]] = [
        ("subject_id", draft.subject_id, SUBJECT_ID_LENGTH),
        ("source", draft.source, LABEL_LENGTH),
        ("type", draft.type, LABEL_LENGTH),
        ("idempotency_key", draft.idempotency_key, IDEMPOTENCY_KEY_LENGTH),
        ("session_id", draft.session_id, LABEL_LENGTH),
    ]
    for name, value, length in labels:
        if value is None:
            continue
        if not 0 < len(value) <= length:
            return f"{name}: must be 1 to {length} characters, not {len(value)}"
        problem = text_problem(value)
        if problem:
            return f"{name}: {problem}"
    documents = [
        ("payload", draft.payload),
        ("metadata", draft.metadata),
        ("provenance", draft.provenance),
    ]
    for name, document in documents:
        problem = json_problem(document, name)
        if problem:
            return problem
    if draft.occurred_at is not None:
        problem = moment_problem(draft.occurred_at)
        if problem:
            return f"occurred_at: {problem}"
    return None
