from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.connectors import (
    ConnectorConfigError,
    SubjectTemplate,
    SubjectTemplateError,
    format_duration,
    load_registry,
    parse_duration,
    parse_schedule,
)

KNOWN_TYPES = "fake, github, http, jira, linear, slack, workspace, zendesk"
"""The built-in connector types, as an error message lists them."""


def _config(**fields: object) -> dict[str, object]:
    return {"name": "f", "type": "fake", "subject": "team:support", **fields}


def _problems(*raw: dict[str, object], source: str | None = None) -> list[str]:
    with pytest.raises(ConnectorConfigError) as caught:
        load_registry().parse_configs(list(raw), source=source)
    return caught.value.problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2h", timedelta(hours=2)),
        ("30m", timedelta(minutes=30)),
        ("7d", timedelta(days=7)),
        ("1w", timedelta(weeks=1)),
        ("1h30m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
    ],
)
def test_parse_duration_reads_units_and_sums(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@given(st.integers(min_value=0, max_value=10**8))
def test_format_duration_round_trips(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value


def test_overlap_that_is_not_a_duration_names_the_field_and_the_file() -> None:
    problems = _problems(_config(name="gh", overlap="soon"), source="config/memsync.yaml")
    assert problems == [
        "connector 'gh' in config/memsync.yaml: overlap 'soon' is not a duration (e.g. 2h, 30m, 7d)"
    ]


def test_schedule_accepts_every_cron_and_manual() -> None:
    assert parse_schedule("every 15m").interval == timedelta(minutes=15)
    cron = parse_schedule("*/5 3 * * mon-fri")
    assert (cron.kind, cron.expression) == ("cron", "*/5 3 * * mon-fri")
    manual = parse_schedule(" Manual ")
    assert (manual.kind, manual.expression, manual.interval) == ("manual", "manual", None)


@pytest.mark.parametrize("text", ["soon", "every soon", "61 * * * *", "* * * *", "*/0 * * * *"])
def test_bad_schedule_is_refused_naming_the_field(text: str) -> None:
    (problem,) = _problems(_config(schedule=text))
    assert problem.startswith("connector 'f': schedule")


def test_start_date_means_midnight_utc() -> None:
    (config,) = load_registry().parse_configs([_config(start="2024-03-01")])
    assert config.start == datetime(2024, 3, 1, tzinfo=UTC)


def test_every_mistake_is_reported_at_once_with_its_field() -> None:
    problems = _problems(
        _config(name="a", bogus=1, retry={"max_attempts": 0}),
        _config(name="a"),
        _config(name="b", type="trello"),
        {"name": "c", "subject": "x"},
        _config(name="Bad Name", base_url="ftp://example.com"),
    )
    assert problems == [
        "connector 'a': retry.max_attempts: Input should be greater than or equal to 1",
        "connector 'a': bogus: unknown field (check the spelling)",
        "connector 'a': name 'a' is used by entries 1 and 2; connector names must be unique",
        f"connector 'b': type: unknown connector type 'trello'; known types: {KNOWN_TYPES}",
        f"connector 'c': type: field required; known types: {KNOWN_TYPES}",
        "connector 'Bad Name': name 'Bad Name' must be 1-64 lowercase letters, digits, '-', "
        "'_' or '.', starting with a letter or digit",
        "connector 'Bad Name': base_url 'ftp://example.com' must start with http:// or https://",
    ]


def test_missing_required_fields_are_each_named() -> None:
    problems = _problems({"name": "zd", "type": "zendesk", "subject": "x", "email": "a@b.c"})
    assert problems == [
        "connector 'zd': subdomain: field required",
        "connector 'zd': token: field required",
    ]


def test_subject_template_may_only_name_fields_the_connector_offers() -> None:
    (problem,) = _problems(_config(subject="org:{organization_id}"))
    assert problem == (
        "connector 'f': subject: template 'org:{organization_id}' names 'organization_id', "
        "which fake records do not have (fields offered: group, id)"
    )


def test_subject_template_renders_fields_and_fixed_strings() -> None:
    assert SubjectTemplate("org:{organization_id}").render({"organization_id": 7}) == "org:7"
    assert SubjectTemplate("team:support").render({}) == "team:support"


def test_subject_template_missing_field_names_template_and_field() -> None:
    with pytest.raises(SubjectTemplateError) as caught:
        SubjectTemplate("org:{organization_id}").render({"ticket_id": 1})
    assert str(caught.value) == (
        "subject template 'org:{organization_id}' needs field 'organization_id', which the "
        "record does not have (fields offered: ticket_id)"
    )


@pytest.mark.parametrize("text", ["", "org:{id!r}", "org:{id:>4}", "org:{a.b}", "org:{x[0]}", "{"])
def test_subject_template_refuses_anything_but_plain_placeholders(text: str) -> None:
    with pytest.raises(ValueError, match="subject"):
        SubjectTemplate(text)


@given(st.text(alphabet=st.characters(blacklist_characters="{}"), min_size=1), st.integers())
def test_subject_template_renders_deterministically(prefix: str, value: int) -> None:
    template = SubjectTemplate(prefix + "{id}")
    assert template.render({"id": value}) == template.render({"id": value}) == f"{prefix}{value}"
