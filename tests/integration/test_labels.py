"""Sensitivity labels and read policies (issue #31 part 1), on both databases: a memory
labelled ``pii`` under a policy that denies it to agents is absent from every read path
of an agent, present for anyone else, and every decision is logged and counted."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.compile.sensitivity import PolicyAction, PolicyMode
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.episode import EpisodeDraft
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import PolicyRuleSettings, ReadPolicySettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import CompileService
from memsync.runtime.compiling.rules import CompileRules
from memsync.runtime.compiling.settings import CompileSettings
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading.labels import Labels
from memsync.runtime.storage import Store
from memsync.runtime.sync.repository import SyncRepository
from memsync.runtime.sync.runner import SyncRunner
from tests.helpers import LOOPBACK, compile_subject, say

PII_TO_AGENTS = PolicyRuleSettings(
    name="pii-to-agents", labels=["pii"], caller_type="agent", action=PolicyAction.DENY
)
AGENT = {"X-Caller-Type": "agent"}
HUMAN = {"X-Caller-Type": "human", "X-Caller-ID": "dana"}


def app_with(store: Store, clock: FakeClock, policy: ReadPolicySettings) -> TestClient:
    settings = Settings(store=str(store.engine.url), read_policy=policy)
    return TestClient(create_app(Services(settings, store, clock)), base_url=LOOPBACK)


@pytest.fixture
def enforcing(store: Store, clock: FakeClock) -> Iterator[TestClient]:
    with app_with(store, clock, ReadPolicySettings(rules=[PII_TO_AGENTS])) as client:
        yield client


def lisbon_labelled_pii(client: TestClient) -> dict[str, Any]:
    """Ana lives in Lisbon (labelled pii) and works at Acme; the Lisbon memory."""
    say(client, "m1", "I live in Lisbon.", 1)
    say(client, "m2", "I work at Acme.", 2)
    memories = compile_subject(client)["memories"]
    lisbon = next(memory for memory in memories if "Lisbon" in memory["content"])
    response = client.patch(
        f"/v1/memories/{lisbon['id']}/labels", json={"sensitivity_labels": [" PII ", "pii"]}
    )
    assert response.status_code == 200, response.text
    assert response.json()["sensitivity_labels"] == ["pii"]
    return lisbon


def reads(client: TestClient, headers: dict[str, str], receipt_id: str) -> dict[str, str]:
    """The text of every read path, as the caller named by ``headers`` gets it."""
    context = client.post(
        "/v1/context", json={"subject_id": "ana", "task": "where does ana live"}, headers=headers
    )
    search = client.get("/v1/memories/search", params={"subject_id": "ana"}, headers=headers)
    timeline = client.get("/v1/timeline", params={"subject_id": "ana"}, headers=headers)
    receipt = client.get(f"/v1/receipts/{receipt_id}", headers=headers)
    handoff = client.post(
        "/v1/handoff", json={"subject_id": "ana", "session_id": "s1"}, headers=headers
    )
    inspect = client.get("/v1/subjects/ana/inspect", headers=headers)
    conflicts = client.get("/v1/conflicts", params={"subject_id": "ana"}, headers=headers)
    answers = {
        "inspect": inspect,
        "conflicts": conflicts,
        "context": context,
        "search": search,
        "timeline": timeline,
        "receipt": receipt,
        "handoff": handoff,
    }
    for name, response in answers.items():
        assert response.status_code == 200, (name, response.text)
    return {name: response.text for name, response in answers.items()}


def served_receipt(client: TestClient) -> str:
    response = client.post(
        "/v1/context",
        json={"subject_id": "ana", "task": "where does ana live", "emit_receipt": True},
        headers=HUMAN,
    )
    receipt_id: str = response.json()["receipt_id"]
    return receipt_id


def test_a_pii_memory_is_absent_from_every_read_of_an_agent_and_present_for_others(
    enforcing: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    lisbon = lisbon_labelled_pii(enforcing)
    receipt_id = served_receipt(enforcing)
    assert lisbon["id"] in enforcing.get(f"/v1/receipts/{receipt_id}", headers=HUMAN).text

    with caplog.at_level(logging.INFO, logger="memsync.policy"):
        agent = reads(enforcing, AGENT, receipt_id)
    human = reads(enforcing, HUMAN, receipt_id)

    for name, text in agent.items():
        assert "Lisbon" not in text, name
        assert lisbon["id"] not in text, name
    assert "Acme" in agent["context"]
    assert "Acme" in agent["search"]
    for name in ("context", "search", "timeline", "inspect"):
        assert "Lisbon" in human[name], name
    assert lisbon["id"] in human["receipt"]
    # The body's caller overrides the headers: the same agent, named in the body.
    body_agent = enforcing.post(
        "/v1/context",
        json={"subject_id": "ana", "task": "where does ana live", "caller_type": "agent"},
    )
    assert "Lisbon" not in body_agent.text

    decisions = [r for r in caplog.records if getattr(r, "policy_rule", None) == "pii-to-agents"]
    assert {getattr(r, "read_path", None) for r in decisions} >= {
        "context",
        "search",
        "timeline",
        "receipts",
        "handoff",
        "inspect",
    }
    assert all(getattr(r, "policy_action", None) == "deny" for r in decisions)
    services: Services = enforcing.app.state.services  # type: ignore[attr-defined]
    counted = services.metrics.registry.get_sample_value(
        "memsync_policy_decisions_total", {"rule": "pii-to-agents", "action": "deny"}
    )
    assert counted is not None
    assert counted >= 5


def test_the_agents_context_counts_no_token_of_the_denied_memory(enforcing: TestClient) -> None:
    say(enforcing, "m2", "I work at Acme.", 2)
    compile_subject(enforcing)
    before = enforcing.post(
        "/v1/context", json={"subject_id": "ana", "task": "ana"}, headers=AGENT
    ).json()
    lisbon_labelled_pii(enforcing)
    after = enforcing.post(
        "/v1/context", json={"subject_id": "ana", "task": "ana"}, headers=AGENT
    ).json()
    assert after["token_estimate"] == before["token_estimate"]
    assert after["assembled_context"] == before["assembled_context"]


def test_in_log_only_mode_the_memory_is_served_and_the_would_be_denial_logged(
    store: Store, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    policy = ReadPolicySettings(policy_mode=PolicyMode.LOG_ONLY, rules=[PII_TO_AGENTS])
    with app_with(store, clock, policy) as client:
        lisbon_labelled_pii(client)
        with caplog.at_level(logging.INFO, logger="memsync.policy"):
            context = client.post(
                "/v1/context", json={"subject_id": "ana", "task": "where"}, headers=AGENT
            )
        services: Services = client.app.state.services  # type: ignore[attr-defined]
        counted = services.metrics.registry.get_sample_value(
            "memsync_policy_decisions_total", {"rule": "pii-to-agents", "action": "would_deny"}
        )
    assert "Lisbon" in context.text
    # Only the policy's lines: what else is captured depends on the levels earlier tests
    # left on other loggers.
    decisions = [r for r in caplog.records if r.name == "memsync.policy"]
    assert [getattr(r, "policy_action", None) for r in decisions] == ["would_deny"]
    assert counted == 1


def test_a_redacting_rule_shows_the_marker_instead_of_the_text(
    store: Store, clock: FakeClock
) -> None:
    rule = PolicyRuleSettings(labels=["pii"], action=PolicyAction.REDACT)
    with app_with(store, clock, ReadPolicySettings(rules=[rule])) as client:
        lisbon = lisbon_labelled_pii(client)
        found = client.get("/v1/memories/search", params={"subject_id": "ana"}).json()
    shown = next(memory for memory in found["memories"] if memory["id"] == lisbon["id"])
    assert shown["content"] == "[redacted]"


def test_a_policy_requiring_the_caller_refuses_an_anonymous_read_with_401(
    store: Store, clock: FakeClock
) -> None:
    policy = ReadPolicySettings(require_caller_identity=True, rules=[PII_TO_AGENTS])
    with app_with(store, clock, policy) as client:
        anonymous = client.get("/v1/timeline", params={"subject_id": "ana"})
        named = client.get("/v1/timeline", params={"subject_id": "ana"}, headers=HUMAN)
    assert anonymous.status_code == 401
    assert "caller" in anonymous.json()["error"]["message"]
    assert named.status_code == 200


def test_labels_past_the_limit_are_refused_and_an_unknown_memory_is_404(
    enforcing: TestClient,
) -> None:
    lisbon = lisbon_labelled_pii(enforcing)
    too_many = enforcing.patch(
        f"/v1/memories/{lisbon['id']}/labels",
        json={"sensitivity_labels": [f"label-{n}" for n in range(33)]},
    )
    unknown = enforcing.patch(
        "/v1/memories/00000000-0000-0000-0000-000000000000/labels",
        json={"sensitivity_labels": ["pii"]},
    )
    cleared = enforcing.patch(
        f"/v1/memories/{lisbon['id']}/labels", json={"sensitivity_labels": []}
    )
    assert too_many.status_code == 422
    assert too_many.json()["error"]["details"][0]["field"] == "sensitivity_labels"
    assert unknown.status_code == 404
    assert cleared.json()["sensitivity_labels"] == []
    context = enforcing.post("/v1/context", json={"subject_id": "ana", "task": "x"}, headers=AGENT)
    assert "Lisbon" in context.text


# -- labels a connector's rules set ----------------------------------------------------


def test_connector_labels_survive_a_revision_and_reach_the_memories_compiled_from_it(
    store: Store, clock: FakeClock
) -> None:
    config = FakeConfig.model_validate(
        {
            "name": "hr",
            "subject": "person:{id}",
            "overlap": "1h",
            "labels": [
                {"when": {"fields.id": "secret-*"}, "add": ["Confidential", " HR "]},
                {"when": {"type": "fake.record", "payload.id": "nobody"}, "add": ["never"]},
            ],
        }
    )
    sync = SyncRunner(SyncRepository(store), IngestService(store, clock), clock=clock)
    compiler = CompileService(store, clock=clock)
    labels = Labels(store, clock)
    first = FakeRecord(id="secret-1", updated_at=clock.now() - timedelta(minutes=5), body="v1")
    sync.sync(FakeConnector(config, [first, replace(first, id="open-1")]))
    compiler.compile("default", "person:secret-1")
    clock.advance(timedelta(minutes=10))
    edited = replace(first, updated_at=clock.now() - timedelta(minutes=1), body="I work at Acme.")
    outcome = sync.sync(FakeConnector(config, [edited]))
    assert outcome.revised == 1
    result = compiler.compile("default", "person:secret-1")

    secret = labels.of_subject("default", "person:secret-1")
    assert list(secret.episodes.values()) == [frozenset({"confidential", "hr"})]
    derived = labels.of_memories("default", [memory.id for memory in result.memories])
    assert result.memories
    assert all(derived[memory.id] == {"confidential", "hr"} for memory in result.memories)
    assert labels.of_subject("default", "person:open-1").episodes == {}


def test_a_labelled_draft_keeps_its_labels_when_its_record_moves_subject(
    store: Store, clock: FakeClock
) -> None:
    ingest = IngestService(store, clock)
    draft = EpisodeDraft("a", "src", "note", {"text": "x"}, "k1", sensitivity_labels=("pii",))
    ingest.ingest("default", [draft])
    ingest.ingest("default", [replace(draft, subject_id="b")])
    labels = Labels(store, clock)
    assert labels.of_subject("default", "a").episodes == {}
    assert list(labels.of_subject("default", "b").episodes.values()) == [frozenset({"pii"})]


def test_the_admin_page_shows_labels_and_hides_what_the_policy_denies_to_admins(
    store: Store, clock: FakeClock
) -> None:
    to_admins = PolicyRuleSettings(labels=["secret"], caller_type="admin", action=PolicyAction.DENY)
    with app_with(store, clock, ReadPolicySettings(rules=[to_admins])) as client:
        lisbon_labelled_pii(client)
        shown = client.get("/ui/subjects/ana", params={"task": "where"}).text
        client.patch(
            f"/v1/memories/{lisbon_id(client)}/labels", json={"sensitivity_labels": ["secret"]}
        )
        hidden = client.get("/ui/subjects/ana", params={"task": "where"}).text
    assert "Lisbon" in shown
    assert '<td class="small labels">pii</td>' in shown
    assert "Lisbon" not in hidden
    assert "Acme" in hidden


def lisbon_id(client: TestClient) -> str:
    found = client.get("/v1/memories/search", params={"subject_id": "ana", "q": "lisbon"})
    memory_id: str = found.json()["memories"][0]["id"]
    return memory_id


def test_an_as_of_bundle_and_a_replay_leave_the_denied_memory_out_too(
    enforcing: TestClient,
) -> None:
    lisbon = lisbon_labelled_pii(enforcing)
    receipt_id = served_receipt(enforcing)
    as_of = enforcing.get(f"/v1/receipts/{receipt_id}", headers=HUMAN).json()["as_of"]
    then = enforcing.post(
        "/v1/context",
        json={"subject_id": "ana", "task": "where does ana live", "as_of": as_of},
        headers=AGENT,
    )
    replayed = enforcing.post(
        f"/v1/receipts/{receipt_id}/replay", json={"mode": "exact"}, headers=AGENT
    )
    listed = enforcing.get("/v1/receipts", params={"subject_id": "ana"}, headers=AGENT)
    assert "Acme" in then.text
    assert "Lisbon" not in then.text
    assert replayed.json()["reproduced"] is False
    assert "Lisbon" not in replayed.text
    assert lisbon["id"] not in replayed.text
    assert lisbon["id"] not in listed.text
    assert lisbon["id"] in enforcing.get("/v1/receipts", params={"subject_id": "ana"}).text


def test_deleting_a_subject_deletes_its_labels(
    enforcing: TestClient, store: Store, clock: FakeClock
) -> None:
    lisbon_labelled_pii(enforcing)
    assert enforcing.delete("/v1/subjects/ana").status_code == 200
    assert Labels(store, clock).of_subject("default", "ana") == Labels(store, clock).of_subject(
        "default", "nobody"
    )


def test_a_compile_answers_an_agent_without_the_memories_of_a_denied_episode(
    enforcing: TestClient, store: Store, clock: FakeClock
) -> None:
    said = {"messages": [{"role": "user", "content": "I live in Lisbon."}]}
    draft = EpisodeDraft("ana", "chat", "message", said, "k1", sensitivity_labels=("pii",))
    IngestService(store, clock).ingest("default", [draft])
    compiled = enforcing.post("/v1/memories/compile", json={"subject_id": "ana"}, headers=AGENT)
    assert compiled.json()["memories_created"] > 0
    assert compiled.json()["memories"] == []
    assert "Lisbon" in enforcing.get("/v1/memories/search", params={"subject_id": "ana"}).text


def test_a_compile_rule_labels_the_memories_it_matches_and_a_patch_keeps_them(
    store: Store, clock: FakeClock
) -> None:
    rules = CompileRules.from_settings(
        CompileSettings.model_validate(
            {"labels": [{"when": {"claim_key": "location.*"}, "add": ["PII"]}]}
        )
    )
    ingest = IngestService(store, clock)
    said = {"messages": [{"role": "user", "content": "I live in Lisbon and I work at Acme."}]}
    ingest.ingest("default", [EpisodeDraft("ana", "chat", "message", said, "k1")])
    result = CompileService(store, rules=rules, clock=clock).compile("default", "ana")
    labels = Labels(store, clock)
    by_claim = {
        memory.claim_key: labels.of_memories("default", [memory.id]).get(memory.id)
        for memory in result.memories
    }
    assert by_claim["location.home_city"] == {"pii"}
    assert by_claim["employment.current_employer"] is None
    lisbon = next(m for m in result.memories if m.claim_key == "location.home_city")
    assert labels.set_memory_labels("default", lisbon.id, ["home"]) == ("home", "pii")
    assert labels.set_memory_labels("default", lisbon.id, []) == ("pii",)


def test_a_redacted_episode_shows_the_marker_and_a_denied_one_is_unknown(
    store: Store, clock: FakeClock
) -> None:
    rules = [
        PolicyRuleSettings(labels=["secret"], action=PolicyAction.DENY),
        PolicyRuleSettings(labels=["hr"], action=PolicyAction.REDACT),
    ]
    ingest = IngestService(store, clock)
    drafts = [
        EpisodeDraft("ana", "chat", "note", {"text": text}, key, sensitivity_labels=(label,))
        for key, text, label in (("k1", "the safe code", "secret"), ("k2", "her salary", "hr"))
    ]
    secret, salary = (outcome.episode_id for outcome in ingest.ingest("default", drafts))
    with app_with(store, clock, ReadPolicySettings(rules=rules)) as client:
        timeline = client.get("/v1/timeline", params={"subject_id": "ana"}).json()
        denied = client.get(f"/v1/episodes/{secret}")
        redacted = client.get(f"/v1/episodes/{salary}")
    assert [episode["payload"] for episode in timeline["episodes"]] == [{"text": "[redacted]"}]
    assert denied.status_code == 404
    assert redacted.status_code == 404
