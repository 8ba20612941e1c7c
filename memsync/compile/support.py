"""Support views of a subject: health, SLA and the handoff brief (the pure part).

Statewave's support routes, computed from what memsync holds: the subject's active
memories and open conflicts, its episodes grouped by ``session_id``, and the resolution
records of its sessions. Nothing here reads the clock: every function takes ``as_of``,
the moment of the state it reflects (the runtime passes the latest change it read), so
equal state gives equal answers, byte for byte.

Who spoke (:func:`speaker_of`): an episode is the **agent**'s when its first message's
role (``payload.messages[0].role``), else ``payload.role`` or ``metadata.role``, is one
of :data:`AGENT_ROLES`; any other episode is the **customer**'s (text fields speak for
the subject, as :mod:`memsync.compile.text` reads them).

Health (docs/api.md, "Support") starts at 100 and loses points per signal, each capped;
:data:`SIGNALS` lists them with their weights. ``healthy`` from 70, ``watch`` from 40,
``at_risk`` below.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from memsync.clock import IsoDatetime
from memsync.compile.bundle import LineBudget, episode_text, withheld_episodes
from memsync.compile.ranking import RankingEntry, rank_all
from memsync.compile.resolve import OpenConflict
from memsync.compile.similarity import jaccard, tokens
from memsync.compile.tokenizer import TokenCounter
from memsync.compile.types import EpisodeView, MemoryKind, MemoryStatus, StoredMemory

__all__ = [
    "AGENT_ROLES",
    "AT_RISK",
    "HEALTHY",
    "HEALTHY_FROM",
    "REPEATED_ISSUE_SIMILARITY",
    "SIGNALS",
    "STALE_AFTER",
    "WATCH",
    "WATCH_FROM",
    "Handoff",
    "Health",
    "HealthFactor",
    "PastResolution",
    "Resolution",
    "ResolutionStatus",
    "SessionMessage",
    "SessionSla",
    "Signal",
    "SlaSummary",
    "Speaker",
    "assemble_handoff",
    "session_issues",
    "speaker_of",
    "subject_health",
    "subject_sla",
]

AGENT_ROLES: frozenset[str] = frozenset(
    {"agent", "assistant", "support", "staff", "operator", "admin", "bot"}
)

HEALTHY, WATCH, AT_RISK = "healthy", "watch", "at_risk"
HEALTHY_FROM = 70
WATCH_FROM = 40

STALE_AFTER = timedelta(days=180)
"""An active memory nothing has asserted for this long is stale."""

REPEATED_ISSUE_SIMILARITY = 0.5
"""Two sessions raise the same issue when the words of their first customer messages
overlap this much (Jaccard)."""


class ResolutionStatus(StrEnum):
    """How a support session stands (Statewave's resolution ``status``)."""

    OPEN = "open"
    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """The resolution record of one session of a subject (Statewave's ``Resolution``)."""

    id: uuid.UUID
    subject_id: str
    session_id: str
    status: ResolutionStatus
    resolution_summary: str | None
    resolved_at: IsoDatetime | None
    metadata: dict[str, Any]
    created_at: IsoDatetime
    updated_at: IsoDatetime


class Speaker(StrEnum):
    CUSTOMER = "customer"
    AGENT = "agent"


def speaker_of(payload: Mapping[str, Any], metadata: Mapping[str, Any]) -> Speaker:
    """Who wrote an episode (see the module docstring)."""
    role: object = None
    messages = payload.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], Mapping):
        role = messages[0].get("role")
    if role is None:
        role = payload.get("role", metadata.get("role"))
    if isinstance(role, str) and role.casefold() in AGENT_ROLES:
        return Speaker.AGENT
    return Speaker.CUSTOMER


@dataclass(frozen=True, slots=True)
class SessionMessage:
    """One live episode of a support session, and who wrote it."""

    session_id: str
    episode: EpisodeView
    speaker: Speaker


def _by_session(messages: Iterable[SessionMessage]) -> dict[str, list[SessionMessage]]:
    sessions: dict[str, list[SessionMessage]] = {}
    ordered = sorted(messages, key=lambda m: (m.episode.occurred_at, str(m.episode.id)))
    for message in ordered:
        sessions.setdefault(message.session_id, []).append(message)
    return sessions


def session_issues(messages: Iterable[SessionMessage]) -> dict[str, str]:
    """Each session's issue: the text of its first customer message (sessions with
    none are absent), in the order the sessions began."""
    issues: dict[str, str] = {}
    for session_id, session in _by_session(messages).items():
        first = next((m for m in session if m.speaker is Speaker.CUSTOMER), None)
        if first is not None:
            issues[session_id] = episode_text(first.episode)
    return issues


# -- health ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Signal:
    """One health signal: the points each occurrence costs, and the most it may cost."""

    name: str
    per_occurrence: int
    cap: int


OPEN_CONFLICTS = Signal("open_conflicts", 10, 30)
UNRESOLVED_SESSIONS = Signal("unresolved_sessions", 15, 45)
OPEN_SESSIONS = Signal("open_sessions", 5, 15)
REPEATED_ISSUES = Signal("repeated_issues", 10, 30)
STALE_MEMORIES = Signal("stale_memories", 2, 10)

SIGNALS: tuple[Signal, ...] = (
    OPEN_CONFLICTS,
    UNRESOLVED_SESSIONS,
    OPEN_SESSIONS,
    REPEATED_ISSUES,
    STALE_MEMORIES,
)
"""Every signal, in the order factors are listed."""


@dataclass(frozen=True, slots=True)
class HealthFactor:
    """What one signal took off the score (``impact`` is negative) and why."""

    signal: str
    impact: int
    detail: str


@dataclass(frozen=True, slots=True)
class Health:
    """A subject's health: ``score`` 0 to 100, its ``state`` and the factors behind it."""

    subject_id: str
    score: int
    state: str
    factors: list[HealthFactor] = field(default_factory=list)


def _state(score: int) -> str:
    if score >= HEALTHY_FROM:
        return HEALTHY
    return WATCH if score >= WATCH_FROM else AT_RISK


def _plural(count: int, noun: str, nouns: str | None = None) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {nouns or noun + 's'}"


def subject_health(
    subject_id: str,
    *,
    open_conflicts: int,
    resolutions: Sequence[Resolution],
    issues: Mapping[str, str],
    stale_memories: int,
) -> Health:
    """The health of a subject from its signals (:data:`SIGNALS`).

    ``issues`` are :func:`session_issues`; ``stale_memories`` counts the active
    memories not asserted within :data:`STALE_AFTER` of the state's moment. A subject
    with nothing (unknown) scores 100 with no factors, as Statewave answers.
    """
    by_status = {status: 0 for status in ResolutionStatus}
    for resolution in resolutions:
        by_status[resolution.status] += 1
    stale = stale_memories
    counts = {
        OPEN_CONFLICTS: (
            open_conflicts,
            f"{_plural(open_conflicts, 'open conflict')} between memories",
        ),
        UNRESOLVED_SESSIONS: (
            by_status[ResolutionStatus.UNRESOLVED],
            f"{_plural(by_status[ResolutionStatus.UNRESOLVED], 'session')} ended unresolved",
        ),
        OPEN_SESSIONS: (
            by_status[ResolutionStatus.OPEN],
            f"{_plural(by_status[ResolutionStatus.OPEN], 'session')} still open",
        ),
        REPEATED_ISSUES: (
            repeated := _repeated(issues),
            f"{_plural(repeated, 'session')} raised an issue an earlier session raised",
        ),
        STALE_MEMORIES: (
            stale,
            f"{_plural(stale, 'memory', 'memories')} not asserted for {STALE_AFTER.days} days",
        ),
    }
    factors = [
        HealthFactor(signal.name, -min(count * signal.per_occurrence, signal.cap), detail)
        for signal, (count, detail) in counts.items()
        if count > 0
    ]
    score = max(0, 100 + sum(factor.impact for factor in factors))
    return Health(subject_id, score, _state(score), factors)


def _repeated(issues: Mapping[str, str]) -> int:
    """Sessions whose issue matches an earlier session's (in the order they began)."""
    seen: list[frozenset[str]] = []
    repeated = 0
    for text in issues.values():
        words = tokens(text)
        if not words:
            continue
        if any(jaccard(words, earlier) >= REPEATED_ISSUE_SIMILARITY for earlier in seen):
            repeated += 1
        seen.append(words)
    return repeated


# -- SLA -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionSla:
    """One session's times (Statewave's ``SessionSLA``). ``status`` is ``resolved`` or
    ``open`` (a session recorded ``unresolved`` has no resolution: ``open``)."""

    session_id: str
    status: str
    first_message_at: IsoDatetime | None
    first_response_at: IsoDatetime | None
    resolved_at: IsoDatetime | None
    first_response_seconds: float | None
    resolution_seconds: float | None
    open_duration_seconds: float | None
    first_response_breached: bool
    resolution_breached: bool


@dataclass(frozen=True, slots=True)
class SlaSummary:
    """Statewave's ``SLASummary``: the averages, the breaches and every session."""

    subject_id: str
    total_sessions: int
    resolved_sessions: int
    open_sessions: int
    avg_first_response_seconds: float | None
    avg_resolution_seconds: float | None
    first_response_breach_count: int
    resolution_breach_count: int
    sessions: list[SessionSla]


def subject_sla(
    subject_id: str,
    messages: Iterable[SessionMessage],
    resolutions: Sequence[Resolution],
    *,
    first_response_threshold: timedelta,
    resolution_threshold: timedelta,
    as_of: datetime,
) -> SlaSummary:
    """SLA metrics of every session the subject's episodes or resolutions name.

    First response: the first customer message to the first agent episode after it.
    Resolution: the session's start (its first episode, else its record's
    ``created_at``) to ``resolved_at``. A session still waiting is measured up to
    ``as_of`` (the state's moment, not the wall clock): it is breached once that wait
    is over the threshold. Sessions are listed in the order they began.
    """
    sessions = _by_session(messages)
    records = {resolution.session_id: resolution for resolution in resolutions}
    starts = {
        session_id: (session[0].episode.occurred_at if session else None)
        for session_id, session in sessions.items()
    }
    for session_id, record in records.items():
        if starts.get(session_id) is None:
            starts[session_id] = record.created_at
    ordered = sorted(starts, key=lambda session_id: (starts[session_id], session_id))
    rows = [
        _session_sla(
            session_id,
            sessions.get(session_id, []),
            records.get(session_id),
            starts[session_id] or as_of,
            first_response_threshold,
            resolution_threshold,
            as_of,
        )
        for session_id in ordered
    ]
    responses = [r.first_response_seconds for r in rows if r.first_response_seconds is not None]
    resolved = [r.resolution_seconds for r in rows if r.resolution_seconds is not None]
    return SlaSummary(
        subject_id=subject_id,
        total_sessions=len(rows),
        resolved_sessions=sum(1 for r in rows if r.status == ResolutionStatus.RESOLVED),
        open_sessions=sum(1 for r in rows if r.status != ResolutionStatus.RESOLVED),
        avg_first_response_seconds=_mean(responses),
        avg_resolution_seconds=_mean(resolved),
        first_response_breach_count=sum(1 for r in rows if r.first_response_breached),
        resolution_breach_count=sum(1 for r in rows if r.resolution_breached),
        sessions=rows,
    )


def _session_sla(
    session_id: str,
    session: Sequence[SessionMessage],
    record: Resolution | None,
    start: datetime,
    first_response_threshold: timedelta,
    resolution_threshold: timedelta,
    as_of: datetime,
) -> SessionSla:
    first = next((m for m in session if m.speaker is Speaker.CUSTOMER), None)
    first_at = first.episode.occurred_at if first else None
    response = next(
        (
            m
            for m in session
            if m.speaker is Speaker.AGENT
            and first_at is not None
            and m.episode.occurred_at >= first_at
        ),
        None,
    )
    response_at = response.episode.occurred_at if response else None
    resolved_at = (
        record.resolved_at
        if record is not None and record.status is ResolutionStatus.RESOLVED
        else None
    )
    waited = (response_at or as_of) - first_at if first_at is not None else None
    lasted = (resolved_at or as_of) - start
    return SessionSla(
        session_id=session_id,
        status=ResolutionStatus.RESOLVED if resolved_at else ResolutionStatus.OPEN,
        first_message_at=first_at,
        first_response_at=response_at,
        resolved_at=resolved_at,
        first_response_seconds=_seconds(waited) if response_at is not None else None,
        resolution_seconds=_seconds(lasted) if resolved_at is not None else None,
        open_duration_seconds=None if resolved_at is not None else _seconds(lasted),
        first_response_breached=waited is not None and waited > first_response_threshold,
        resolution_breached=lasted > resolution_threshold,
    )


def _seconds(span: timedelta | None) -> float | None:
    return None if span is None else max(span.total_seconds(), 0.0)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


# -- handoff ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PastResolution:
    """A resolution shown in a handoff brief (Statewave's ``ResolutionSummaryItem``)."""

    session_id: str
    status: str
    summary: str | None
    resolved_at: IsoDatetime | None


@dataclass(frozen=True, slots=True)
class Handoff:
    """A handoff brief (Statewave's ``Handoff``): what the next person needs, from
    current truth only, within ``max_tokens`` (``handoff_notes`` counted as a whole,
    and every list holds exactly what the notes show)."""

    subject_id: str
    session_id: str
    reason: str
    generated_at: IsoDatetime
    customer_summary: str
    active_issue: str
    attempted_steps: list[str]
    key_facts: list[str]
    resolution_history: list[PastResolution]
    recent_context: list[str]
    health_score: int
    health_state: str
    health_factors: list[HealthFactor]
    handoff_notes: str
    token_estimate: int
    provenance: dict[str, Any]


_CUSTOMER_KINDS = frozenset({MemoryKind.PROFILE_FACT, MemoryKind.PREFERENCE})

_ISSUE, _CUSTOMER, _FACTS, _STEPS, _HISTORY, _RECENT = (
    "## Active issue",
    "## Customer",
    "## Key facts",
    "## Attempted steps",
    "## Resolution history",
    "## Recent context",
)
_SECTIONS = (_ISSUE, _CUSTOMER, _FACTS, _STEPS, _HISTORY, _RECENT)


def assemble_handoff(
    subject_id: str,
    session_id: str,
    reason: str,
    *,
    memories: Sequence[StoredMemory],
    open_conflicts: Sequence[OpenConflict],
    session: Sequence[SessionMessage],
    recent: Sequence[EpisodeView],
    resolutions: Sequence[Resolution],
    health: Health,
    as_of: datetime,
    max_tokens: int,
    counter: TokenCounter,
) -> Handoff:
    """The handoff brief of one session, from current truth only.

    ``memories`` are the subject's memories in every status: only active ones outside
    an open conflict are shown, and no episode that is a source of another (superseded,
    tombstoned, contested) memory is quoted (:func:`withheld_episodes`). ``session`` is
    the session's live episodes, ``recent`` the subject's newest ones. Lines are taken
    in priority order while they fit (the active issue, the customer, key facts, the
    agent's attempted steps, earlier sessions' resolutions, recent context), and the
    notes are counted again whole and cut from the end until they fit. Repeats: equal
    arguments give an equal brief (``generated_at`` is ``as_of``).
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    withheld = withheld_episodes(memories, open_conflicts)
    contested = {memory_id for conflict in open_conflicts for memory_id in conflict.memory_ids}
    # An episode summary is an episode retold: recent context quotes episodes (minus
    # the withheld ones) instead, so no summary repeats what lost.
    current = {
        m.id: m
        for m in memories
        if m.subject_id == subject_id
        and m.status is MemoryStatus.ACTIVE
        and m.id not in contested
        and m.kind is not MemoryKind.EPISODE_SUMMARY
    }
    quoted = [m for m in sorted(session, key=_message_order) if m.episode.id not in withheld]
    issue_message = next((m for m in quoted if m.speaker is Speaker.CUSTOMER), None)
    issue = episode_text(issue_message.episode) if issue_message else ""
    ranked = [
        current[entry.id]
        for _, entry in rank_all(
            (RankingEntry.of(memory) for memory in current.values()),
            tokens(f"{reason} {issue}"),
            as_of,
        )
    ]
    header = _header(subject_id, session_id, reason, health)
    budget = LineBudget(counter, max_tokens, header, {name: f"\n{name}" for name in _SECTIONS})

    candidates: list[tuple[str, str, object]] = []
    if issue_message is not None:
        candidates.append((_ISSUE, issue, issue_message.episode.id))
    candidates += [(_CUSTOMER, f"- {m.content}", m) for m in ranked if m.kind in _CUSTOMER_KINDS]
    candidates += [(_FACTS, f"- {m.content}", m) for m in ranked if m.kind not in _CUSTOMER_KINDS]
    candidates += [
        (_STEPS, f"- {episode_text(m.episode)}", m.episode.id)
        for m in quoted
        if m.speaker is Speaker.AGENT
    ]
    history = sorted(
        (r for r in resolutions if r.session_id != session_id),
        key=lambda r: (-r.updated_at.timestamp(), r.session_id),
    )
    candidates += [(_HISTORY, _history_line(r), r) for r in history]
    in_session = {m.episode.id for m in session}
    candidates += [
        (_RECENT, f"- {e.occurred_at.isoformat()} {e.source}/{e.type}: {episode_text(e)}", e.id)
        for e in sorted(recent, key=lambda e: (-e.occurred_at.timestamp(), str(e.id)))
        if e.id not in withheld and e.id not in in_session and e.occurred_at <= as_of
    ]
    kept = [item for item in candidates if budget.take(item[0], item[1])]
    while True:
        notes = _render(header, kept)
        count = counter.count(notes)
        if count <= max_tokens or not kept:
            break
        kept.pop()
    return _handoff(subject_id, session_id, reason, health, as_of, kept, notes, count, counter)


def _message_order(message: SessionMessage) -> tuple[datetime, str]:
    return message.episode.occurred_at, str(message.episode.id)


def _header(subject_id: str, session_id: str, reason: str, health: Health) -> str:
    return (
        f"# Handoff: {subject_id}, session {session_id}\n"
        f"Reason: {reason}\nHealth: {health.score} ({health.state})"
    )


def _history_line(resolution: Resolution) -> str:
    summary = f": {resolution.resolution_summary}" if resolution.resolution_summary else ""
    return f"- {resolution.session_id} ({resolution.status.value}){summary}"


def _render(header: str, kept: Sequence[tuple[str, str, object]]) -> str:
    lines = [header]
    for section in _SECTIONS:
        texts = [text for name, text, _ in kept if name == section]
        if texts:
            lines += ["", section, *texts]
    return "\n".join(lines)


def _handoff(
    subject_id: str,
    session_id: str,
    reason: str,
    health: Health,
    as_of: datetime,
    kept: Sequence[tuple[str, str, object]],
    notes: str,
    count: int,
    counter: TokenCounter,
) -> Handoff:
    def shown(section: str) -> list[Any]:
        return [source for name, _, source in kept if name == section]

    customer: list[StoredMemory] = shown(_CUSTOMER)
    facts: list[StoredMemory] = shown(_FACTS)
    past: list[Resolution] = shown(_HISTORY)
    episode_ids = [*shown(_ISSUE), *shown(_STEPS), *shown(_RECENT)]
    return Handoff(
        subject_id=subject_id,
        session_id=session_id,
        reason=reason,
        generated_at=as_of,
        customer_summary="; ".join(memory.content for memory in customer),
        active_issue=next((text for name, text, _ in kept if name == _ISSUE), ""),
        attempted_steps=[text.removeprefix("- ") for name, text, _ in kept if name == _STEPS],
        key_facts=[memory.content for memory in facts],
        resolution_history=[
            PastResolution(r.session_id, r.status.value, r.resolution_summary, r.resolved_at)
            for r in past
        ],
        recent_context=[text.removeprefix("- ") for name, text, _ in kept if name == _RECENT],
        health_score=health.score,
        health_state=health.state,
        health_factors=list(health.factors),
        handoff_notes=notes,
        token_estimate=count,
        provenance={
            "fact_ids": sorted(str(memory.id) for memory in (*customer, *facts)),
            "episode_ids": sorted(str(episode_id) for episode_id in episode_ids),
            "resolution_ids": sorted(str(r.id) for r in past),
            "as_of": as_of.isoformat(),
            "tokenizer": counter.name,
        },
    )
