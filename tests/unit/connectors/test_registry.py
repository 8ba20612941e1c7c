from __future__ import annotations

import ast
from datetime import timedelta
from importlib.metadata import Distribution, EntryPoint
from os import PathLike
from pathlib import Path
from typing import Literal

import pytest

import memsync.connectors
from memsync.connectors import (
    ConnectorDefinitionError,
    ConnectorRegistry,
    KeyPolicy,
    load_registry,
)
from memsync.connectors.declaration import ConnectorDeclaration
from memsync.connectors.fake import FakeConfig, FakeConnector
from memsync.connectors.github import GitHubConnector
from memsync.stopping import FakeSleeper

HERE = "tests.unit.connectors.test_registry"


class EmptyRationaleConnector(FakeConnector):
    type = "blank"
    key_rationale = "   "
    example_key = "blank:x"


class SecondFakeConnector(FakeConnector):
    """Claims the type 'fake', which the built-in already has."""


class MisnamedConnector(FakeConnector):
    type = "misnamed"
    example_key = "misnamed:x"


class DeafConnector(FakeConnector):
    """Overrides ``__init__`` without taking the sleeper the registry hands in."""

    type = "deaf"
    example_key = "deaf:x"

    def __init__(self, config: FakeConfig) -> None:
        super().__init__(config)


class LateConfig(FakeConfig):
    type: Literal["late"] = "late"  # type: ignore[assignment]


def _declared(
    connector_type: str, implementation: str, rationale: str = "Ids."
) -> ConnectorDeclaration:
    return ConnectorDeclaration(
        type=connector_type,
        key_policy=KeyPolicy.IDENTITY,
        key_rationale=rationale,
        config_model=LateConfig,
        example_key=f"{connector_type}:1",
        implementation=implementation,
        subject_fields=frozenset({"id"}),
    )


LATE = _declared("late", f"{HERE}:LateConnector")
GONE = _declared("late", "no_such_module:LateConnector")
NOT_TAKEN = _declared("late", f"{HERE}:FakeConnector")
BLANK = _declared("late", f"{HERE}:LateConnector", rationale=" ")


class LateConnector(FakeConnector, declaration=LATE):
    """Its attributes come from its declaration."""


BUILT_IN_TYPES = ["fake", "github", "http", "jira", "linear", "slack", "workspace", "zendesk"]
"""The connector types memsync's own distribution registers, in the registry's order."""


def _entry_point(name: str, target: str) -> EntryPoint:
    return EntryPoint(name=name, value=f"{HERE}:{target}", group="memsync.connectors")


def test_built_in_connectors_are_registered_through_entry_points() -> None:
    registry = load_registry()
    assert registry.types == BUILT_IN_TYPES
    policies = {info.type: info.key_policy for info in registry}
    assert policies == {
        "fake": KeyPolicy.IDENTITY,
        "github": KeyPolicy.IDENTITY,
        "http": KeyPolicy.IDENTITY,
        "jira": KeyPolicy.IDENTITY,
        "linear": KeyPolicy.IDENTITY,
        "slack": KeyPolicy.IDENTITY,
        "workspace": KeyPolicy.CONTENT,
        "zendesk": KeyPolicy.IDENTITY,
    }
    assert all("distribution memsync" in info.origin for info in registry)


class _CountingDistribution(Distribution):
    """A distribution of one connector entry point that counts reads of its metadata."""

    def __init__(self) -> None:
        self.metadata_reads = 0

    def read_text(self, filename: str) -> str | None:
        if filename == "entry_points.txt":
            return f"[memsync.connectors]\nlate = {HERE}:LATE\n"
        if filename in ("METADATA", "PKG-INFO"):
            self.metadata_reads += 1
            return "Metadata-Version: 2.1\nName: memsync-late\nVersion: 1.2.3\n"
        return None

    def locate_file(self, path: str | PathLike[str]) -> Path:
        raise FileNotFoundError(path)


def test_the_distribution_of_an_entry_point_is_read_only_when_its_origin_is_asked() -> None:
    distribution = _CountingDistribution()
    registry = ConnectorRegistry.from_entry_points(distribution.entry_points)

    [config] = registry.parse_configs([{"name": "l", "type": "late", "subject": "x:{id}"}])
    registry.build(config)
    # Parsing and building read the entry point only: a command over one connector
    # does not parse the metadata of the distribution that offers it.
    assert distribution.metadata_reads == 0

    [info] = registry
    assert info.origin == f"entry point 'late = {HERE}:LATE' (distribution memsync-late 1.2.3)"
    assert distribution.metadata_reads > 0


@pytest.mark.parametrize(
    ("raw", "streams"),
    [
        ({"name": "ws", "type": "workspace", "subject": "ws", "root": "."}, ["records"]),
        (
            {
                "name": "chat",
                "type": "slack",
                "subject": "channel:{channel}",
                "token": "xoxb-1",
                "channels": ["C024BE91L", "#general", "general", "random"],
            },
            ["C024BE91L", "general", "random"],
        ),
    ],
)
def test_a_configuration_that_names_its_streams_names_those_its_connector_reads(
    raw: dict[str, object], streams: list[str]
) -> None:
    registry = load_registry()
    [config] = registry.parse_configs([raw])

    assert config.stream_names() == tuple(streams)
    assert [stream.name for stream in registry.build(config).streams()] == streams


def test_a_configuration_whose_streams_only_its_connector_knows_names_none() -> None:
    [config] = load_registry().parse_configs(
        [{"name": "gh", "type": "github", "subject": "r", "repo": "acme/api", "token": "t"}]
    )
    assert config.stream_names() is None


def test_duplicate_type_is_refused_naming_both_entry_points() -> None:
    found = [
        _entry_point("fake", "FakeConnector"),
        _entry_point("fake", "SecondFakeConnector"),
    ]
    with pytest.raises(ConnectorDefinitionError) as caught:
        ConnectorRegistry.from_entry_points(found)
    message = str(caught.value)
    assert "connector type 'fake' is registered twice" in message
    assert f"'fake = {HERE}:FakeConnector'" in message
    assert f"'fake = {HERE}:SecondFakeConnector'" in message


def test_empty_rationale_is_refused_naming_the_entry_point() -> None:
    with pytest.raises(ConnectorDefinitionError) as caught:
        ConnectorRegistry.from_entry_points([_entry_point("blank", "EmptyRationaleConnector")])
    message = str(caught.value)
    assert message.startswith(f"entry point 'blank = {HERE}:EmptyRationaleConnector'")
    assert "has an empty key_rationale" in message


def test_entry_point_name_must_be_the_class_type() -> None:
    with pytest.raises(ConnectorDefinitionError, match="must equal the class's type 'misnamed'"):
        ConnectorRegistry.from_entry_points([_entry_point("other", "MisnamedConnector")])


def test_entry_point_that_does_not_import_is_named() -> None:
    broken = EntryPoint(name="x", value="no_such_module:Thing", group="memsync.connectors")
    with pytest.raises(ConnectorDefinitionError, match="'x = no_such_module:Thing' failed"):
        ConnectorRegistry.from_entry_points([broken])


def test_a_broken_plugin_is_set_aside_and_every_other_connector_keeps_working() -> None:
    from memsync.connectors.registry import entry_points

    broken = EntryPoint(name="gitlab", value="no_such_module:Thing", group="memsync.connectors")
    installed = [*entry_points(group="memsync.connectors"), broken]

    registry = ConnectorRegistry.from_entry_points(installed, keep_going=True)

    assert "fake" in registry
    assert "gitlab" not in registry
    assert "failed to import" in registry.broken["gitlab"]
    [config] = registry.parse_configs([{"name": "f", "type": "fake", "subject": "thing:{id}"}])
    assert registry.build(config).type == "fake"
    with pytest.raises(memsync.connectors.ConnectorConfigError) as refused:
        registry.parse_configs([{"name": "g", "type": "gitlab", "subject": "x"}])
    assert "'gitlab' is installed but could not be loaded" in str(refused.value)


def test_connectors_list_shows_a_broken_plugin_beside_the_working_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    from typer.testing import CliRunner

    from memsync.connectors import registry as registry_module
    from memsync.runtime.app.cli import app

    real = registry_module.entry_points
    broken = EntryPoint(name="gitlab", value="no_such_module:Thing", group="memsync.connectors")
    monkeypatch.setattr(registry_module, "entry_points", lambda group: [*real(group=group), broken])

    listed = CliRunner().invoke(app, ["connectors", "list", "--json"])

    assert listed.exit_code == 0, listed.output
    by_type = {entry["type"]: entry for entry in json.loads(listed.stdout)}
    assert {"fake", "github", "slack", "workspace", "zendesk"} <= set(by_type)
    assert "failed to import" in by_type["gitlab"]["broken"]


SLACK = {
    "name": "chat",
    "type": "slack",
    "subject": "channel:{channel}",
    "channels": ["C1"],
    "tenant": "acme",
    "schedule": "every 1h",
}


def test_an_entry_whose_secret_is_not_known_here_can_be_addressed_but_never_built() -> None:
    registry = load_registry()

    [config] = registry.parse_configs([SLACK], source="f.yaml", unknown={0: {"token"}})

    assert type(config) is memsync.connectors.ConnectorConfig
    assert (config.name, config.type, config.tenant, str(config.schedule)) == (
        "chat",
        "slack",
        "acme",
        "every 1h",
    )
    with pytest.raises(memsync.connectors.ConnectorConfigError, match="cannot be built"):
        registry.build(config)


def test_an_optional_secret_not_known_here_still_makes_the_entry_unbuildable() -> None:
    # Validated without its token a GitHub entry passes (the token is optional), and a
    # connector built from it would read without the credentials the file asks for.
    github = {"name": "gh", "type": "github", "subject": "repo:{repo}", "repo": "acme/api"}
    [config] = load_registry().parse_configs([github], unknown={0: {"token"}})
    assert type(config) is memsync.connectors.ConnectorConfig


def test_the_other_problems_of_an_entry_with_unknown_fields_are_reported() -> None:
    broken = {**SLACK, "channels": [], "page_size": 0}
    with pytest.raises(memsync.connectors.ConnectorConfigError) as refused:
        load_registry().parse_configs([broken], source="f.yaml", unknown={0: {"token"}})
    said = "\n".join(refused.value.problems)
    assert "connector 'chat' in f.yaml: channels:" in said
    assert "connector 'chat' in f.yaml: page_size:" in said
    assert "token" not in said


def test_an_identity_field_not_known_here_is_a_problem() -> None:
    with pytest.raises(memsync.connectors.ConnectorConfigError) as refused:
        load_registry().parse_configs([SLACK], source="f.yaml", unknown={0: {"tenant", "token"}})
    [problem] = refused.value.problems
    assert problem.startswith("connector 'chat' in f.yaml: tenant: its value is not known here")


def test_a_webhook_is_refused_on_a_type_without_a_receiver_and_taken_on_one_with() -> None:
    workspace = {"name": "ws", "type": "workspace", "subject": "ws:x", "root": "."}
    with pytest.raises(memsync.connectors.ConnectorConfigError) as refused:
        load_registry().parse_configs([{**workspace, "webhook": {"secret": "s"}}], source="f.yaml")
    [problem] = refused.value.problems
    assert problem.startswith("connector 'ws' in f.yaml: webhook: workspace connectors take no")

    slack = {**SLACK, "token": "xoxb-1", "webhook": {"secret": "hush-hush-42"}}
    [config] = load_registry().parse_configs([slack])
    assert config.webhook is not None
    assert "hush-hush-42" not in repr(config)  # a secret, never shown


def test_entry_point_that_is_not_a_connector_is_refused() -> None:
    with pytest.raises(
        ConnectorDefinitionError,
        match="names neither a Connector subclass nor a ConnectorDeclaration",
    ):
        ConnectorRegistry.from_entry_points([_entry_point("x", "HERE")])


def test_a_declared_type_is_checked_and_listed_from_its_declaration_its_class_built_later() -> None:
    registry = ConnectorRegistry.from_entry_points([_entry_point("late", "LATE")])
    [info] = registry
    assert info.declared is LATE
    assert (info.key_policy, info.example_key, info.key_rationale) == (
        KeyPolicy.IDENTITY,
        "late:1",
        "Ids.",
    )

    [config] = registry.parse_configs([{"name": "l", "type": "late", "subject": "x:{id}"}])

    assert type(config) is LateConfig
    assert registry.get("late") is LateConnector
    assert [info.declared for info in registry] == [LateConnector]
    assert registry.build(config).type == "late"
    assert (LateConnector.declaration, LateConnector.config_model) == (LATE, LateConfig)


def test_a_declared_class_that_does_not_import_fails_the_build_naming_the_entry_point() -> None:
    registry = ConnectorRegistry.from_entry_points([_entry_point("late", "GONE")])
    [config] = registry.parse_configs([{"name": "l", "type": "late", "subject": "x"}])

    with pytest.raises(ConnectorDefinitionError) as refused:
        registry.build(config)

    assert str(refused.value).startswith(f"entry point 'late = {HERE}:GONE'")
    assert "no_such_module:LateConnector" in str(refused.value)
    assert "failed to import" in str(refused.value)


def test_a_declared_class_must_take_its_attributes_from_the_declaration() -> None:
    registry = ConnectorRegistry.from_entry_points([_entry_point("late", "NOT_TAKEN")])
    with pytest.raises(ConnectorDefinitionError, match="must take its attributes"):
        registry.get("late")


def test_a_declaration_is_refused_like_a_class() -> None:
    with pytest.raises(ConnectorDefinitionError, match="has an empty key_rationale"):
        ConnectorRegistry.from_entry_points([_entry_point("late", "BLANK")])
    with pytest.raises(ConnectorDefinitionError, match="must equal the declaration's type 'late'"):
        ConnectorRegistry.from_entry_points([_entry_point("other", "LATE")])


def test_registry_from_classes_refuses_duplicates_too() -> None:
    with pytest.raises(ConnectorDefinitionError, match="registered twice"):
        ConnectorRegistry.from_classes([FakeConnector, SecondFakeConnector])


def test_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="known types: " + ", ".join(BUILT_IN_TYPES)):
        load_registry().get("trello")


def test_build_makes_a_connector_from_parsed_config() -> None:
    registry = load_registry()
    (config,) = registry.parse_configs([{"name": "f", "type": "fake", "subject": "s"}])
    connector = registry.build(config)
    assert isinstance(connector, FakeConnector)
    assert connector.name == "f"


def test_build_hands_the_connector_the_sleeper_its_waits_wait_on() -> None:
    registry = load_registry()
    (config,) = registry.parse_configs(
        [{"name": "gh", "type": "github", "repo": "acme/api", "subject": "s"}]
    )
    sleeper = FakeSleeper()

    connector = registry.build(config, sleeper=sleeper)

    assert isinstance(connector, GitHubConnector)
    assert connector.sleeper is connector.retrier.sleeper is sleeper


def test_a_connector_that_cannot_take_a_sleeper_is_refused_naming_the_keyword() -> None:
    refusal = "DeafConnector.__init__ must accept the keyword argument 'sleeper'"
    with pytest.raises(ConnectorDefinitionError, match=refusal):
        ConnectorRegistry.from_entry_points([_entry_point("deaf", "DeafConnector")])


def test_public_surface_is_what_we_meant() -> None:
    assert sorted(memsync.connectors.__all__) == sorted(
        [
            "DEFAULT_STREAM",
            "ENTRY_POINT_GROUP",
            "Connector",
            "ConnectorConfig",
            "ConnectorConfigError",
            "ConnectorDeclaration",
            "ConnectorDefinitionError",
            "ConnectorError",
            "ConnectorInfo",
            "ConnectorRegistry",
            "Cursor",
            "Deletion",
            "Duration",
            "KeyPolicy",
            "KeyScope",
            "Listing",
            "Progress",
            "RateLimitExhausted",
            "RateLimited",
            "RecordConnector",
            "RequestObserver",
            "RequestOutcome",
            "Retrier",
            "RetryPolicy",
            "RetrySettings",
            "RetryableError",
            "ScheduleSetting",
            "ScheduleSpec",
            "SessionRecord",
            "SkipRecord",
            "SourceRecord",
            "StopRun",
            "Stream",
            "Tombstone",
            "SubjectTemplate",
            "SubjectTemplateError",
            "Window",
            "fetch_every_stream",
            "format_duration",
            "load_registry",
            "observing_requests",
            "parse_duration",
            "parse_schedule",
            "retry_after_from_headers",
            "validate_connector_class",
        ]
    )
    for name in memsync.connectors.__all__:
        assert hasattr(memsync.connectors, name), name


FORBIDDEN = ("sqlalchemy", "apscheduler", "prometheus_client", "memsync.runtime")
REPO = Path(memsync.connectors.__file__).parents[2]


def _imports_of(tree: Path, modules: tuple[str, ...]) -> list[str]:
    """``file: module`` for every import under ``tree`` of a banned module or its children."""
    offenders: list[str] = []
    for source in sorted(tree.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{source.relative_to(tree)}: {name}"
                for name in names
                if any(name == banned or name.startswith(banned + ".") for banned in modules)
            ]
    return offenders


def test_connectors_never_import_storage_scheduler_or_runtime() -> None:
    assert _imports_of(Path(memsync.connectors.__file__).parent, FORBIDDEN) == []


@pytest.mark.parametrize("tree", ["memsync", "bench"])
def test_the_package_and_the_benchmarks_never_import_the_test_suite(tree: str) -> None:
    # The fake API servers live in memsync.connectors for this reason.
    assert _imports_of(REPO / tree, ("tests",)) == []


def test_a_webhook_push_gap_is_an_hour_unless_set_and_never_zero() -> None:
    hooked = {**SLACK, "token": "xoxb-1", "webhook": {"secret": "hush-hush-42"}}
    [default] = load_registry().parse_configs([hooked])
    [set_] = load_registry().parse_configs(
        [{**hooked, "webhook": {"secret": "s", "push_gap_after": "3h"}}]
    )
    with pytest.raises(memsync.connectors.ConnectorConfigError) as refused:
        load_registry().parse_configs(
            [{**hooked, "webhook": {"secret": "s", "push_gap_after": "0s"}}], source="f.yaml"
        )

    assert default.webhook is not None
    assert set_.webhook is not None
    assert (default.webhook.push_gap_after, set_.webhook.push_gap_after) == (
        timedelta(hours=1),
        timedelta(hours=3),
    )
    [problem] = refused.value.problems
    assert "push_gap_after must be longer than 0" in problem
