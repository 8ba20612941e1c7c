"""The 40-line example source (memsync.connectors.http.example) against its loopback fake:
the conformance kit, paging, child streams, auth and rate limits, through real HTTP."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memsync.clock import FakeClock
from memsync.connectors import KeyScope, Listing, RateLimitExhausted, StopRun, Tombstone, Window
from memsync.connectors.http import HttpRecord
from memsync.connectors.http.example import DeskConfig, DeskConnector
from memsync.connectors.http.fake_desk import FakeDesk
from memsync.connectors.testing import ConnectorConformanceSuite, DeletionScenario
from memsync.stopping import FakeSleeper

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 2, 1, tzinfo=UTC)
EVERYTHING = Window(start=None, end=NOW)
REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "memsync" / "connectors" / "http" / "example.py"
DOCS = REPO / "docs" / "connectors.md"


def hours(n: int) -> datetime:
    return T0 + timedelta(hours=n)


def desk(fake: FakeDesk, token: str = "desk-token") -> DeskConnector:
    config = DeskConfig.model_validate(
        {
            "name": "helpdesk",
            "type": "desk",
            "subject": "desk",
            "account": "acme",
            "token": token,
            "base_url": fake.base_url,
            "retry": {"max_attempts": 3, "max_wait": "10m"},
        }
    )
    clock = FakeClock(NOW)
    return DeskConnector(config, sleeper=FakeSleeper(clock, max_waits=0), clock=clock)


def read(fake: FakeDesk, window: Window = EVERYTHING) -> list[object]:
    connector = desk(fake)
    try:
        return list(connector.fetch(window, None))
    finally:
        connector.close()


def keys(items: Sequence[object]) -> list[str]:
    return [item.key() for item in items if isinstance(item, HttpRecord)]


@pytest.fixture
def fake() -> Iterator[FakeDesk]:
    with FakeDesk(per_page=2, notes_per_page=2) as server:
        yield server


def test_the_example_is_at_most_40_lines_and_in_the_docs_verbatim() -> None:
    example = EXAMPLE.read_text(encoding="utf-8")
    assert len(example.splitlines()) <= 40
    assert f"```python\n{example}```" in DOCS.read_text(encoding="utf-8")


def test_tickets_and_their_notes_are_read_across_pages_in_update_order(fake: FakeDesk) -> None:
    fake.add_ticket(2, "Printer on fire", hours(2), notes=3)
    fake.add_ticket(1, "VPN down", hours(1))
    fake.add_ticket(3, "Refund", hours(3), notes=1)

    items = read(fake)

    assert keys(items) == [
        "desk:acme:ticket:1",
        "desk:acme:ticket:2",
        "desk:acme:ticket:2:note:1",
        "desk:acme:ticket:2:note:2",
        "desk:acme:ticket:2:note:3",
        "desk:acme:ticket:3",
        "desk:acme:ticket:3:note:4",
    ]
    assert items[-1] == Listing(KeyScope("desk:acme:"), frozenset(keys(items)))
    assert fake.request_count("/v1/tickets") == 2
    assert fake.request_count("/v1/tickets/2/notes") == 2
    note = next(i for i in items if isinstance(i, HttpRecord) and i.stream == "notes")
    assert note.position == hours(2)  # a child's position is its parent's
    assert note.episode_type == "desk.notes"


def test_an_incremental_read_sends_its_start_and_proves_no_absence(fake: FakeDesk) -> None:
    fake.add_ticket(1, "old", hours(1))
    fake.add_ticket(2, "new", hours(5))

    items = read(fake, Window(start=hours(4), end=NOW))

    assert keys(items) == ["desk:acme:ticket:2"]
    assert not any(isinstance(item, Listing) for item in items)
    [first] = [r for r in fake.requests if r.path == "/v1/tickets"]
    assert first.param("updated_since") == hours(4).isoformat()
    assert first.param("sort") == "updated_at"


def test_a_ticket_updated_between_pages_shifts_nothing_out_of_the_read(fake: FakeDesk) -> None:
    for n in range(1, 6):
        fake.add_ticket(n, f"ticket {n}", hours(n))
    connector = desk(fake)
    items = connector.fetch(EVERYTHING, None)
    first_page = [next(items), next(items)]
    fake.edit_ticket(1, "ticket 1, edited", hours(9))  # moves to the end of the list
    rest = list(items)
    connector.close()

    read_ids = [r.data["id"] for r in first_page + rest if isinstance(r, HttpRecord)]
    assert read_ids == [1, 2, 3, 4, 5, 1]


def test_records_updated_after_the_window_are_left_for_the_next_run(fake: FakeDesk) -> None:
    fake.add_ticket(1, "now", hours(1))
    fake.add_ticket(2, "later", NOW + timedelta(minutes=5), notes=1)

    assert keys(read(fake)) == ["desk:acme:ticket:1"]
    assert fake.request_count("/v1/tickets/2/notes") == 0


def test_a_ticket_deleted_while_its_notes_are_read_is_a_tombstone(fake: FakeDesk) -> None:
    fake.add_ticket(1, "doomed", hours(1), notes=1)
    connector = desk(fake)
    items = connector.fetch(EVERYTHING, None)
    assert keys([next(items)]) == ["desk:acme:ticket:1"]  # the list is read; then:
    fake.delete_ticket(1)

    assert next(items) == Tombstone("desk:acme:ticket:1", with_children=True)
    connector.close()


def test_refused_credentials_stop_the_run_and_never_show_the_token(fake: FakeDesk) -> None:
    connector = desk(fake, token="wrong-secret")
    with pytest.raises(StopRun) as caught:
        list(connector.fetch(EVERYTHING, None))
    assert "HTTP 401: check the credentials" in str(caught.value)
    assert "wrong-secret" not in str(caught.value)
    assert "wrong-secret" not in repr(connector.config)
    assert "wrong-secret" in connector.secret_values()


def test_a_rate_limit_past_the_cap_ends_the_read_with_rate_limit_exhausted(
    fake: FakeDesk,
) -> None:
    fake.budget = 1
    fake.refill()
    fake.add_ticket(1, "a", hours(1), notes=1)
    connector = desk(fake)
    items = connector.fetch(EVERYTHING, None)
    assert keys([next(items)]) == ["desk:acme:ticket:1"]
    with pytest.raises(RateLimitExhausted, match="next wait would be 3600s") as caught:
        next(items)
    assert caught.value.retry_after == 3600
    connector.close()


class TestDeskConformance(ConnectorConformanceSuite[HttpRecord]):
    @pytest.fixture(autouse=True)
    def source(self, fake: FakeDesk) -> None:
        fake.add_ticket(1, "VPN down", hours(1), notes=2)
        fake.add_ticket(2, "Printer on fire", hours(2), notes=1)
        self.fake = fake

    def make_connector(self) -> DeskConnector:
        return desk(self.fake)

    def recorded_records(self) -> Sequence[HttpRecord]:
        return [item for item in read(self.fake) if isinstance(item, HttpRecord)]

    def edited_records(self) -> Sequence[HttpRecord]:
        self.fake.edit_ticket(1, "VPN down again", hours(3))
        return [r for r in self.recorded_records() if r.key() == "desk:acme:ticket:1"]

    def deletion_scenario(self) -> DeletionScenario:
        def remove() -> str:
            self.fake.delete_ticket(2)
            return "desk:acme:ticket:2"

        return DeletionScenario(read=self.make_connector, remove=remove, window=EVERYTHING)
