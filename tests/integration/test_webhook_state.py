"""Webhook deliveries on the connector's state: counted by outcome through the real
endpoint (GitHub deliveries signed as GitHub signs them), shown by ``state show``, the
API and the admin page, and the push gap flagged while re-reads find what no delivery
brought, then cleared by the next delivery."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from click.testing import Result
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from memsync.clock import FakeClock
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store, tables
from memsync.runtime.sync.webhook_deliveries import WebhookDeliveries
from tests.helpers import LOOPBACK
from tests.integration.test_webhooks_github import SECRET, signed

T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        server.add_issue("acme", "api", 1, "Webhooks drop retries", body="Seen twice.")
        yield server


def connectors(fake: FakeGitHub) -> list[dict[str, Any]]:
    github = {
        "type": "github",
        "repo": "acme/api",
        "token": "t",
        "base_url": fake.base_url,
        "subject": "repo:{repository}",
        "streams": ["issues", "issue_comments"],
        "start": T0.isoformat(),
        "retry": {"max_attempts": 1},
    }
    return [
        {**github, "name": "gh", "webhook": {"secret": SECRET, "push_gap_after": "1h"}},
        {**github, "name": "unhooked"},
    ]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def services(store: Store, fake: FakeGitHub, clock: FakeClock) -> Services:
    settings = Settings.model_validate(
        {"store": str(store.engine.url), "connectors": connectors(fake)}
    )
    return Services(settings, store, clock)


@pytest.fixture
def client(services: Services) -> TestClient:
    return TestClient(create_app(services), base_url=LOOPBACK)


def post(client: TestClient, event: str, body: bytes, *, secret: str = SECRET) -> int:
    headers = signed(event, body, secret=secret)
    return client.post("/v1/webhooks/gh", content=body, headers=headers).status_code


def webhook_state(client: TestClient) -> dict[str, Any]:
    response = client.get("/v1/connectors/gh/state")
    assert response.status_code == 200, response.text
    state: dict[str, Any] = response.json()["webhook"]
    return state


OUTCOMES = ("stored", "duplicate", "revised", "ignored", "refused")
NONE = dict.fromkeys(OUTCOMES, 0)


def counts(state: dict[str, Any]) -> dict[str, int]:
    return {outcome: state[outcome] for outcome in OUTCOMES}


def test_every_answered_and_refused_delivery_is_counted_by_its_outcome(
    client: TestClient, fake: FakeGitHub, clock: FakeClock
) -> None:
    opened = fake.webhook_body("issues", "opened", "acme", "api", 1)
    statuses = [post(client, "issues", opened)]
    clock.advance(timedelta(minutes=1))
    statuses.append(post(client, "issues", opened))  # another delivery id: the key knows it
    fake.edit_issue("acme", "api", 1, title="Webhooks drop retries on 429")
    statuses.append(post(client, "issues", fake.webhook_body("issues", "edited", "acme", "api", 1)))
    statuses.append(post(client, "ping", b'{"zen": "Design for failure.", "hook_id": 1}'))
    clock.advance(timedelta(minutes=1))
    statuses.append(post(client, "issues", opened, secret="guess"))
    statuses.append(post(client, "issues", b"{not json"))

    state = webhook_state(client)

    assert statuses == [200, 200, 200, 200, 401, 400]
    assert counts(state) == {"stored": 1, "duplicate": 1, "revised": 1, "ignored": 1, "refused": 2}
    moments = {
        name: datetime.fromisoformat(state[name])
        for name in ("last_delivery_at", "last_accepted_at", "last_stored_at", "last_refused_at")
    }
    assert moments == {
        "last_delivery_at": NOW + timedelta(minutes=2),
        "last_accepted_at": NOW + timedelta(minutes=1),
        "last_stored_at": NOW + timedelta(minutes=1),
        "last_refused_at": NOW + timedelta(minutes=2),
    }
    # The kind and status only: the message (which can quote the body) is in the log.
    assert (state["last_refusal"], state["last_refusal_status"]) == ("malformed", 400)
    assert (state["push_gap_after_seconds"], state["push_gap"]) == (3600.0, None)


def test_a_connector_without_a_webhook_or_unknown_gets_no_row(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    opened = fake.webhook_body("issues", "opened", "acme", "api", 1)
    for name in ("unhooked", "nobody"):
        response = client.post(f"/v1/webhooks/{name}", content=opened, headers=signed("x", opened))
        assert response.status_code == 404

    assert client.get("/v1/connectors/unhooked/state").json()["webhook"] is None
    with store.engine.connect() as connection:
        rows = connection.execute(sa.select(tables.webhook_deliveries)).all()
    assert rows == []


def state_show(tmp_path: Path, fake: FakeGitHub, store: Store, *options: str) -> Result:
    """``memsync state show gh`` from a configuration file, as a person runs it (its
    clock is the system's: the deliveries of these tests are long past)."""
    config = tmp_path / "memsync.yaml"
    # Secrets are never written in the file: the environment has them.
    written = connectors(fake)
    for connector in written:
        connector["token"] = "${GH_TOKEN}"
    written[0]["webhook"]["secret"] = "${GH_HOOK_SECRET}"
    config.write_text(yaml.safe_dump({"store": str(store.engine.url), "connectors": written}))
    env = {"GH_TOKEN": "t", "GH_HOOK_SECRET": SECRET}
    command = ["--config", str(config), "state", "show", "gh", *options]
    result = CliRunner().invoke(cli_app, command, env=env)
    assert result.exit_code == 0, result.output
    return result


def test_state_show_prints_the_counts_and_json_has_them(
    client: TestClient, fake: FakeGitHub, store: Store, tmp_path: Path
) -> None:
    opened = fake.webhook_body("issues", "opened", "acme", "api", 1)
    post(client, "issues", opened)
    post(client, "issues", opened, secret="guess")
    shown = state_show(tmp_path, fake, store, "--json").stdout
    text = state_show(tmp_path, fake, store).stdout

    webhook = json.loads(shown)["webhook"]
    assert counts(webhook) == {**NONE, "stored": 1, "refused": 1}
    assert webhook["last_refusal"] == "bad_signature"
    assert "webhook deliveries" in text
    assert "bad_signature (401)" in text


def admin_webhook_cells(client: TestClient) -> dict[str, str]:
    """The admin page's connectors, each with the text of its Webhook cell."""
    page = client.get("/ui/connectors")
    assert page.status_code == 200, page.text
    rows = re.findall(
        r'class="connector-link">([^<]+)</a>.*?<td class="webhook">(.*?)</td>', page.text, re.S
    )
    return {name: " ".join(re.sub(r"<[^>]+>", " ", cell).split()) for name, cell in rows}


def run_finding_a_new_issue(
    services: Services, fake: FakeGitHub, clock: FakeClock, number: int
) -> int:
    fake.add_issue("acme", "api", number, f"Issue {number}", updated_at=clock.now())
    clock.advance(timedelta(minutes=5))
    return services.run_sync(services.connector("gh")).created


def test_a_push_gap_is_flagged_while_re_reads_find_new_records_and_cleared_by_a_delivery(
    client: TestClient,
    services: Services,
    fake: FakeGitHub,
    clock: FakeClock,
    store: Store,
    tmp_path: Path,
) -> None:
    assert post(client, "issues", fake.webhook_body("issues", "opened", "acme", "api", 1)) == 200
    services.run_sync(services.connector("gh"))  # finds nothing the push did not bring
    clock.advance(timedelta(minutes=10))
    found_at = clock.now() + timedelta(minutes=5)
    assert run_finding_a_new_issue(services, fake, clock, 2) == 1

    # One re-read found a record no delivery brought: not a gap yet (it may be slow).
    clock.advance(timedelta(minutes=50))
    assert webhook_state(client)["push_gap"] is None
    clock.advance(timedelta(minutes=5))
    assert run_finding_a_new_issue(services, fake, clock, 3) == 1
    gap = webhook_state(client)["push_gap"]

    assert gap is not None
    assert datetime.fromisoformat(gap["last_accepted_at"]) == NOW
    assert datetime.fromisoformat(gap["first_found_at"]) == found_at
    assert (gap["runs"], gap["new_records"]) == (2, 2)
    assert "push gap: no delivery with records accepted since 2024-06-01T00:00:00" in (
        state_show(tmp_path, fake, store).stderr
    )
    assert admin_webhook_cells(client) == {
        "gh": "push gap 1 stored · 0 duplicate · 0 revised · 0 ignored · 0 refused "
        "last delivery 2024-06-01 00:00",
        "unhooked": "\u2013",  # an en dash: no webhook
    }

    # Issue 3's delivery arrives at last (the re-read stored it first): the hook works.
    assert post(client, "issues", fake.webhook_body("issues", "opened", "acme", "api", 3)) == 200
    cleared = webhook_state(client)
    assert (cleared["push_gap"], cleared["duplicate"]) == (None, 1)
    assert "push gap" not in admin_webhook_cells(client)["gh"]


def test_before_any_delivery_the_first_run_reads_history_and_later_finds_flag_a_gap(
    client: TestClient, services: Services, fake: FakeGitHub, clock: FakeClock
) -> None:
    assert services.run_sync(services.connector("gh")).created == 1  # the history
    clock.advance(timedelta(hours=3))
    assert webhook_state(client)["push_gap"] is None

    assert run_finding_a_new_issue(services, fake, clock, 2) == 1
    clock.advance(timedelta(hours=1))
    gap = webhook_state(client)["push_gap"]

    assert gap is not None
    assert (gap["last_accepted_at"], gap["runs"], gap["new_records"]) == (None, 1, 1)


def test_a_backfill_finding_old_records_is_no_gap(
    client: TestClient, services: Services, fake: FakeGitHub, clock: FakeClock
) -> None:
    assert post(client, "issues", fake.webhook_body("issues", "opened", "acme", "api", 1)) == 200
    fake.add_issue("acme", "api", 2, "Older than the hook", updated_at=T0 + timedelta(days=1))
    clock.advance(timedelta(minutes=10))
    backfill = services.run_backfill(
        services.connector("gh"), since=T0, until=clock.now(), slice_length=timedelta(days=30)
    )
    clock.advance(timedelta(hours=2))

    assert backfill.created == 1
    assert webhook_state(client)["push_gap"] is None


def test_forgetting_the_connector_removes_its_counts(
    client: TestClient, services: Services, fake: FakeGitHub
) -> None:
    post(client, "issues", fake.webhook_body("issues", "opened", "acme", "api", 1))
    assert webhook_state(client)["stored"] == 1

    services.forget_connector("default", "gh")

    assert counts(webhook_state(client)) == NONE


def test_deliveries_recorded_out_of_order_keep_the_latest_moments(
    store: Store, clock: FakeClock
) -> None:
    deliveries = WebhookDeliveries(store)
    later, earlier = NOW + timedelta(seconds=2), NOW + timedelta(seconds=1)
    deliveries.record("default", "gh", "bad_signature", 401, later)
    deliveries.record("default", "gh", "stale", 401, earlier)
    deliveries.record("default", "gh", "stored", 200, earlier)

    [state] = deliveries.states("default", {"gh": timedelta(hours=1)}, later).values()

    assert (state.refused, state.stored) == (2, 1)
    assert (state.last_delivery_at, state.last_refused_at) == (later, later)
    assert (state.last_refusal, state.last_stored_at) == ("bad_signature", earlier)
