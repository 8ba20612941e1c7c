"""The pure support views: who spoke, health signals and states, SLA, handoff briefs."""

from __future__ import annotations

import uuid
from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st

from memsync.compile.resolve import OpenConflict
from memsync.compile.support import (
    Health,
    Resolution,
    ResolutionStatus,
    SessionMessage,
    Speaker,
    assemble_handoff,
    speaker_of,
    subject_health,
    subject_sla,
)
from memsync.compile.tokenizer import CharacterEstimate
from memsync.compile.types import (
    EpisodeView,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
    SupersessionRule,
)
from tests.unit.compile.builders import SUBJECT, day, episode

HEALTHY = Health(SUBJECT, 100, "healthy", [])


def memory(
    number: int,
    content: str,
    *,
    kind: MemoryKind = MemoryKind.FACT,
    status: MemoryStatus = MemoryStatus.ACTIVE,
    on: float = 100,
) -> StoredMemory:
    return StoredMemory(
        id=uuid.UUID(int=1000 + number),
        subject_id=SUBJECT,
        memory_key=f"k{number}",
        kind=kind,
        content=content,
        claim_key=None,
        claim_value=None,
        valid_from=day(on),
        valid_to=None,
        status=status,
        source_episode_ids=(episode(number),),
        created_at=day(on),
    )


def said(number: int, session: str, speaker: Speaker, text: str, minutes: float) -> SessionMessage:
    role = "user" if speaker is Speaker.CUSTOMER else "agent"
    view = EpisodeView(
        id=episode(number),
        subject_id=SUBJECT,
        source="zendesk",
        type="comment",
        payload={"messages": [{"role": role, "content": text}]},
        occurred_at=day(100) + timedelta(minutes=minutes),
        revision=1,
        content_hash=str(number),
    )
    return SessionMessage(session, view, speaker)


def record(session: str, status: ResolutionStatus, minutes: float = 0) -> Resolution:
    at = day(100) + timedelta(minutes=minutes)
    return Resolution(
        id=uuid.uuid5(uuid.NAMESPACE_URL, session),
        subject_id=SUBJECT,
        session_id=session,
        status=status,
        resolution_summary=f"{session} summary",
        resolved_at=at if status is ResolutionStatus.RESOLVED else None,
        metadata={},
        created_at=at,
        updated_at=at,
    )


def conflict(first: StoredMemory, second: StoredMemory) -> OpenConflict:
    return OpenConflict(
        id=uuid.UUID(int=77),
        subject_id=SUBJECT,
        kind=first.kind,
        claim_key=None,
        rule=SupersessionRule.LEXICAL,
        score=None,
        threshold=None,
        memory_ids=(first.id, second.id),
        memory_keys=(first.memory_key, second.memory_key),
        contents=(first.content, second.content),
        job_id=None,
        detected_at=day(100),
    )


def test_the_first_message_role_or_a_role_field_says_who_spoke() -> None:
    assert speaker_of({"messages": [{"role": "assistant", "content": "hi"}]}, {}) is Speaker.AGENT
    assert speaker_of({"messages": [{"role": "user", "content": "hi"}]}, {}) is Speaker.CUSTOMER
    assert speaker_of({"text": "hi"}, {"role": "Agent"}) is Speaker.AGENT
    assert speaker_of({"text": "hi", "role": "support"}, {}) is Speaker.AGENT
    assert speaker_of({"text": "hi"}, {}) is Speaker.CUSTOMER


def test_each_signal_costs_its_points_up_to_its_cap_and_the_score_picks_the_state() -> None:
    health = subject_health(
        SUBJECT,
        open_conflicts=5,
        resolutions=[record(f"s{n}", ResolutionStatus.UNRESOLVED) for n in range(2)],
        issues={"s0": "invoice total wrong", "s1": "invoice total wrong again", "s2": "login"},
        stale_memories=1,
    )
    assert {f.signal: f.impact for f in health.factors} == {
        "open_conflicts": -30,  # capped
        "unresolved_sessions": -30,
        "repeated_issues": -10,
        "stale_memories": -2,
    }
    assert [f.detail for f in health.factors][-1] == "1 memory not asserted for 180 days"
    assert (health.score, health.state) == (28, "at_risk")
    assert subject_health(
        SUBJECT, open_conflicts=0, resolutions=[], issues={}, stale_memories=0
    ) == Health(SUBJECT, 100, "healthy", [])


@given(st.integers(0, 10), st.integers(0, 10), st.integers(0, 10))
def test_the_score_stays_between_0_and_100_and_its_state_follows_the_thresholds(
    conflicts: int, unresolved: int, still_open: int
) -> None:
    resolutions = [record(f"u{n}", ResolutionStatus.UNRESOLVED) for n in range(unresolved)]
    resolutions += [record(f"o{n}", ResolutionStatus.OPEN) for n in range(still_open)]
    health = subject_health(
        SUBJECT,
        open_conflicts=conflicts,
        resolutions=resolutions,
        issues={},
        stale_memories=0,
    )
    assert 0 <= health.score <= 100
    assert health.score == 100 + sum(factor.impact for factor in health.factors)
    expected = "healthy" if health.score >= 70 else "watch" if health.score >= 40 else "at_risk"
    assert health.state == expected


def test_sla_counts_an_open_wait_up_to_as_of_and_lists_sessions_by_start() -> None:
    messages = [
        said(2, "late", Speaker.CUSTOMER, "second", 60),
        said(1, "early", Speaker.CUSTOMER, "first", 0),
        said(3, "early", Speaker.AGENT, "answer", 4),
    ]
    sla = subject_sla(
        SUBJECT,
        messages,
        [
            record("early", ResolutionStatus.RESOLVED, minutes=30),
            record("silent", ResolutionStatus.OPEN, 90),
        ],
        first_response_threshold=timedelta(minutes=5),
        resolution_threshold=timedelta(hours=1),
        as_of=day(100) + timedelta(minutes=120),
    )
    assert [s.session_id for s in sla.sessions] == ["early", "late", "silent"]
    early, late, silent = sla.sessions
    assert (early.first_response_seconds, early.resolution_seconds) == (240.0, 1800.0)
    assert (late.first_response_breached, late.open_duration_seconds) == (True, 3600.0)
    assert (silent.first_message_at, silent.first_response_breached) == (None, False)
    assert (sla.resolved_sessions, sla.open_sessions, sla.first_response_breach_count) == (1, 2, 1)


def test_a_handoff_shows_no_superseded_or_contested_memory_nor_their_episodes() -> None:
    kept = memory(1, "Works at Acme", kind=MemoryKind.PROFILE_FACT)
    lost = memory(
        2, "Works at Globex", kind=MemoryKind.PROFILE_FACT, status=MemoryStatus.SUPERSEDED
    )
    left, right = memory(3, "Plan is gold"), memory(4, "Plan is silver")
    brief = assemble_handoff(
        SUBJECT,
        "s1",
        "escalation",
        memories=[kept, lost, left, right],
        open_conflicts=[conflict(left, right)],
        session=[said(9, "s1", Speaker.CUSTOMER, "My plan is wrong", 0)],
        recent=[said(n, "x", Speaker.CUSTOMER, f"episode {n} text", n).episode for n in (2, 3, 5)],
        resolutions=[],
        health=HEALTHY,
        as_of=day(101),
        max_tokens=1000,
        counter=CharacterEstimate(),
    )
    assert brief.customer_summary == "Works at Acme"
    assert brief.key_facts == []
    assert brief.recent_context == [
        f"{(day(100) + timedelta(minutes=5)).isoformat()} zendesk/comment: episode 5 text"
    ]
    assert "Globex" not in brief.handoff_notes
    assert "gold" not in brief.handoff_notes
    assert brief.active_issue == "My plan is wrong"


@given(st.integers(min_value=1, max_value=400))
def test_a_handoff_never_spends_more_than_its_budget_unless_the_header_alone_does(
    max_tokens: int,
) -> None:
    counter = CharacterEstimate()
    brief = assemble_handoff(
        SUBJECT,
        "s1",
        "escalation",
        memories=[memory(n, f"fact number {n} about the account") for n in range(12)],
        open_conflicts=[],
        session=[said(100 + n, "s1", Speaker.AGENT, f"step {n} was tried", n) for n in range(12)],
        recent=[],
        resolutions=[record(f"r{n}", ResolutionStatus.RESOLVED, n) for n in range(5)],
        health=HEALTHY,
        as_of=day(101),
        max_tokens=max_tokens,
        counter=counter,
    )
    assert brief.token_estimate == counter.count(brief.handoff_notes)
    shown = brief.key_facts + brief.attempted_steps
    if shown or brief.resolution_history:
        assert brief.token_estimate <= max_tokens
    assert all(text in brief.handoff_notes for text in shown)
