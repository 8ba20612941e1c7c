"""Configuration: errors name the file and the field; secrets never leak."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import pytest

from memsync.runtime.app.config import ConfigError, hash_api_key, load_settings, redacted_dump


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "memsync.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_a_file() -> None:
    settings = load_settings(None, environ={})
    assert settings.store == "sqlite:///memsync.db"
    assert settings.api.port == 8100
    assert not settings.api.auth_enabled


def test_a_wrong_type_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  port: soon\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path, environ={})
    assert str(raised.value).startswith(f"{path}: api.port: ")


def test_the_context_layout_is_statewave_or_memsync(tmp_path: Path) -> None:
    assert load_settings(None, environ={}).context.layout == "memsync"
    chosen = load_settings(write(tmp_path, "context:\n  layout: statewave\n"), environ={})
    assert chosen.context.layout == "statewave"
    with pytest.raises(ConfigError, match=r"context\.layout: Input should be 'memsync' or"):
        load_settings(write(tmp_path, "context:\n  layout: fancy\n"), environ={})


def test_an_unknown_field_is_refused_by_name_with_the_likely_intended_one(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "api:\n  prot: 8100\n")
    with pytest.raises(ConfigError, match=r"api\.prot: unknown field \(did you mean 'port'\?\)"):
        load_settings(path, environ={})


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "stor: x\njobs: {nightly_compil: '0 3 * * *'}\napi: {session_secret: '${NOT_SET}'}\n"
        "connectors:\n  - name: gh\n    token: ${NOT_SET_ANYWHERE}\n",
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(
            path,
            environ={},
            check_connectors=lambda raw, label, unknown: [
                f"{label}: checked { {k: sorted(v) for k, v in unknown.items()} }"
            ],
            strict_environment=True,
        )
    assert str(raised.value).splitlines() == [
        f"{path}: api.session_secret: environment variable NOT_SET is not set "
        "(set it, or write ${NOT_SET:-default})",
        f"{path}: connectors[0].token: environment variable NOT_SET_ANYWHERE is not set "
        "(set it, or write ${NOT_SET_ANYWHERE:-default})",
        f"{path}: jobs.nightly_compil: unknown field (did you mean 'nightly_compile'?)",
        f"{path}: stor: unknown field (did you mean 'store'?)",
        f"{path}: checked {{0: ['token']}}",
    ]


def test_a_secret_written_in_the_file_is_refused_saying_how_to_take_it_from_the_environment(
    tmp_path: Path,
) -> None:
    path = write(tmp_path, "connectors:\n  - name: gh\n    type: github\n    token: ghp_abc\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path, environ={})
    message = str(raised.value)
    assert message.startswith(f"{path}: connectors[0].token: a secret is never written")
    assert "token: ${" in message
    assert "ghp_abc" not in message


def test_a_nested_list_field_is_named_with_its_index(tmp_path: Path) -> None:
    path = write(tmp_path, "api:\n  keys:\n    - name: a\n      sha256: xyz\n")
    with pytest.raises(ConfigError, match=r"api\.keys\[0\]\.sha256: .*64 hex"):
        load_settings(path, environ={})


def test_prioritized_paths_default_to_the_agent_reads_and_must_start_at_the_root(
    tmp_path: Path,
) -> None:
    assert load_settings(None, environ={}).api.prioritized_paths == [
        "/v1/context",
        "/v1/memories/search",
    ]
    path = write(tmp_path, "api:\n  prioritized_paths: [v1/context]\n")
    with pytest.raises(ConfigError, match=r"api\.prioritized_paths: .*'v1/context' is not a path"):
        load_settings(path, environ={})


def test_environment_variables_are_interpolated(tmp_path: Path) -> None:
    path = write(tmp_path, "store: ${DB_URL}\napi:\n  port: ${PORT:-9000}\n")
    settings = load_settings(path, environ={"DB_URL": "sqlite:///x.db"})
    assert settings.store == "sqlite:///x.db"
    assert settings.api.port == 9000


def test_a_missing_environment_variable_names_the_field(tmp_path: Path) -> None:
    path = write(tmp_path, "store: ${STORE_URL}\n")
    with pytest.raises(ConfigError, match=r"store: environment variable STORE_URL is not set"):
        load_settings(path, environ={})


def test_a_variable_a_connector_names_is_needed_only_by_that_connector(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "connectors:\n"
        "  - {name: ws, type: workspace, subject: s, root: '${WS_ROOT}'}\n"
        "  - name: gh\n    token: ${GITHUB_TOKEN}\n"
        "    retry: {max_wait: '${WAIT}'}\n    base_url: ${GHE_HOST}/api\n",
    )
    checked: dict[int, list[str]] = {}

    def check(raw: list[object], label: str, unknown: Mapping[int, Collection[str]]) -> list[str]:
        checked.update({position: sorted(fields) for position, fields in unknown.items()})
        return []

    settings = load_settings(path, environ={"WS_ROOT": "/srv"}, check_connectors=check)

    assert checked == {1: ["base_url", "retry", "token"]}
    [line] = settings.missing_variables().values()
    assert line == (
        f"connector 'gh' in {path}: "
        "token: environment variable GITHUB_TOKEN is not set (set it, or write "
        "${GITHUB_TOKEN:-default}); retry.max_wait: environment variable WAIT is not set "
        "(set it, or write ${WAIT:-default}); base_url: environment variable GHE_HOST is "
        "not set (set it, or write ${GHE_HOST:-default})"
    )
    assert list(settings.missing_variables()) == ["gh"]
    # Whatever is missing, config show prints no value in its place.
    assert redacted_dump(settings)["connectors"][1]["token"] == "***"


def test_memsync_store_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "store: sqlite:///file.db\n")
    settings = load_settings(path, environ={"MEMSYNC_STORE": "sqlite:///env.db"})
    assert settings.store == "sqlite:///env.db"


def test_invalid_yaml_and_unreadable_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(write(tmp_path, "api: [unclosed\n"), environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "absent.yaml", environ={})


def test_the_redacted_dump_hides_every_secret(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "store: postgresql://memsync:hunter2@db/memsync\n"
        "api:\n  keys:\n    - name: ops\n      key: ${OPS_KEY}\n"
        "connectors:\n  - name: gh\n    type: github\n    token: ${GH}\n"
        "    repo: acme/api\n    base_url: ${GH_URL}\n",
    )
    settings = load_settings(
        path, environ={"OPS_KEY": "key-value", "GH": "ghp_secret", "GH_URL": "http://gh.local"}
    )
    dump = str(redacted_dump(settings))
    for secret in ("hunter2", "key-value", "ghp_secret", "http://gh.local"):
        assert secret not in dump
    assert "acme/api" in dump
    assert settings.api.keys[0].stored_hash() == hash_api_key("key-value")


def test_a_read_policy_is_read_from_the_configuration_and_its_errors_name_the_field(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "read_policy:\n  policy_mode: log_only\n  rules:\n"
        "    - {labels: [PII], caller_type: [agent, bot], action: deny}\n"
        "    - {name: hr, labels: [hr], action: redact}\n",
    )
    policy = load_settings(path, environ={}).read_policy.to_policy()
    assert policy.mode == "log_only"
    assert [(r.name, sorted(r.labels), r.action.value) for r in policy.rules] == [
        ("rule-1", ["pii"], "deny"),
        ("hr", ["hr"], "redact"),
    ]
    assert policy.rules[0].caller_types == {"agent", "bot"}
    bad = write(tmp_path, "read_policy:\n  rules:\n    - {labels: [pii], action: hide}\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(bad, environ={})
    assert str(raised.value).startswith(f"{bad}: read_policy.rules[0].action: ")
