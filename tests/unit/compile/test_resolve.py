from __future__ import annotations

from dataclasses import replace

import pytest

from memsync.compile.claims import ClaimRegistryError
from memsync.compile.policy import PolicyTable
from memsync.compile.resolve import (
    SourceStanding,
    apply_changes,
    conflict_id,
    manual_resolution,
    memory_id,
    withdraw_unsupported,
)
from memsync.compile.similarity import SimilarityThresholds
from memsync.compile.types import MemoryKind, MemoryStatus, StoredMemory, SupersessionRule

from .builders import (
    NOW,
    SUBJECT,
    active_contents,
    by_content,
    claim,
    day,
    episode,
    run,
    statement,
)

STRIPE_OLD = "Stripe charges 3.5% + 35¢ per transaction"
STRIPE_NEW = "Stripe charges 2.9% + 30¢ per transaction"


# -- set semantics --------------------------------------------------------------------


def test_the_same_statement_from_two_episodes_is_one_memory_with_both_sources() -> None:
    changes, store = run(
        [
            claim("location.home_city", "Lisbon", 1, source=1),
            claim("location.home_city", "lisbon.", 2, source=2),
        ]
    )

    assert changes.memories_created == 1
    (memory,) = store
    assert memory.source_episode_ids == (episode(1), episode(2))
    assert memory.valid_from == day(1)
    assert memory.last_asserted == day(2)


def test_rederiving_a_stored_memory_adds_provenance_and_creates_nothing() -> None:
    _, store = run([claim("location.home_city", "Lisbon", 1, source=1)])

    changes, store = run([claim("location.home_city", "Lisbon", 3, source=7)], store)

    assert changes.memories_created == 0
    (addition,) = changes.provenance_to_add
    assert addition.episode_ids == (episode(7),)
    assert store[0].source_episode_ids == (episode(1), episode(7))


def test_resolving_the_same_candidates_again_yields_an_empty_change_set() -> None:
    candidates = [
        claim("location.home_city", "Lisbon", 1),
        claim("location.home_city", "Porto", 2),
        claim("location.current", "Berlin", 3),
        statement(STRIPE_OLD, 4),
        statement(STRIPE_NEW, 5),
    ]
    _, store = run(candidates)

    again, _ = run(candidates, store)

    assert again.is_empty


def test_new_memory_ids_are_derived_from_the_memory_key() -> None:
    changes, _ = run([claim("location.home_city", "Lisbon", 1)])

    (created,) = changes.memories_to_create
    assert created.id == memory_id(created.memory_key)


def test_the_outcome_does_not_depend_on_candidate_order() -> None:
    candidates = [
        claim("location.current", "Berlin", 1),
        claim("location.current", "Madrid", 2),
        claim("location.home_city", "Lisbon", 1),
        claim("location.home_city", "Porto", 2, explicit=True),
        statement(STRIPE_OLD, 1),
        statement(STRIPE_NEW, 2),
    ]

    forward, _ = run(candidates)
    backward, _ = run(list(reversed(candidates)))

    assert forward == backward


# -- recency_wins ---------------------------------------------------------------------


def test_recency_wins_supersedes_the_older_state_and_records_why() -> None:
    _, store = run([claim("location.current", "Berlin", 1, source=1)])

    changes, store = run([claim("location.current", "Madrid", 5, source=2)], store)

    assert active_contents(store) == ["location.current = Madrid"]
    berlin = by_content(store, "location.current = Berlin")
    madrid = by_content(store, "location.current = Madrid")
    assert berlin.status is MemoryStatus.SUPERSEDED
    assert berlin.valid_to == madrid.valid_from == day(5)
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.CLAIM_CONTRADICTION
    assert record.claim_key == "location.current"
    assert (record.winner_memory_id, record.loser_memory_id) == (madrid.id, berlin.id)
    assert (record.winner_memory_key, record.loser_memory_key) == (
        madrid.memory_key,
        berlin.memory_key,
    )
    assert record.winner_episode_ids == (episode(2),)
    assert record.loser_episode_ids == (episode(1),)
    assert (record.subject_id, record.job_id, record.decided_at) == (SUBJECT, "job-1", NOW)


def test_recency_wins_stores_an_older_late_arrival_as_history() -> None:
    _, store = run([claim("location.current", "Madrid", 5)])

    changes, store = run([claim("location.current", "Berlin", 1)], store)

    assert active_contents(store) == ["location.current = Madrid"]
    berlin = by_content(store, "location.current = Berlin")
    assert berlin.status is MemoryStatus.SUPERSEDED
    assert berlin.valid_to == day(5)
    assert changes.supersessions[0].rule is SupersessionRule.CLAIM_CONTRADICTION


def test_a_superseded_statement_asserted_again_later_is_reinstated() -> None:
    _, store = run(
        [
            claim("location.current", "Lisbon", 1, source=1),
            claim("location.current", "Berlin", 2, source=2),
        ]
    )

    changes, store = run([claim("location.current", "Lisbon", 3, source=3)], store)

    assert changes.memories_created == 0
    assert active_contents(store) == ["location.current = Lisbon"]
    lisbon = by_content(store, "location.current = Lisbon")
    assert lisbon.valid_to is None
    assert lisbon.source_episode_ids == (episode(1), episode(3))
    assert by_content(store, "location.current = Berlin").valid_to == day(3)


# -- keep_existing --------------------------------------------------------------------


def test_keep_existing_stores_a_contradicting_newcomer_as_superseded() -> None:
    _, store = run([claim("location.home_city", "Lisbon", 1)])

    changes, store = run([claim("location.home_city", "Porto", 5)], store)

    assert active_contents(store) == ["location.home_city = Lisbon"]
    porto = by_content(store, "location.home_city = Porto")
    assert porto.status is MemoryStatus.SUPERSEDED
    assert porto.status_rule is SupersessionRule.POLICY_KEEP_EXISTING
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.POLICY_KEEP_EXISTING
    assert record.loser_memory_id == porto.id


def test_keep_existing_yields_to_an_explicit_change() -> None:
    _, store = run([claim("location.home_city", "Lisbon", 1)])

    changes, store = run([claim("location.home_city", "Porto", 5, explicit=True)], store)

    assert active_contents(store) == ["location.home_city = Porto"]
    assert changes.supersessions[0].rule is SupersessionRule.CLAIM_CONTRADICTION
    assert by_content(store, "location.home_city = Lisbon").valid_to == day(5)


def test_an_older_explicit_change_arriving_late_wins_as_it_would_in_time_order() -> None:
    # In time order "I moved to Porto" (day 1) holds, and the plain "I live in Lisbon"
    # (day 5) is kept out; arriving after Lisbon's compile must not change that.
    _, store = run([claim("location.home_city", "Lisbon", 5)])

    changes, store = run([claim("location.home_city", "Porto", 1, explicit=True)], store)

    porto, lisbon = (
        claim("location.home_city", "Porto", 1, explicit=True),
        claim("location.home_city", "Lisbon", 5),
    )
    _, in_time_order = run([porto, lisbon])
    assert active_contents(store) == active_contents(in_time_order)
    assert active_contents(store) == ["location.home_city = Porto"]
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.POLICY_KEEP_EXISTING
    assert record.loser_memory_key == by_content(store, "location.home_city = Lisbon").memory_key


def test_keep_existing_keeps_the_first_asserted_claim_whichever_arrived_first() -> None:
    # Regression: the store kept whichever plain statement was compiled first, so a
    # backfill of older records, or a chunk boundary, decided the subject's home city.
    lisbon, porto = (
        claim("location.home_city", "Lisbon", 5),
        claim("location.home_city", "Porto", 1),
    )
    _, store = run([lisbon])

    changes, store = run([porto], store)

    assert active_contents(store) == ["location.home_city = Porto"]
    assert active_contents(run([porto, lisbon])[1]) == ["location.home_city = Porto"]
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.POLICY_KEEP_EXISTING
    assert by_content(store, "location.home_city = Lisbon").valid_to == day(5)


def test_a_superseded_claim_given_older_evidence_late_holds_under_keep_existing() -> None:
    _, store = run(
        [claim("location.home_city", "Lisbon", 1), claim("location.home_city", "Porto", 5)]
    )
    assert active_contents(store) == ["location.home_city = Lisbon"]

    _, store = run([claim("location.home_city", "Porto", 0, source=99)], store)

    assert active_contents(store) == ["location.home_city = Porto"]
    lisbon = by_content(store, "location.home_city = Lisbon")
    assert lisbon.status_rule is SupersessionRule.POLICY_KEEP_EXISTING


# -- flag -----------------------------------------------------------------------------


def test_two_stripe_rates_are_a_flagged_conflict_under_the_default_fact_policy() -> None:
    _, store = run([statement(STRIPE_OLD, 1)])

    changes, store = run([statement(STRIPE_NEW, 30)], store)

    assert active_contents(store) == sorted([STRIPE_OLD, STRIPE_NEW])
    assert changes.supersessions == ()
    (conflict,) = changes.open_conflicts
    assert conflict.rule is SupersessionRule.LEXICAL
    assert conflict.kind is MemoryKind.FACT
    assert conflict.score == 1.0
    assert conflict.threshold == 0.6
    assert set(conflict.contents) == {STRIPE_OLD, STRIPE_NEW}
    assert conflict.id == conflict_id(*conflict.memory_keys)


def test_flag_on_a_single_valued_claim_keeps_both_and_opens_a_conflict() -> None:
    policies = PolicyTable.from_mapping({"profile_fact": "flag"})

    changes, store = run(
        [claim("location.home_city", "Lisbon", 1), claim("location.home_city", "Porto", 2)],
        policies=policies,
    )

    assert len(active_contents(store)) == 2
    (conflict,) = changes.open_conflicts
    assert conflict.rule is SupersessionRule.CLAIM_CONTRADICTION
    assert conflict.claim_key == "location.home_city"


def test_a_configured_policy_replaces_the_default() -> None:
    policies = PolicyTable.from_mapping({"fact": "recency_wins"})

    changes, store = run([statement(STRIPE_OLD, 1), statement(STRIPE_NEW, 30)], policies=policies)

    assert active_contents(store) == [STRIPE_NEW]
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.LEXICAL
    assert (record.score, record.threshold) == (1.0, 0.6)


def test_unknown_policy_or_kind_in_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown conflict policy 'newest'"):
        PolicyTable.from_mapping({"fact": "newest"})
    with pytest.raises(ValueError, match="unknown memory kind 'facts'"):
        PolicyTable.from_mapping({"facts": "flag"})


# -- what does not conflict -----------------------------------------------------------


def test_berlin_this_week_does_not_contradict_living_in_lisbon() -> None:
    changes, store = run(
        [claim("location.home_city", "Lisbon", 1), claim("location.current", "Berlin", 2)]
    )

    assert active_contents(store) == ["location.current = Berlin", "location.home_city = Lisbon"]
    assert changes.supersessions == changes.open_conflicts == ()


def test_values_of_a_multi_valued_key_coexist() -> None:
    changes, store = run([claim("tools.used", "vim", 1), claim("tools.used", "neovim", 2)])

    assert active_contents(store) == ["tools.used = neovim", "tools.used = vim"]
    assert changes.supersessions == ()


def test_claims_with_non_overlapping_validity_coexist() -> None:
    changes, store = run(
        [
            claim("location.current", "Berlin", 1, until=3),
            claim("location.current", "Madrid", 3),
        ]
    )

    assert active_contents(store) == ["location.current = Berlin", "location.current = Madrid"]
    assert changes.supersessions == ()


def test_claims_with_overlapping_bounded_validity_do_conflict() -> None:
    _, store = run(
        [
            claim("location.current", "Berlin", 1, until=4),
            claim("location.current", "Madrid", 3),
        ]
    )

    assert active_contents(store) == ["location.current = Madrid"]
    assert by_content(store, "location.current = Berlin").valid_to == day(3)


def test_episode_summaries_never_conflict() -> None:
    summaries = [
        statement("github issue: Stripe charges 3.5%", 1, kind=MemoryKind.EPISODE_SUMMARY),
        statement("github issue: Stripe charges 2.9%", 2, kind=MemoryKind.EPISODE_SUMMARY),
    ]

    changes, store = run(summaries)

    assert len(active_contents(store)) == 2
    assert changes.supersessions == changes.open_conflicts == ()


def test_same_single_valued_claim_from_another_kind_merges_as_a_duplicate() -> None:
    _, store = run([claim("location.current", "Berlin", 1, source=1)])

    changes, store = run(
        [claim("location.current", "Berlin", 2, source=2, kind=MemoryKind.PROFILE_FACT)], store
    )

    assert changes.memories_created == 0
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.CLAIM_DUPLICATE
    assert record.loser_memory_id is None
    assert store[0].source_episode_ids == (episode(1), episode(2))


# -- lexical threshold ----------------------------------------------------------------


def _words(count: int, start: int = 0) -> str:
    return " ".join(f"w{index}" for index in range(start, start + count))


def test_lexical_overlap_exactly_at_the_threshold_is_a_match() -> None:
    # 3 shared of 5 distinct words: 3/5 == 0.6
    first = statement(f"{_words(3)} alpha", 1)
    second = statement(f"{_words(3)} beta", 2)

    changes, _ = run([first, second])

    (conflict,) = changes.open_conflicts
    assert conflict.score == 0.6


def test_lexical_overlap_just_below_the_threshold_is_not_a_match() -> None:
    # 59 shared of 100 distinct words: 0.59
    first = statement(f"{_words(59)} {_words(21, start=100)}", 1)
    second = statement(f"{_words(59)} {_words(20, start=200)}", 2)

    changes, store = run([first, second])

    assert changes.open_conflicts == ()
    assert len(active_contents(store)) == 2


def test_lexical_threshold_is_configurable_per_kind() -> None:
    first = statement(f"{_words(3)} alpha", 1)
    second = statement(f"{_words(3)} beta", 2)
    stricter = SimilarityThresholds(per_kind={MemoryKind.FACT: 0.61})

    changes, _ = run([first, second], thresholds=stricter)

    assert changes.open_conflicts == ()


# -- negation -------------------------------------------------------------------------


def test_a_negation_ends_the_matching_claim() -> None:
    _, store = run([claim("employment.current_employer", "Acme", 1)])

    changes, store = run(
        [claim("employment.current_employer", "Acme", 5, negated=True)],
        store,
    )

    assert active_contents(store) == ["not employment.current_employer = Acme"]
    acme = by_content(store, "employment.current_employer = Acme")
    assert acme.status is MemoryStatus.SUPERSEDED
    assert acme.valid_to == day(5)
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.CLAIM_CONTRADICTION
    assert record.loser_memory_id == acme.id


def test_a_new_employer_after_leaving_the_old_one_is_accepted() -> None:
    _, store = run(
        [
            claim("employment.current_employer", "Acme", 1),
            claim("employment.current_employer", "Acme", 2, negated=True),
            claim("employment.current_employer", "Globex", 3),
        ]
    )

    assert active_contents(store) == [
        "employment.current_employer = Globex",
        "not employment.current_employer = Acme",
    ]


def test_a_negation_older_than_the_claim_does_not_end_it() -> None:
    _, store = run([claim("tools.used", "vim", 5)])

    _, store = run([claim("tools.used", "vim", 1, negated=True)], store)

    assert active_contents(store) == ["tools.used = vim"]


def test_a_negation_of_one_tool_leaves_the_others() -> None:
    _, store = run(
        [
            claim("tools.used", "vim", 1),
            claim("tools.used", "neovim", 1),
            claim("tools.used", "vim", 2, negated=True),
        ]
    )

    assert active_contents(store) == ["not tools.used = vim", "tools.used = neovim"]


# -- registry -------------------------------------------------------------------------


def test_an_alias_claim_key_is_stored_under_its_canonical_key() -> None:
    changes, _ = run([claim("location.city", "Lisbon", 1, kind=MemoryKind.PROFILE_FACT)])

    (created,) = changes.memories_to_create
    assert created.claim_key == "location.home_city"
    assert created.memory_key == claim("location.home_city", "Lisbon", 1).memory_key


def test_an_unknown_claim_key_is_rejected() -> None:
    with pytest.raises(ClaimRegistryError, match=r"unknown claim key 'pets\.count'"):
        run([claim("pets.count", "2", 1, kind=MemoryKind.FACT)])


def test_a_candidate_of_another_subject_is_rejected() -> None:
    stranger = replace(claim("tools.used", "vim", 1), subject_id="bob")

    with pytest.raises(ValueError, match="belongs to subject 'bob'"):
        run([stranger])


# -- retired sources, their return, and manual -----------------------------------------

MOVED, DELETED, REVISED_AWAY = (
    SourceStanding.MOVED,
    SourceStanding.DELETED,
    SourceStanding.REVISED_AWAY,
)


def _standing_of_episode_1(store: list[StoredMemory], standing: SourceStanding) -> dict:
    return {memory.id: {episode(1): standing} for memory in store}


def test_memories_whose_only_sources_were_revised_away_are_superseded() -> None:
    _, store = run(
        [
            claim("location.home_city", "Lisbon", 1, source=1),
            claim("tools.used", "vim", 1, source=1),
            claim("tools.used", "vim", 2, source=2),
            claim("location.current", "Berlin", 1, source=1),
        ]
    )
    berlin = by_content(store, "location.current = Berlin").id
    standings = _standing_of_episode_1(store, REVISED_AWAY)
    standings[berlin] = {episode(1): SourceStanding.SUPPORTS}  # derived again

    changes = withdraw_unsupported(store, standings, "job-2", NOW)
    store = apply_changes(store, changes)

    assert active_contents(store) == ["location.current = Berlin", "tools.used = vim"]
    (record,) = changes.supersessions
    assert record.rule is SupersessionRule.SOURCE_REVISED
    assert record.winner_memory_id is None
    lisbon = by_content(store, "location.home_city = Lisbon")
    assert (lisbon.status, lisbon.valid_to) == (MemoryStatus.SUPERSEDED, NOW)
    assert withdraw_unsupported(store, standings, "job-3", NOW).is_empty


@pytest.mark.parametrize(
    ("first", "second", "rule"),
    [
        (MOVED, MOVED, SupersessionRule.SOURCE_MOVED),
        (DELETED, DELETED, SupersessionRule.SOURCE_DELETED),
        (MOVED, DELETED, SupersessionRule.SOURCE_DELETED),
    ],
)
def test_a_memory_every_source_of_which_moved_or_was_deleted_is_tombstoned(
    first: SourceStanding, second: SourceStanding, rule: SupersessionRule
) -> None:
    _, store = run([statement(STRIPE_OLD, 1, source=1), statement(STRIPE_OLD, 2, source=2)])
    (memory,) = store

    changes = withdraw_unsupported(
        store, {memory.id: {episode(1): first, episode(2): second}}, "job-2", NOW
    )

    (change,) = changes.status_changes
    assert (change.to_status, change.rule) == (MemoryStatus.TOMBSTONED, rule)
    (record,) = changes.supersessions
    assert (record.rule, record.subject_id) == (rule, SUBJECT)
    assert record.loser_episode_ids == (episode(1), episode(2))


@pytest.mark.parametrize("gone", [MOVED, DELETED, REVISED_AWAY])
def test_a_memory_with_another_live_source_stays_active(gone: SourceStanding) -> None:
    _, store = run([statement(STRIPE_OLD, 1, source=1), statement(STRIPE_OLD, 2, source=2)])

    changes = withdraw_unsupported(store, _standing_of_episode_1(store, gone), "job-2", NOW)

    assert changes.is_empty


def test_a_memory_of_another_subject_is_retired_under_its_own_subject() -> None:
    _, store = run([statement(STRIPE_OLD, 1, source=1)])
    elsewhere = [replace(memory, subject_id="bob") for memory in store]

    changes = withdraw_unsupported(elsewhere, _standing_of_episode_1(elsewhere, MOVED), "j", NOW)

    assert [record.subject_id for record in changes.supersessions] == ["bob"]


@pytest.mark.parametrize(
    "retired", [SupersessionRule.SOURCE_DELETED, SupersessionRule.SOURCE_MOVED]
)
def test_a_tombstoned_memory_comes_back_when_its_record_asserts_it_again(
    retired: SupersessionRule,
) -> None:
    _, store = run([statement(STRIPE_OLD, 1, source=1)])
    gone = MOVED if retired is SupersessionRule.SOURCE_MOVED else DELETED
    store = apply_changes(
        store, withdraw_unsupported(store, _standing_of_episode_1(store, gone), "job-2", NOW)
    )

    changes, store = run([statement(STRIPE_OLD, 1, source=1)], store)

    (memory,) = store
    assert (memory.status, memory.status_rule, memory.valid_to) == (MemoryStatus.ACTIVE, None, None)
    assert [(c.from_status, c.to_status) for c in changes.status_changes] == [
        (MemoryStatus.TOMBSTONED, MemoryStatus.ACTIVE)
    ]


def test_a_returning_memory_that_loses_is_superseded_by_the_winner() -> None:
    _, store = run([claim("location.current", "Berlin", 1, source=1)])
    store = apply_changes(
        store, withdraw_unsupported(store, _standing_of_episode_1(store, DELETED), "j", NOW)
    )
    _, store = run([claim("location.current", "Madrid", 5, source=2)], store)

    changes, store = run([claim("location.current", "Berlin", 1, source=1)], store)

    berlin = by_content(store, "location.current = Berlin")
    assert (berlin.status, berlin.status_rule) == (
        MemoryStatus.SUPERSEDED,
        SupersessionRule.CLAIM_CONTRADICTION,
    )
    assert active_contents(store) == ["location.current = Madrid"]
    assert [record.rule for record in changes.supersessions] == [
        SupersessionRule.CLAIM_CONTRADICTION
    ]


@pytest.mark.parametrize(
    ("gone", "status", "rule"),
    [
        (MOVED, MemoryStatus.TOMBSTONED, SupersessionRule.SOURCE_MOVED),
        (DELETED, MemoryStatus.TOMBSTONED, SupersessionRule.SOURCE_DELETED),
        (REVISED_AWAY, MemoryStatus.SUPERSEDED, SupersessionRule.SOURCE_REVISED),
    ],
)
def test_a_loser_whose_sources_went_away_is_retired_and_keeps_its_end(
    gone: SourceStanding, status: MemoryStatus, rule: SupersessionRule
) -> None:
    _, store = run(
        [
            claim("location.current", "Berlin", 1, source=1),
            claim("location.current", "Madrid", 2, source=2),
        ]
    )
    berlin = by_content(store, "location.current = Berlin")

    changes = withdraw_unsupported(store, {berlin.id: {episode(1): gone}}, "j", NOW)
    store = apply_changes(store, changes)

    retired = by_content(store, "location.current = Berlin")
    assert (retired.status, retired.status_rule, retired.valid_to) == (status, rule, day(2))
    assert [record.rule for record in changes.supersessions] == [rule]
    assert withdraw_unsupported(store, {berlin.id: {episode(1): gone}}, "j", NOW).is_empty


@pytest.mark.parametrize("gone", [MOVED, DELETED, REVISED_AWAY])
def test_a_withdrawn_memory_asserted_again_is_dated_by_the_new_evidence_alone(
    gone: SourceStanding,
) -> None:
    # Day 1's source went away (a wording it had as an explicit change with it); day 4
    # says the same thing plainly: the memory is what day 4 alone derives, not a merge
    # with evidence that no longer exists.
    _, store = run([claim("location.home_city", "Porto", 1, source=1, explicit=True)])
    store = apply_changes(
        store, withdraw_unsupported(store, _standing_of_episode_1(store, gone), "j", NOW)
    )

    changes, store = run([claim("location.home_city", "Porto", 4, source=2)], store)

    (porto,) = store
    assert (porto.status, porto.status_rule, porto.valid_to) == (MemoryStatus.ACTIVE, None, None)
    assert (porto.valid_from, porto.last_asserted, porto.explicit_change) == (day(4), day(4), False)
    assert set(porto.source_episode_ids) == {episode(1), episode(2)}  # the store only appends
    (revised,) = changes.provenance_to_add
    assert (revised.valid_from, revised.asserted_at) == (day(4), day(4))


def test_a_memory_tombstoned_by_a_person_is_not_brought_back_by_evidence() -> None:
    _, store = run([statement(STRIPE_OLD, 1, source=1)])
    removed = [replace(memory, status=MemoryStatus.TOMBSTONED) for memory in store]

    changes, _ = run([statement(STRIPE_OLD, 3, source=2)], removed)

    assert changes.is_empty


def test_asserting_a_memory_again_is_noted_but_changes_nothing() -> None:
    candidates = [statement(STRIPE_OLD, 1, source=1), statement(STRIPE_OLD, 2, source=2)]
    _, store = run(candidates)

    again, _ = run(candidates, store)

    assert again.is_empty
    (noted,) = again.reassertions
    assert noted.episode_ids == (episode(1), episode(2))


def test_manual_resolution_supersedes_the_rejected_memory_and_closes_the_conflict() -> None:
    changes, store = run([statement(STRIPE_OLD, 1), statement(STRIPE_NEW, 30)])
    (conflict,) = changes.open_conflicts
    chosen, rejected = by_content(store, STRIPE_NEW), by_content(store, STRIPE_OLD)

    resolution = manual_resolution(conflict, chosen, rejected, job_id=None, now=NOW)
    store = apply_changes(store, resolution)

    assert active_contents(store) == [STRIPE_NEW]
    assert resolution.resolved_conflict_ids == (conflict.id,)
    (record,) = resolution.supersessions
    assert record.rule is SupersessionRule.MANUAL
    assert (record.winner_memory_id, record.loser_memory_id) == (chosen.id, rejected.id)
    assert record.winner_episode_ids == chosen.source_episode_ids


def test_a_manually_rejected_memory_is_not_reinstated_by_new_evidence() -> None:
    changes, store = run([statement(STRIPE_OLD, 1), statement(STRIPE_NEW, 30)])
    (conflict,) = changes.open_conflicts
    resolution = manual_resolution(
        conflict,
        by_content(store, STRIPE_NEW),
        by_content(store, STRIPE_OLD),
        job_id=None,
        now=NOW,
    )
    store = apply_changes(store, resolution)

    changes, store = run([statement(STRIPE_OLD, 60, source=99)], store)

    assert active_contents(store) == [STRIPE_NEW]
    assert changes.open_conflicts == ()


def test_manual_resolution_rejects_memories_outside_the_conflict() -> None:
    changes, store = run([statement(STRIPE_OLD, 1), statement(STRIPE_NEW, 30)])
    _, other = run([claim("tools.used", "vim", 1)])
    (conflict,) = changes.open_conflicts

    with pytest.raises(ValueError, match="choose one of them"):
        manual_resolution(conflict, by_content(store, STRIPE_NEW), other[0], job_id=None, now=NOW)
