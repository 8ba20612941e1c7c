"""The YAML form of the HTTP base (``type: http``): the example source declared in YAML,
validated with errors naming the file and the field, read from its loopback fake and
checked by the conformance kit."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from memsync.clock import FakeClock
from memsync.connectors import ConnectorConfigError, ConnectorRegistry, Window
from memsync.connectors.http import HttpRecord
from memsync.connectors.http.fake_desk import FakeDesk
from memsync.connectors.http.yaml_connector import YamlHttpConnector
from memsync.connectors.http.yaml_declaration import HttpYamlConfig
from memsync.connectors.testing import ConnectorConformanceSuite, DeletionScenario
from memsync.stopping import FakeSleeper

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 2, 1, tzinfo=UTC)
EVERYTHING = Window(start=None, end=NOW)

# The 40-line Python example (memsync/connectors/http/example.py), declared in YAML.
DESK_YAML = """\
vendor: Desk
base_url: "https://{config.values[account]}.desk.example"
auth: {bearer: {}}
streams:
  - name: tickets
    path: /v1/tickets?sort=updated_at
    key: "desk:{config.values[account]}:ticket:{id}"
    incremental: {field: updated_at, param: updated_since}
    pagination: {link_header: {}}
    subject_fields: {ticket_id: id}
    absent_from_full_read: "desk:{config.values[account]}:"
    ordered: true
    children:
      - name: notes
        path: "/v1/tickets/{parent[id]}/notes"
        key: "desk:{config.values[account]}:ticket:{parent[id]}:note:{id}"
        occurred_at: created_at
        subject_fields: {ticket_id: parent.id}
        pagination: {next_url: {url: next}}
        on_not_found: parent_gone
"""


def registry() -> ConnectorRegistry:
    """The ``http`` type through its entry point, as pyproject.toml registers it."""
    found = [
        EntryPoint(
            name="http",
            value="memsync.connectors.http.yaml_declaration:HTTP",
            group="memsync.connectors",
        )
    ]
    return ConnectorRegistry.from_entry_points(found)


def entry(declaration: Path, **fields: object) -> dict[str, object]:
    return {
        "name": "desk",
        "type": "http",
        "declaration": str(declaration),
        "token": "desk-token",
        "values": {"account": "acme"},
        "subject": "ticket:{ticket_id}",
        **fields,
    }


def problems(tmp_path: Path, text: str, **fields: object) -> list[str]:
    path = tmp_path / "desk.http.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConnectorConfigError) as caught:
        registry().parse_configs([entry(path, **fields)], source="memsync.yaml")
    return caught.value.problems


@pytest.fixture
def fake() -> Iterator[FakeDesk]:
    with FakeDesk(per_page=2, notes_per_page=1) as server:
        server.add_ticket(1, "VPN down", T0 + timedelta(hours=1), notes=2)
        server.add_ticket(2, "Printer on fire", T0 + timedelta(hours=2), notes=1)
        server.add_ticket(3, "Refund", T0 + timedelta(hours=3))
        yield server


def yaml_connector(tmp_path: Path, fake: FakeDesk) -> YamlHttpConnector:
    path = tmp_path / "desk.http.yaml"
    path.write_text(DESK_YAML, encoding="utf-8")
    types = registry()
    [config] = types.parse_configs([entry(path, base_url=fake.base_url)])
    assert isinstance(config, HttpYamlConfig)
    clock = FakeClock(NOW)
    connector = types.get("http")(config, sleeper=FakeSleeper(clock, max_waits=0))
    assert isinstance(connector, YamlHttpConnector)
    return connector


def test_a_yaml_declared_source_reads_like_the_python_one(tmp_path: Path, fake: FakeDesk) -> None:
    connector = yaml_connector(tmp_path, fake)
    items = list(connector.fetch(EVERYTHING, None))
    records = [item for item in items if isinstance(item, HttpRecord)]
    assert [r.key() for r in records] == [
        "http:desk:acme:ticket:1",
        "http:desk:acme:ticket:1:note:1",
        "http:desk:acme:ticket:1:note:2",
        "http:desk:acme:ticket:2",
        "http:desk:acme:ticket:2:note:3",
        "http:desk:acme:ticket:3",
    ]
    assert {connector.to_episode(r).subject_id for r in records} == {
        "ticket:1",
        "ticket:2",
        "ticket:3",
    }
    assert "desk-token" in connector.secret_values()


def test_every_mistake_in_the_declaration_names_the_file_and_the_field(tmp_path: Path) -> None:
    broken = DESK_YAML.replace("pagination: {link_header: {}}", "pagnation: {link: {}}")
    broken = broken.replace("on_not_found: parent_gone", "on_not_found: maybe")
    broken = broken.replace("auth: {bearer: {}}", "auth: {oauth: {}}")
    path = tmp_path / "desk.http.yaml"
    said = problems(tmp_path, broken)
    assert said == [
        f"connector 'desk' in memsync.yaml: declaration: {path}: auth: unknown kind "
        "'oauth'; known: bearer, basic, api_key_header\n"
        f"{path}: streams.0.pagnation: unknown field (did you mean 'pagination'?)\n"
        f"{path}: streams.0.children.0.on_not_found: Input should be 'stop', 'empty' or "
        "'parent_gone'"
    ]


def test_a_missing_key_template_and_an_unreadable_file_are_reported(tmp_path: Path) -> None:
    keyless = DESK_YAML.replace('    key: "desk:{config.values[account]}:ticket:{id}"\n', "")
    [said] = problems(tmp_path, keyless)
    assert said.endswith("streams.0: http stream 'tickets' needs a key template")
    [said] = registry_problems_for(tmp_path / "nowhere.yaml")
    assert said == (
        f"connector 'desk' in memsync.yaml: declaration: {tmp_path / 'nowhere.yaml'}: "
        "cannot be read: No such file or directory"
    )


def registry_problems_for(path: Path) -> list[str]:
    with pytest.raises(ConnectorConfigError) as caught:
        registry().parse_configs([entry(path)], source="memsync.yaml")
    return caught.value.problems


def test_the_subject_template_is_checked_against_the_declared_fields(tmp_path: Path) -> None:
    [said] = problems(tmp_path, DESK_YAML, subject="org:{org_id}")
    assert said == (
        "connector 'desk' in memsync.yaml: subject: template 'org:{org_id}' names 'org_id', "
        "which http records do not have (fields offered: id, parent_id, stream, ticket_id)"
    )


class TestYamlDeskConformance(ConnectorConformanceSuite[HttpRecord]):
    @pytest.fixture(autouse=True)
    def source(self, tmp_path: Path, fake: FakeDesk) -> None:
        self.fake, self.tmp_path = fake, tmp_path

    def make_connector(self) -> YamlHttpConnector:
        return yaml_connector(self.tmp_path, self.fake)

    def recorded_records(self) -> Sequence[HttpRecord]:
        items = self.make_connector().fetch(EVERYTHING, None)
        return [item for item in items if isinstance(item, HttpRecord)]

    def edited_records(self) -> Sequence[HttpRecord]:
        self.fake.edit_ticket(1, "VPN down again", T0 + timedelta(hours=4))
        return [r for r in self.recorded_records() if r.key() == "http:desk:acme:ticket:1"]

    def deletion_scenario(self) -> DeletionScenario:
        def remove() -> str:
            self.fake.delete_ticket(2)
            return "http:desk:acme:ticket:2"

        return DeletionScenario(read=self.make_connector, remove=remove, window=EVERYTHING)
