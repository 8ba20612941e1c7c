"""Compile of long texts (40-200 words an episode) leaves exactly the store it left before
the compile was made faster on such texts (issue #30 part 3).

A golden result: the digest of every memory (content, kind, claim, status, validity,
provenance), every supersession record (rule, winner, loser, score, the episodes each
side lists) and every open conflict, after a chunked compile of 150 episodes shaped as
Slack threads, issue bodies and tickets. The digest was taken with the code before the
optimisations; a change that alters any byte of what compile stores changes it.
Episode ids are random per store, so provenance is compared by idempotency key.
"""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store
from tests.integration.test_compile_chunking import idempotency_keys

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SUBJECT = "ana"
TENANT = "long"

# Claims that collide (this week's city, tools, decisions the lexical matcher pits
# against each other, figures) among the sentences long texts are mostly made of.
CLAIMS = [
    "I'm in {city} this week for the {word} launch.",
    "I use {tool} at work.",
    "We decided to move {word} {other} onto {tool}.",
    "The {word} {other} gateway answers {number} calls per minute.",
    "I live in {city} and I work at {company}.",
    "I don't use {tool} anymore.",
]
FILLER = [
    "The build was green on staging yesterday but the nightly job kept timing out",
    "Can someone take a look at the retry logic before the release goes out",
    "We saw the same error in the logs after the last deploy to production",
    "The customer reported that the dashboard loads slowly after logging in",
    "Rolling back fixed it for now though the root cause is still unclear",
    "Steps to reproduce are in the linked ticket along with the stack trace",
]
WORDS = ["amber", "basalt", "cedar", "delta", "ember", "falcon", "garnet", "harbor", "iris"]
TOOLS = ["Postgres", "Redis", "Kafka", "Terraform", "Docker"]
CITIES = ["Lisbon", "Porto", "Berlin", "Madrid"]
COMPANIES = ["Acme", "Globex", "Initech"]

GOLDEN = "8453553870c759a679932dab1c4987997b156101f2cab4e9b355d2c5d93a9733"


def long_text(number: int) -> str:
    pick = random.Random(number)
    sentences: list[str] = []
    target = pick.randint(40, 200)
    while sum(len(sentence.split()) for sentence in sentences) < target:
        if pick.random() < 0.3:
            sentences.append(
                pick.choice(CLAIMS).format(
                    city=CITIES[(number // 10) % len(CITIES)],
                    word=pick.choice(WORDS),
                    other=pick.choice(WORDS),
                    tool=pick.choice(TOOLS),
                    number=pick.randint(1, 999),
                    company=COMPANIES[(number // 25) % len(COMPANIES)],
                )
            )
        else:
            sentences.append(f"{pick.choice(FILLER)} on {pick.choice(WORDS)}.")
    return " ".join(sentences)


def episode(number: int) -> EpisodeDraft:
    text = long_text(number)
    payload: dict[str, Any]
    if number % 3 == 0:
        middle = len(text) // 2
        cut = text.index(". ", middle) + 1 if ". " in text[middle:] else len(text)
        payload = {
            "messages": [
                {"role": "user", "content": text[:cut]},
                {"role": "assistant", "content": text[cut:].strip() or "ok"},
            ]
        }
    elif number % 3 == 1:
        payload = {"title": f"Issue {number}", "body": text}
    else:
        payload = {"subject": f"Ticket {number}", "description": text}
    return EpisodeDraft(
        subject_id=SUBJECT,
        source="chat",
        type="message",
        payload=payload,
        idempotency_key=f"e{number}",
        occurred_at=START + timedelta(hours=number),
    )


def stored(store: Store) -> dict[str, Any]:
    """What the compile left: memories, records and conflicts, ids as idempotency keys
    (a record lists at most 64 ids a side, the first by id, which are random: past that
    only their count is compared)."""
    repository = MemoryRepository(store)
    key_of = idempotency_keys(store, TENANT)
    memories = repository.memories(TENANT, SUBJECT, statuses=None)
    memory_key = {memory.id: memory.memory_key for memory in memories}

    def listed(ids: list[Any], count: int) -> Any:
        return sorted(key_of[uuid.UUID(str(i))] for i in ids) if count <= 64 else [len(ids), count]

    return {
        "memories": sorted(
            [
                memory.memory_key,
                memory.kind,
                memory.content,
                memory.claim_key,
                memory.claim_value,
                memory.status,
                memory.status_rule,
                memory.valid_from.isoformat(),
                memory.valid_to.isoformat() if memory.valid_to else None,
                memory.last_asserted.isoformat(),
                memory.explicit_change,
                memory.negated,
                memory.confidence,
                dict(memory.metadata),
                sorted(key_of[episode] for episode in memory.source_episode_ids),
            ]
            for memory in memories
        ),
        "records": sorted(
            [
                record.rule,
                record.claim_key,
                record.score,
                record.threshold,
                memory_key.get(record.winner_memory_id) if record.winner_memory_id else None,
                memory_key.get(record.loser_memory_id) if record.loser_memory_id else None,
                listed(record.winner_episode_ids, record.winner_episode_count),
                listed(record.loser_episode_ids, record.loser_episode_count),
            ]
            for record in repository.supersessions(TENANT, SUBJECT)
        ),
        "conflicts": sorted(
            sorted(record.conflict.memory_keys) for record in repository.conflicts(TENANT, SUBJECT)
        ),
    }


def test_a_chunked_compile_of_long_texts_stores_what_it_stored_before(store: Store) -> None:
    clock = FakeClock(START + timedelta(days=30))
    IngestService(store, clock).ingest(TENANT, [episode(number) for number in range(150)])
    clock.advance(timedelta(seconds=1))
    CompileService(store, clock=clock, chunk_episodes=40).compile(TENANT, SUBJECT)

    result = stored(store)
    # It exercised the resolver: claims decided, decisions superseded, conflicts opened.
    assert len(result["memories"]) > 150
    assert result["records"]
    assert result["conflicts"]
    canonical = json.dumps(result, sort_keys=True, default=str).encode()
    assert hashlib.sha256(canonical).hexdigest() == GOLDEN
