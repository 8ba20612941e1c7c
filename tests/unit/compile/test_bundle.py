from __future__ import annotations

import random
import uuid
from dataclasses import replace
from datetime import datetime, timedelta

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statewave.models import ContextBundle

from memsync.compile.bundle import BundleJson, BundleLayout, assemble_bundle
from memsync.compile.policy import PolicyTable
from memsync.compile.tokenizer import CL100K, ESTIMATE, CharacterEstimate, default_counter
from memsync.compile.types import EpisodeView, MemoryKind, MemoryStatus, StoredMemory
from memsync.episode import canonical_json

from .builders import SUBJECT, by_content, claim, day, episode, run, statement

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


def test_the_bundle_is_cut_to_the_budget_in_real_tokens() -> None:
    memories, episodes = store()

    bundle = assemble_bundle(SUBJECT, "anything", memories, [], episodes, 40, AS_OF)

    assert bundle.tokenizer == CL100K
    assert bundle.token_estimate == default_counter().count(bundle.assembled_context) <= 40
    assert 0 < len(bundle.facts) + len(bundle.procedures) < 5
    assert bundle.to_dict()["provenance"]["tokenizer"] == CL100K


def test_without_a_tokenizer_the_estimate_counts_and_the_bundle_says_so() -> None:
    memories, episodes = store()

    bundle = assemble_bundle(
        SUBJECT, "anything", memories, [], episodes, 40, AS_OF, counter=CharacterEstimate()
    )

    assert bundle.tokenizer == ESTIMATE
    assert bundle.token_estimate == -(-len(bundle.assembled_context) // 4) <= 40


def many_statements(count: int) -> list[StoredMemory]:
    """``count`` active summaries (they never conflict), about 15 tokens a line."""
    words = [
        "amber", "basalt", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo",
        "jasper", "kestrel", "lagoon", "meadow", "nebula", "obsidian", "prairie", "quartz",
        "raven", "sierra", "tundra",
    ]  # fmt: skip
    _, memories = run(
        [
            statement(
                f"The {words[n % 20]} {words[n // 20 % 20]} gateway answers in {n} ms",
                n % 30,
                kind=MemoryKind.EPISODE_SUMMARY,
                source=1000 + n,
            )
            for n in range(count)
        ]
    )
    return memories


@pytest.mark.parametrize("layout", list(BundleLayout))
@pytest.mark.parametrize("max_tokens", [200, 1000, 3000])
def test_the_budget_is_filled_to_within_five_percent_and_never_over(
    layout: BundleLayout, max_tokens: int
) -> None:
    memories = many_statements(300)
    assert all(m.status is MemoryStatus.ACTIVE for m in memories)

    bundle = assemble_bundle(
        SUBJECT, "which gateway answers", memories, [], [], max_tokens, AS_OF, layout=layout
    )

    assert 0.95 * max_tokens <= bundle.token_estimate <= max_tokens
    assert bundle.token_estimate == default_counter().count(bundle.assembled_context)


LISBON, PORTO = episode(901), episode(902)


def moved_to_porto() -> tuple[list[StoredMemory], list[EpisodeView]]:
    """'I live in Lisbon' (episode 901), then 'I moved to Porto' (902): each episode has
    its claim and its summary; Porto wins."""
    _, memories = run(
        [
            claim("location.home_city", "Lisbon", 1, source=901),
            statement("chat message: I live in Lisbon", 1, kind=MemoryKind.EPISODE_SUMMARY,
                      source=901),
            claim("location.home_city", "Porto", 5, source=902, explicit=True),
            statement("chat message: I moved to Porto", 5, kind=MemoryKind.EPISODE_SUMMARY,
                      source=902),
        ]
    )  # fmt: skip
    episodes = [
        EpisodeView(
            id=episode_id,
            subject_id=SUBJECT,
            source="chat",
            type="message",
            payload={"text": text},
            occurred_at=day(on),
            revision=1,
            content_hash=text,
        )
        for episode_id, text, on in [
            (LISBON, "I live in Lisbon", 1),
            (PORTO, "I moved to Porto", 5),
        ]
    ]
    return memories, episodes


@pytest.mark.parametrize("layout", list(BundleLayout))
def test_no_text_of_a_superseded_fact_reaches_the_bundle_by_any_path(layout: BundleLayout) -> None:
    memories, episodes = moved_to_porto()
    assert by_content(memories, "location.home_city = Lisbon").status is MemoryStatus.SUPERSEDED

    bundle = assemble_bundle(SUBJECT, "where does she live", memories, [], episodes, 10_000,
                             AS_OF, layout=layout)  # fmt: skip

    assert "Lisbon" not in bundle.assembled_context
    assert "Porto" in bundle.assembled_context
    assert LISBON not in {e.id for e in bundle.episodes}
    assert "Lisbon" not in canonical_json(bundle.to_dict())


def test_an_episode_a_summary_already_covers_is_not_repeated_under_recent_episodes() -> None:
    memories, episodes = moved_to_porto()

    bundle = assemble_bundle(SUBJECT, "where", memories, [], episodes, 10_000, AS_OF)
    without_summaries = assemble_bundle(
        SUBJECT,
        "where",
        [m for m in memories if m.kind is not MemoryKind.EPISODE_SUMMARY],
        [],
        episodes,
        10_000,
        AS_OF,
    )

    assert "I moved to Porto" in bundle.assembled_context
    assert bundle.assembled_context.count("I moved to Porto") == 1
    assert bundle.episodes == ()
    assert [e.id for e in without_summaries.episodes] == [PORTO]


def test_provenance_lists_statewave_ids_beside_scores_and_sources() -> None:
    memories, episodes = store()
    summary = statement("slack message: message number 5", 5, kind=MemoryKind.EPISODE_SUMMARY,
                        source=5)  # fmt: skip
    _, memories = run([summary], memories)

    provenance = assemble_bundle(SUBJECT, "queue", memories, [], episodes, 10_000, AS_OF).to_dict()[
        "provenance"
    ]

    by_kind = {m.id: m.kind for m in memories}
    assert provenance["procedure_ids"]
    assert all(by_kind[uuid.UUID(i)] is MemoryKind.DECISION for i in provenance["procedure_ids"])
    assert [by_kind[uuid.UUID(i)] for i in provenance["summary_ids"]] == [
        MemoryKind.EPISODE_SUMMARY
    ]
    assert provenance["fact_ids"]
    assert all(
        by_kind[uuid.UUID(i)] not in (MemoryKind.DECISION, MemoryKind.EPISODE_SUMMARY)
        for i in provenance["fact_ids"]
    )
    assert provenance["episode_ids"] == provenance["episodes"]
    assert str(uuid.UUID(int=5)) not in provenance["episode_ids"]  # its summary covers it
    assert set(provenance["memories"]) == {
        *provenance["fact_ids"], *provenance["summary_ids"], *provenance["procedure_ids"]
    }  # fmt: skip


def test_the_statewave_layout_has_markdown_sections_in_statewave_order() -> None:
    memories, episodes = store()

    text = assemble_bundle(
        SUBJECT, "plan", memories, [], episodes, 10_000, AS_OF, layout=BundleLayout.STATEWAVE
    ).assembled_context

    assert text.startswith("## Task\nplan\n\n## About this user\n- ")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## Task", "## About this user", "## Procedures", "## Recent interactions"]
    assert "- We decided to use Postgres for the queue" in text
    assert "Subject:" not in text
    assert "Known about the subject:" not in text


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


def test_a_tombstoned_memory_and_its_episode_stay_out() -> None:
    memories, episodes = moved_to_porto()
    porto = by_content(memories, "location.home_city = Porto")
    gone = [replace(m, status=MemoryStatus.TOMBSTONED) if m.id == porto.id else m for m in memories]

    bundle = assemble_bundle(SUBJECT, "where does she live", gone, [], episodes, 10_000, AS_OF)

    assert "Porto" not in bundle.assembled_context
    assert porto.id not in {item.memory.id for item in bundle.facts}
    assert PORTO not in {episode.id for episode in bundle.episodes}


def test_with_valid_at_the_memories_that_held_then_are_ranked_whatever_their_status() -> None:
    memories, episodes = moved_to_porto()
    # Episode 903 has no memory yet: only the moment it occurred keeps it out.
    later = replace(
        episodes[0], id=episode(903), payload={"text": "off to Porto"}, occurred_at=day(6)
    )

    before = assemble_bundle(SUBJECT, "where does she live", memories, [], [*episodes, later],
                             10_000, AS_OF, valid_at=day(3))  # fmt: skip
    after = assemble_bundle(SUBJECT, "where does she live", memories, [], episodes, 10_000, AS_OF,
                            valid_at=day(6))  # fmt: skip

    assert "Lisbon" in before.assembled_context
    assert "Porto" not in before.assembled_context
    assert LISBON in {source for item in before.facts for source in item.memory.source_episode_ids}
    assert (before.as_of, before.valid_at) == (AS_OF, day(3))
    assert "Lisbon" not in after.assembled_context
    assert "Porto" in after.assembled_context
    assert before.to_dict()["provenance"]["valid_at"] == day(3).isoformat()
    assert (
        "valid_at"
        not in assemble_bundle(SUBJECT, "x", memories, [], [], 10, AS_OF).to_dict()["provenance"]
    )


def test_with_valid_at_a_tombstoned_memory_never_holds() -> None:
    memories, episodes = moved_to_porto()
    porto = by_content(memories, "location.home_city = Porto")
    gone = [replace(m, status=MemoryStatus.TOMBSTONED) if m.id == porto.id else m for m in memories]

    bundle = assemble_bundle(SUBJECT, "where does she live", gone, [], episodes, 10_000, AS_OF,
                             valid_at=day(6))  # fmt: skip

    assert porto.id not in {item.memory.id for item in bundle.facts}
    assert "location.home_city = Porto" not in bundle.assembled_context


_JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53 - 1), 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
_PAYLOADS = st.dictionaries(
    st.text(max_size=6),
    st.recursive(
        _JSON_LEAVES,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=6,
    ),
    max_size=4,
)
_CONTENTS = st.sampled_from(
    [
        "Stripe charges 3.5% + 35¢ per transaction",
        "Stripe charges 2.9% + 30¢ per transaction",
        "We decided to use Postgres for the queue",
        "The API rate limit is 100 requests per minute",
        "Ana prefers tea in the morning",
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    claims=st.lists(
        st.tuples(
            st.sampled_from(["location.current", "location.home_city", "tools.used"]),
            st.sampled_from(["Lisbon", "Porto", "neovim", "Ḿadrid"]),
            st.integers(1, 39),
        ),
        max_size=5,
    ),
    statements=st.lists(
        st.tuples(_CONTENTS, st.integers(1, 39), st.sampled_from(list(MemoryKind))), max_size=5
    ),
    payloads=st.lists(_PAYLOADS, max_size=4),
    flag_conflicts=st.booleans(),
    max_tokens=st.integers(1, 2_000),
    layout=st.sampled_from(list(BundleLayout)),
    valid_at=st.none() | st.integers(0, 45).map(day),
)
def test_the_dict_is_what_validating_and_dumping_the_bundle_model_gives(
    claims: list[tuple[str, str, int]],
    statements: list[tuple[str, int, MemoryKind]],
    payloads: list[dict[str, object]],
    flag_conflicts: bool,
    max_tokens: int,
    layout: BundleLayout,
    valid_at: datetime | None,
) -> None:
    changes, memories = run(
        [claim(key, value, on) for key, value, on in claims]
        + [statement(content, on, kind=kind) for content, on, kind in statements],
        policies=PolicyTable.from_mapping({"profile_fact": "flag", "fact": "flag"})
        if flag_conflicts
        else None,
    )
    episodes = [
        EpisodeView(
            id=uuid.UUID(int=n + 1),
            subject_id=SUBJECT,
            source="slack",
            type="message",
            payload=payload,
            occurred_at=day(n + 1),
            revision=n % 3 + 1,
            content_hash=f"h{n}",
        )
        for n, payload in enumerate(payloads)
    ]
    bundle = assemble_bundle(
        SUBJECT,
        "where does she live and what fees",
        memories,
        changes.open_conflicts,
        episodes,
        max_tokens,
        AS_OF,
        layout=layout,
        valid_at=valid_at,
    )

    fast = bundle.to_dict()
    validated = BundleJson.of(bundle).model_dump(mode="json")

    # Equal as values and as types (1 is not 1.0 nor True to orjson), hence as bytes.
    assert orjson.dumps(fast, option=orjson.OPT_SORT_KEYS) == orjson.dumps(
        validated, option=orjson.OPT_SORT_KEYS
    )
    assert canonical_json(fast) == canonical_json(validated)
