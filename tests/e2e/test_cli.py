"""The memsync command in a subprocess, as a user runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def memsync(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_tells_the_story_once_and_a_rerun_creates_nothing(tmp_path: Path) -> None:
    wide = {"COLUMNS": "200"}  # tables are not folded at the width of a pipe
    first = memsync("demo", cwd=tmp_path, env=wide)
    second = memsync("demo", cwd=tmp_path, env=wide)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "memsync.db").exists()
    # Four text files (the .gitignore is one) and one snapshot of the scan.
    assert "of demo-workspace (workspace, tenant default): succeeded; fetched 5, created 5" in (
        first.stdout
    )
    assert "ingested the bundled sample: created 5, duplicates 0, revised 0" in first.stdout
    assert "of demo-chat (fake, tenant default): succeeded; fetched 4, created 4" in first.stdout
    # The second act: Porto is new, c2 edited and c3 moved are revisions, c4 deleted.
    assert "fetched 4, created 1, duplicates 1, revised 2, tombstoned 1" in first.stdout
    # Globex lost its source, so Acme, which it had beaten, is back.
    assert "reinstated 1" in first.stdout
    records = first.stdout.split("supersession records")[1].split("the context bundle")[0]
    assert re.search(
        r"claim_contradiction\s*│\s*location\.home_city.*Lives in Porto.*Lisbon", records
    )
    assert re.search(r"source_moved\s*│\s*tools\.used", records)
    bundle = first.stdout.split("Known about the subject:")[1].split("3. Everything read again")[0]
    for fact in ("Lives in Porto", "Works at Acme", "Prefers coffee"):
        assert fact in bundle
    for gone in ("Lisbon", "Globex", "tea", "Uses Postgres"):
        assert gone not in bundle
    read_again = first.stdout.split("3. Everything read again")[1]
    assert "compiled 0 episodes: memories created 0, superseded 0" in read_again
    assert not re.search(r"created [1-9]", read_again)

    assert "the team chat was read by an earlier demo" in second.stdout
    assert "succeeded; fetched 5, created 0, duplicates 5, revised 0" in second.stdout
    assert "ingested the bundled sample: created 0, duplicates 5, revised 0" in second.stdout
    assert "fetched 4, created 0, duplicates 4, revised 0, tombstoned 0" in second.stdout
    assert "compiled 0 episodes: memories created 0" in second.stdout
    assert "memories created 0" in second.stdout.split("2. The sources change")[1]
    assert bundle in second.stdout  # the same story, told again from the store


def test_invalid_config_exits_2_naming_file_and_field(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("api:\n  port: soon\n")
    result = memsync("--config", str(config), "db", "upgrade", cwd=tmp_path)
    assert result.returncode == 2
    assert f"{config}: api.port" in result.stderr


def test_serve_refuses_a_public_interface_without_api_keys(tmp_path: Path) -> None:
    result = memsync("serve", "--host", "0.0.0.0", cwd=tmp_path)
    assert result.returncode == 2
    assert "no API keys are configured" in result.stderr


def test_config_show_redacts_secrets(tmp_path: Path) -> None:
    config = tmp_path / "memsync.yaml"
    config.write_text("api:\n  keys:\n    - name: ops\n      key: ${OPS_KEY}\n")
    result = memsync(
        "--config", str(config), "config", "show", cwd=tmp_path, env={"OPS_KEY": "s3cr3t-value"}
    )
    assert result.returncode == 0, result.stderr
    assert "s3cr3t-value" not in result.stdout + result.stderr
    assert "***" in result.stdout


def test_keys_new_prints_a_key_whose_hash_loads(tmp_path: Path) -> None:
    result = memsync("keys", "new", "--name", "ops", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip()
    digest = next(
        line.split(":")[1].strip() for line in result.stderr.splitlines() if "sha256:" in line
    )
    config = tmp_path / "memsync.yaml"
    config.write_text(f"api:\n  keys:\n    - name: ops\n      sha256: {digest}\n")
    from memsync.runtime.app.config import hash_api_key, load_settings

    assert load_settings(config, environ={}).api.keys[0].stored_hash() == hash_api_key(key)


@pytest.mark.parametrize(
    "store",
    [
        "postgresql+psycopg://memsync:s3cret-pass@127.0.0.1:1/nowhere",
        "sqlite:////no/such/directory/memsync.db",
    ],
)
def test_a_store_that_does_not_answer_is_one_line_and_exit_4(tmp_path: Path, store: str) -> None:
    config = tmp_path / "memsync.yaml"
    config.write_text(f"store: {store}\n")

    result = memsync("--config", str(config), "db", "upgrade", cwd=tmp_path)
    debug = memsync("--config", str(config), "--debug", "db", "upgrade", cwd=tmp_path)

    assert result.returncode == 4
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("memsync: cannot reach the store ")
    assert "s3cret-pass" not in result.stderr
    assert "Traceback" in debug.stderr


def test_an_llm_endpoint_that_does_not_answer_is_one_line_and_exit_4(tmp_path: Path) -> None:
    config = tmp_path / "memsync.yaml"
    config.write_text(
        f"store: sqlite:///{tmp_path}/memsync.db\n"
        "compile:\n  compiler: llm\n"
        "  llm: {base_url: 'http://127.0.0.1:1/v1', model: m, api_key: '${LLM_KEY}'}\n"
    )
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(
        '{"subject_id": "ana", "source": "chat", "type": "message", '
        '"payload": {"messages": [{"role": "user", "content": "I live in Lisbon."}]}}\n'
    )
    env = {**os.environ, "LLM_KEY": "sk-not-a-real-key"}
    ingested = subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), "ingest", str(episodes)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip
    compiled = subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), "compile", "ana"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120,
    )  # fmt: skip

    assert ingested.returncode == 0, ingested.stderr
    assert compiled.returncode == 4
    [line] = compiled.stderr.strip().splitlines()
    assert "unreachable" in line
    assert "sk-not-a-real-key" not in compiled.stderr


def test_ingest_of_a_file_that_is_not_utf8_exits_2_without_a_traceback(tmp_path: Path) -> None:
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_bytes(b'{"subject_id": "\xff"}\n')
    result = memsync("ingest", str(episodes), cwd=tmp_path)
    assert result.returncode == 2
    assert "not UTF-8" in result.stderr
    assert "Traceback" not in result.stderr
