"""Losers of memories that no longer stand: ``withdraw_unsupported`` narrows or retires,
``unsettled`` says whose wins are in question, and ``reconsider_losers`` decides their
contests again, so the subject ends as a compile of its remaining records would leave it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memsync.compile.policy import PolicyTable
from memsync.compile.resolve import (
    ChangeSet,
    Defeat,
    OpenConflict,
    SourceEvidence,
    SourceStanding,
    Supersession,
    apply_changes,
    manual_resolution,
    reconsider_losers,
    unsettled,
    withdraw_unsupported,
)
from memsync.compile.types import (
    CONTESTED,
    CandidateMemory,
    MemoryStatus,
    StoredMemory,
    SupersessionRule,
)

from .builders import (
    NOW,
    REGISTRY,
    SUBJECT,
    active_contents,
    by_content,
    claim,
    day,
    episode,
    run,
    statement,
)

DELETED, MOVED, REVISED_AWAY = (
    SourceStanding.DELETED,
    SourceStanding.MOVED,
    SourceStanding.REVISED_AWAY,
)
BERLIN, MADRID, LISBON = (f"location.current = {city}" for city in ("Berlin", "Madrid", "Lisbon"))
STRIPE_OLD = "Stripe charges 3.5% + 35¢ per transaction"
STRIPE_NEW = "Stripe charges 2.9% + 30¢ per transaction"


@dataclass
class Subject:
    """One subject's memories as compiles leave them, with every record and conflict
    they wrote and when each source episode asserted what it asserts."""

    policies: PolicyTable = field(default_factory=PolicyTable)
    store: list[StoredMemory] = field(default_factory=list)
    records: list[Supersession] = field(default_factory=list)
    conflicts: dict[uuid.UUID, OpenConflict] = field(default_factory=dict)
    times: dict[uuid.UUID, datetime] = field(default_factory=dict)
    gone: dict[uuid.UUID, SourceStanding] = field(default_factory=dict)
    candidates: list[CandidateMemory] = field(default_factory=list)

    def derive(self, *candidates: CandidateMemory) -> ChangeSet:
        """A compile of episodes that assert ``candidates``."""
        for candidate in candidates:
            self.times.update(dict.fromkeys(candidate.source_episode_ids, candidate.valid_from))
        self.candidates.extend(candidates)
        changes, self.store = run(candidates, self.store, policies=self.policies)
        self._record(changes)
        return changes

    def lose(self, standings: dict[int, SourceStanding]) -> ChangeSet:
        """A compile that finds the episodes numbered in ``standings`` gone as it says:
        what ``reconsider_losers`` changed after ``withdraw_unsupported``."""
        self.gone.update({episode(number): where for number, where in standings.items()})
        evidence = self.evidence()
        withdrawn = withdraw_unsupported(
            self.store, evidence.standings, "job-2", NOW, asserted_at=evidence.asserted_at
        )
        shaken = unsettled(self.store, evidence.standings, withdrawn)
        assert shaken  # something no longer stands as it did
        self.store = apply_changes(self.store, withdrawn)
        self._record(withdrawn)
        again = self.reconsider()
        self.store = apply_changes(self.store, again)
        self._record(again)
        return again

    def reconsider(self) -> ChangeSet:
        # The whole subject is "around" the unsettled memories: a superset of what the
        # store's walk finds, which must not change the outcome.
        return reconsider_losers(
            SUBJECT,
            self.store,
            {memory.id for memory in self.store},
            self.defeats(),
            self.evidence(),
            list(self.conflicts.values()),
            self.policies,
            REGISTRY,
            "job-2",
            NOW,
        )

    def evidence(self) -> SourceEvidence:
        standings = {
            memory.id: {
                e: self.gone.get(e, SourceStanding.SUPPORTS) for e in memory.source_episode_ids
            }
            for memory in self.store
        }
        asserted = {
            memory.id: {e: self.times[e] for e in memory.source_episode_ids if e not in self.gone}
            for memory in self.store
        }
        return SourceEvidence(standings, asserted)

    def defeats(self) -> list[Defeat]:
        return [
            Defeat(
                loser_memory_id=record.loser_memory_id,
                winner_memory_id=record.winner_memory_id,
                winner_memory_key=record.winner_memory_key,
                rule=record.rule,
                score=record.score,
                threshold=record.threshold,
                decided_at=record.decided_at,
            )
            for record in self.records
            if record.rule in CONTESTED
            and record.loser_memory_id is not None
            and record.winner_memory_id is not None
            and record.winner_memory_key is not None
        ]

    def clean(self) -> list[str]:
        """The active memories of one compile of the episodes that are left."""
        left = [
            candidate
            for candidate in self.candidates
            if not set(candidate.source_episode_ids) & set(self.gone)
        ]
        return active_contents(run(left, policies=self.policies)[1])

    def _record(self, changes: ChangeSet) -> None:
        self.records.extend(changes.supersessions)
        self.conflicts.update({conflict.id: conflict for conflict in changes.open_conflicts})
        for resolved in changes.resolved_conflict_ids:
            self.conflicts.pop(resolved, None)


def rules_of(records: Sequence[Supersession]) -> list[SupersessionRule]:
    return [record.rule for record in records]


# -- a retired winner hands its claim back ----------------------------------------------


def test_a_loser_comes_back_when_its_winner_is_retired_with_a_record_naming_both() -> None:
    subject = Subject()
    subject.derive(claim("location.current", "Berlin", 1, source=1))
    subject.derive(claim("location.current", "Madrid", 2, source=2))
    madrid = by_content(subject.store, MADRID)

    changes = subject.lose({2: DELETED})

    assert active_contents(subject.store) == [BERLIN] == subject.clean()
    berlin = by_content(subject.store, BERLIN)
    assert (berlin.status, berlin.status_rule, berlin.valid_to) == (
        MemoryStatus.ACTIVE,
        SupersessionRule.WINNER_RETIRED,
        None,
    )
    (change,) = changes.status_changes
    assert (change.memory_id, change.from_status, change.to_status) == (
        berlin.id,
        MemoryStatus.SUPERSEDED,
        MemoryStatus.ACTIVE,
    )
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.WINNER_RETIRED
    assert (record.winner_memory_id, record.loser_memory_id) == (madrid.id, berlin.id)
    assert (record.winner_episode_ids, record.loser_episode_ids) == ((episode(2),), (episode(1),))
    assert (record.claim_key, record.score, record.job_id) == ("location.current", None, "job-2")
    assert by_content(subject.store, MADRID).status is MemoryStatus.TOMBSTONED


def test_a_lexical_loser_comes_back_with_the_score_of_the_contest_it_lost() -> None:
    subject = Subject(PolicyTable.from_mapping({"fact": "recency_wins"}))
    subject.derive(statement(STRIPE_OLD, 1, source=1))
    (lost,) = subject.derive(statement(STRIPE_NEW, 2, source=2)).supersessions

    (record,) = subject.lose({2: MOVED}).supersessions

    assert active_contents(subject.store) == [STRIPE_OLD]
    assert (record.rule, record.score, record.threshold) == (
        SupersessionRule.WINNER_RETIRED,
        lost.score,
        lost.threshold,
    )
    assert lost.score is not None


def test_reconsidering_its_own_result_changes_nothing() -> None:
    subject = Subject()
    subject.derive(claim("location.current", "Berlin", 1, source=1))
    subject.derive(claim("location.current", "Madrid", 2, source=2))
    subject.lose({2: DELETED})

    assert subject.reconsider().is_empty


def test_a_chain_whose_middle_lost_its_sources_too_hands_the_claim_to_its_end() -> None:
    # Berlin beat by Madrid, Madrid beat by Lisbon; Lisbon's and Madrid's sources go.
    subject = Subject()
    subject.derive(claim("location.current", "Berlin", 1, source=1))
    subject.derive(claim("location.current", "Madrid", 2, source=2))
    subject.derive(claim("location.current", "Lisbon", 3, source=3))

    changes = subject.lose({2: DELETED, 3: DELETED})

    assert active_contents(subject.store) == [BERLIN] == subject.clean()
    (record,) = changes.supersessions
    madrid = by_content(subject.store, MADRID)
    assert (record.rule, record.winner_memory_id) == (SupersessionRule.WINNER_RETIRED, madrid.id)
    # It lost before, and its evidence is gone now: retired, so a later assertion of
    # Madrid is not merged with a source that was deleted.
    assert (madrid.status, madrid.status_rule) == (
        MemoryStatus.TOMBSTONED,
        SupersessionRule.SOURCE_DELETED,
    )


def test_when_two_losers_come_back_the_contest_between_them_is_decided_again() -> None:
    # Lisbon (an explicit move) beat a home in Berlin and then one in Madrid under
    # keep_existing; without Lisbon, Berlin (first) keeps the claim and Madrid loses
    # to it, which a record says, so that Madrid returns when Berlin goes in turn.
    subject = Subject()
    subject.derive(claim("location.home_city", "Lisbon", 1, source=1, explicit=True))
    subject.derive(claim("location.home_city", "Berlin", 2, source=2))
    subject.derive(claim("location.home_city", "Madrid", 3, source=3))

    changes = subject.lose({1: REVISED_AWAY})

    assert active_contents(subject.store) == ["location.home_city = Berlin"] == subject.clean()
    berlin = by_content(subject.store, "location.home_city = Berlin")
    madrid = by_content(subject.store, "location.home_city = Madrid")
    assert madrid.status is MemoryStatus.SUPERSEDED
    assert [(r.rule, r.winner_memory_id, r.loser_memory_id) for r in changes.supersessions] == [
        (SupersessionRule.POLICY_KEEP_EXISTING, berlin.id, madrid.id),
        (SupersessionRule.WINNER_RETIRED, memory_of(subject, "Lisbon").id, berlin.id),
    ]

    subject.lose({2: DELETED})

    assert active_contents(subject.store) == ["location.home_city = Madrid"] == subject.clean()


def memory_of(subject: Subject, city: str) -> StoredMemory:
    return by_content(subject.store, f"location.home_city = {city}")


# -- a winner that loses the assertion it won on ---------------------------------------


def test_a_winner_whose_latest_assertion_goes_away_is_narrowed_and_may_lose() -> None:
    subject = Subject()
    subject.derive(claim("location.current", "Berlin", 1, source=1))
    subject.derive(claim("location.current", "Madrid", 2, source=2))
    subject.derive(claim("location.current", "Berlin", 3, source=3))  # Berlin again
    assert active_contents(subject.store) == [BERLIN]

    changes = subject.lose({3: DELETED})

    assert active_contents(subject.store) == [MADRID] == subject.clean()
    berlin = by_content(subject.store, BERLIN)
    assert (berlin.status, berlin.last_asserted) == (MemoryStatus.SUPERSEDED, day(1))
    # Madrid beat Berlin here; that record says why it is back.
    assert [(r.rule, r.loser_memory_id) for r in changes.supersessions] == [
        (SupersessionRule.CLAIM_CONTRADICTION, berlin.id)
    ]
    assert by_content(subject.store, MADRID).status_rule is None


def test_withdrawing_narrows_a_memory_to_the_times_of_the_sources_left() -> None:
    _, store = run(
        [claim("tools.used", "vim", 1, source=1), claim("tools.used", "vim", 4, source=2)]
    )
    (memory,) = store
    standings = {memory.id: {episode(1): SourceStanding.SUPPORTS, episode(2): MOVED}}

    changes = withdraw_unsupported(
        store, standings, "job-2", NOW, asserted_at={memory.id: {episode(1): day(1)}}
    )

    (narrowed,) = changes.provenance_to_add
    assert (narrowed.episode_ids, narrowed.valid_from, narrowed.asserted_at) == ((), day(1), day(1))
    assert changes.status_changes == changes.supersessions == ()
    assert unsettled(store, standings, changes) == {memory.id}
    store = apply_changes(store, changes)
    assert store[0].last_asserted == day(1)
    assert withdraw_unsupported(
        store, standings, "job-3", NOW, asserted_at={memory.id: {episode(1): day(1)}}
    ).is_empty


def test_a_superseded_memory_no_source_supports_is_unsettled() -> None:
    _, store = run(
        [
            claim("location.current", "Berlin", 1, source=1),
            claim("location.current", "Madrid", 2, source=2),
        ]
    )
    berlin = by_content(store, BERLIN)
    standings = {berlin.id: {episode(1): DELETED}}

    withdrawn = withdraw_unsupported(store, standings, "job-2", NOW)

    assert [change.memory_id for change in withdrawn.status_changes] == [berlin.id]
    assert unsettled(store, standings, withdrawn) == {berlin.id}
    # Unsettled as well when the withdrawal is not handed in: no source supports it.
    assert unsettled(store, standings, ChangeSet()) == {berlin.id}


# -- conflicts and people --------------------------------------------------------------


def test_an_open_conflict_with_a_retired_side_is_resolved_and_the_other_side_stays() -> None:
    subject = Subject()
    subject.derive(statement(STRIPE_OLD, 1, source=1))
    (conflict,) = subject.derive(statement(STRIPE_NEW, 2, source=2)).open_conflicts

    changes = subject.lose({2: DELETED})

    assert changes.resolved_conflict_ids == (conflict.id,)
    assert active_contents(subject.store) == [STRIPE_OLD] == subject.clean()
    assert subject.conflicts == {}


def test_a_loser_that_comes_back_under_flag_opens_a_conflict_with_the_active_rival() -> None:
    # "I'm no longer in Berlin" beat Berlin; Madrid came after under flag (both stay).
    subject = Subject(PolicyTable.from_mapping({"current_state": "flag"}))
    subject.derive(claim("location.current", "Berlin", 1, source=1))
    subject.derive(claim("location.current", "Berlin", 2, source=2, negated=True))
    subject.derive(claim("location.current", "Madrid", 3, source=3))
    assert active_contents(subject.store) == [MADRID, "not location.current = Berlin"]

    changes = subject.lose({2: DELETED})

    assert active_contents(subject.store) == [BERLIN, MADRID] == subject.clean()
    (opened,) = changes.open_conflicts
    assert set(opened.contents) == {BERLIN, MADRID}


def test_a_memory_a_person_rejected_stays_rejected_when_the_kept_one_retires() -> None:
    subject = Subject()
    subject.derive(statement(STRIPE_OLD, 1, source=1))
    (conflict,) = subject.derive(statement(STRIPE_NEW, 2, source=2)).open_conflicts
    chosen, rejected = by_content(subject.store, STRIPE_NEW), by_content(subject.store, STRIPE_OLD)
    decision = manual_resolution(conflict, chosen, rejected, job_id=None, now=NOW)
    subject.store = apply_changes(subject.store, decision)
    subject.records.extend(decision.supersessions)
    subject.conflicts.clear()

    changes = subject.lose({2: DELETED})

    assert active_contents(subject.store) == []
    assert changes.status_changes == ()
    assert by_content(subject.store, STRIPE_OLD).status_rule is SupersessionRule.MANUAL
