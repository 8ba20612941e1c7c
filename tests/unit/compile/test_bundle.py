from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
from statewave.models import ContextBundle

from memsync.compile.bundle import assemble_bundle, estimate_tokens
from memsync.compile.policy import PolicyTable
from memsync.compile.types import EpisodeView, MemoryKind, MemoryStatus, StoredMemory
from memsync.episode import canonical_json

from .builders import SUBJECT, by_content, claim, day, run, statement

AS_OF = day(40)
STRIPE_OLD = "Stripe charges 3.5% + 35¢ per transaction"
STRIPE_NEW = "Stripe charges 2.9% + 30¢ per transaction"


def store() -> tuple[list[StoredMemory], list[EpisodeView]]:
    changes, memories = run(
        [
            claim("location.home_city", "Lisbon", 1),
            claim("location.current", "Berlin", 2),
            claim("location.current", "Madrid", 30),
            claim("tools.used", "neovim", 3),
            statement("We decided to use Postgres for the queue", 4, kind=MemoryKind.DECISION),
            statement("The API rate limit is 100 requests per minute", 5),
        ]
    )
    assert changes.supersessions  # Berlin was superseded by Madrid
    episodes = [
        EpisodeView(
            id=uuid.UUID(int=n),
            subject_id=SUBJECT,
            source="slack",
            type="message",
            payload={"text": f"message number {n}"},
            occurred_at=day(n),
            revision=1,
            content_hash=f"h{n}",
        )
        for n in range(1, 6)
    ]
    return memories, episodes


def test_identical_input_gives_a_byte_identical_bundle_whatever_the_order() -> None:
    memories, episodes = store()
    shuffled_memories, shuffled_episodes = memories[:], episodes[:]
    random.Random(7).shuffle(shuffled_memories)
    random.Random(7).shuffle(shuffled_episodes)

    first = assemble_bundle(SUBJECT, "where does alice live", memories, [], episodes, 500, AS_OF)
    second = assemble_bundle(
        SUBJECT, "where does alice live", shuffled_memories, [], shuffled_episodes, 500, AS_OF
    )

    assert canonical_json(first.to_dict()).encode() == canonical_json(second.to_dict()).encode()


def test_superseded_memories_never_reach_a_bundle() -> None:
    memories, episodes = store()

    bundle = assemble_bundle(SUBJECT, "current location", memories, [], episodes, 10_000, AS_OF)

    assert "Berlin" not in bundle.assembled_context
    assert all(r.memory.status is MemoryStatus.ACTIVE for r in bundle.facts)
    assert "Madrid" in bundle.assembled_context


def test_memories_relevant_to_the_task_rank_first() -> None:
    memories, _ = store()

    bundle = assemble_bundle(SUBJECT, "which rate limit applies", memories, [], [], 10_000, AS_OF)

    assert bundle.facts[0].memory.content == "The API rate limit is 100 requests per minute"


def test_decisions_are_procedures() -> None:
    memories, _ = store()

    bundle = assemble_bundle(SUBJECT, "queue", memories, [], [], 10_000, AS_OF)

    assert [r.memory.content for r in bundle.procedures] == [
        "We decided to use Postgres for the queue"
    ]


def test_the_bundle_is_cut_to_the_token_budget() -> None:
    memories, episodes = store()

    bundle = assemble_bundle(SUBJECT, "anything", memories, [], episodes, 40, AS_OF)

    assert bundle.token_estimate == estimate_tokens(bundle.assembled_context) <= 40
    assert len(bundle.facts) + len(bundle.procedures) < 5


def test_an_open_conflict_is_an_explicit_abstention() -> None:
    changes, memories = run([statement(STRIPE_OLD, 1), statement(STRIPE_NEW, 30)])

    bundle = assemble_bundle(
        SUBJECT, "stripe fees", memories, changes.open_conflicts, [], 10_000, AS_OF
    )

    assert bundle.facts == ()
    assert "not asserting either" in bundle.assembled_context
    assert "Conflicting information about fact" in bundle.assembled_context
    assert bundle.abstentions == changes.open_conflicts


def test_a_claim_conflict_names_its_claim_key() -> None:
    changes, memories = run(
        [claim("location.home_city", "Lisbon", 1), claim("location.home_city", "Porto", 2)],
        policies=PolicyTable.from_mapping({"profile_fact": "flag"}),
    )

    bundle = assemble_bundle(SUBJECT, "home", memories, changes.open_conflicts, [], 500, AS_OF)

    assert "Conflicting information about location.home_city:" in bundle.assembled_context
    assert by_content(memories, "location.home_city = Porto").id not in {
        r.memory.id for r in bundle.facts
    }


def test_memories_not_yet_valid_at_as_of_are_left_out() -> None:
    memories, _ = store()

    bundle = assemble_bundle(SUBJECT, "location", memories, [], [], 10_000, day(10))

    assert "Madrid" not in bundle.assembled_context
    assert "Berlin" not in bundle.assembled_context  # superseded, even though valid at day 10


def test_recent_episodes_come_newest_first_and_never_after_as_of() -> None:
    memories, episodes = store()

    bundle = assemble_bundle(SUBJECT, "x", memories, [], episodes, 10_000, day(3) + timedelta(1))

    assert [e.occurred_at for e in bundle.episodes] == [day(4), day(3), day(2), day(1)]


def test_the_dict_is_a_statewave_context_bundle() -> None:
    memories, episodes = store()

    bundle = assemble_bundle(SUBJECT, "where", memories, [], episodes, 10_000, AS_OF)
    parsed = ContextBundle.model_validate(bundle.to_dict())

    assert parsed.subject_id == SUBJECT
    assert len(parsed.facts) == len(bundle.facts)
    assert parsed.token_estimate == bundle.token_estimate


def test_a_non_positive_budget_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        assemble_bundle(SUBJECT, "x", [], [], [], 0, AS_OF)
