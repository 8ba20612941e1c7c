from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.connectors import Listing, StopRun, Window
from memsync.connectors.testing import (
    ConnectorConformanceSuite,
    DeletionScenario,
    SimulatedIngest,
)
from memsync.connectors.workspace import (
    WorkspaceConfig,
    WorkspaceConnector,
    WorkspaceFile,
    WorkspaceRecord,
    WorkspaceSnapshot,
    display_name,
    snapshot_digest,
)
from memsync.episode import IngestStatus

SCAN_AT = datetime(2024, 5, 1, tzinfo=UTC)
WINDOW = Window(start=None, end=SCAN_AT)


def _write(root: Path, files: dict[str, str | bytes]) -> None:
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _connector(root: Path, **options: object) -> WorkspaceConnector:
    config = WorkspaceConfig.model_validate(
        {"name": "ws", "subject": "workspace:{workspace_id}", "root": root, **options}
    )
    return WorkspaceConnector(config)


def _scan(root: Path, **options: object) -> list[WorkspaceRecord]:
    """The records of one scan (its listing left out)."""
    return [
        item
        for item in _connector(root, **options).fetch(WINDOW, None)
        if isinstance(item, WorkspaceFile | WorkspaceSnapshot)
    ]


def _paths(records: Sequence[WorkspaceRecord]) -> list[str]:
    return [r.path for r in records if isinstance(r, WorkspaceFile)]


def _snapshot(records: Sequence[WorkspaceRecord]) -> WorkspaceSnapshot:
    last = records[-1]
    assert isinstance(last, WorkspaceSnapshot)
    return last


def _keys(root: Path, records: Sequence[WorkspaceRecord]) -> set[str]:
    connector = _connector(root)
    return {connector.idempotency_key(r) for r in records}


class TestWorkspaceConformance(ConnectorConformanceSuite[WorkspaceRecord]):
    @pytest.fixture(autouse=True)
    def _tree(self, tmp_path: Path) -> None:
        _write(tmp_path, {"README.md": "# hi\n", "src/app.py": "print(1)\n"})
        self.root = tmp_path
        self.records = _scan(tmp_path)
        _write(tmp_path, {"src/app.py": "print(2)\n"})
        self.edited = _scan(tmp_path)

    def make_connector(self) -> WorkspaceConnector:
        return _connector(self.root)

    def recorded_records(self) -> Sequence[WorkspaceRecord]:
        return self.records

    def edited_records(self) -> Sequence[WorkspaceRecord]:
        changed = [r for r in self.edited if r not in self.records]
        assert len(changed) == 2  # the edited file and the new snapshot
        return changed

    def deletion_scenario(self) -> DeletionScenario:
        def remove() -> str:
            (file,) = [r for r in _scan(self.root) if getattr(r, "path", "") == "README.md"]
            (self.root / "README.md").unlink()
            return _connector(self.root).idempotency_key(file)

        return DeletionScenario(read=lambda: _connector(self.root), remove=remove, window=WINDOW)


def _sync_all(store: SimulatedIngest, root: Path) -> set[str]:
    """Apply one scan; return the keys it tombstoned."""
    before = store.deleted
    connector = _connector(root)
    store.sync(connector, connector.fetch(WINDOW, None))
    return store.deleted - before


def test_a_removed_file_is_reported_with_every_version_and_an_edited_one_is_not(
    tmp_path: Path,
) -> None:
    _write(tmp_path, {"notes.md": "v1", "src/app.py": "print(1)\n", "bin.dat": b"\0\1"})
    store = SimulatedIngest()
    _sync_all(store, tmp_path)
    _write(tmp_path, {"notes.md": "v2", "src/app.py": "print(2)\n"})
    assert _sync_all(store, tmp_path) == set()  # edited: the earlier versions stay as seen

    (tmp_path / "notes.md").unlink()
    gone = _sync_all(store, tmp_path)

    assert gone == {k for k in store.stored if ":file:notes.md:" in k}
    assert len(gone) == 2
    assert not any("app.py" in key or "bin.dat" in key for key in store.deleted)


def test_a_scan_that_could_not_read_a_directory_reports_no_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write(tmp_path, {"a.md": "a", "locked/b.md": "b"})
    store = SimulatedIngest()
    _sync_all(store, tmp_path)
    real_scandir = os.scandir

    def refuse_locked(path: object) -> object:
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", refuse_locked)
    items = list(_connector(tmp_path).fetch(WINDOW, None))

    assert not any(isinstance(item, Listing) for item in items)
    assert "tombstoned" not in store.sync(_connector(tmp_path), items)


def test_gitignore_semantics_negation_dir_only_anchored_and_double_star(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            ".gitignore": "*.log\n!keep.log\nbuild/\n/root-only.txt\ndocs/**/draft.md\n",
            "a.log": "x",
            "keep.log": "x",
            "build/out.txt": "x",
            "sub/build": "a file named build is not a directory",
            "root-only.txt": "x",
            "sub/root-only.txt": "x",
            "docs/draft.md": "x",
            "docs/x/y/draft.md": "x",
            "docs/final.md": "x",
            ".git/HEAD": "ref: refs/heads/main\n",
        },
    )
    assert _paths(_scan(tmp_path)) == [
        ".gitignore",
        "docs/final.md",
        "keep.log",
        "sub/build",
        "sub/root-only.txt",
    ]


def test_nested_gitignore_overrides_its_parent_below_its_directory(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            ".gitignore": "*.log\n",
            "top.log": "x",
            "x.tmp": "x",
            "sub/.gitignore": "!*.log\n*.tmp\n",
            "sub/a.log": "x",
            "sub/b.tmp": "x",
            "sub/deeper/c.log": "x",
        },
    )
    assert _paths(_scan(tmp_path)) == [
        ".gitignore",
        "sub/.gitignore",
        "sub/a.log",
        "sub/deeper/c.log",
        "x.tmp",
    ]


def test_files_inside_an_ignored_directory_cannot_be_re_included(tmp_path: Path) -> None:
    _write(tmp_path, {".gitignore": "build/\n!build/keep.txt\n", "build/keep.txt": "x"})
    assert _paths(_scan(tmp_path)) == [".gitignore"]


def test_gitignore_can_be_switched_off(tmp_path: Path) -> None:
    _write(tmp_path, {".gitignore": "*.log\n", "a.log": "x"})
    assert _paths(_scan(tmp_path, respect_gitignore=False)) == [".gitignore", "a.log"]


def test_include_and_exclude_globs(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"src/a.py": "x", "src/gen/b.py": "x", "src/c.txt": "x", "tests/t.py": "x"},
    )
    records = _scan(tmp_path, include=["src/**/*.py"], exclude=["src/gen/"])
    assert _paths(records) == ["src/a.py"]


def test_binary_and_oversize_files_are_skipped_with_a_reason(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {"image.png": b"\x89PNG\r\n\x1a\n\x00\x00", "big.txt": "x" * 11, "ok.txt": "x" * 10},
    )
    records = _scan(tmp_path, max_file_bytes=10)
    assert _paths(records) == ["ok.txt"]
    assert _snapshot(records).skipped == (
        ("big.txt", "oversize (11 > 10)"),
        ("image.png", "binary"),
    )


def test_a_nul_byte_anywhere_in_a_file_makes_it_binary(tmp_path: Path) -> None:
    # Past git's 8000-byte sniff: the payload would otherwise carry the NUL as text.
    _write(tmp_path, {"late.txt": "x" * 70_000 + "\x00" + "y", "ok.txt": "fine"})
    records = _scan(tmp_path)
    assert _paths(records) == ["ok.txt"]
    assert _snapshot(records).skipped == (("late.txt", "binary"),)


def test_a_file_name_that_is_not_utf8_is_kept_with_its_bytes_escaped(tmp_path: Path) -> None:
    raw = os.fsencode(tmp_path)
    os.makedirs(raw + b"/caf\xe9", exist_ok=True)
    with open(raw + b"/caf\xe9/men\xfc.txt", "wb") as handle:
        handle.write(b"soup")
    _write(tmp_path, {"z.txt": "after"})

    records = _scan(tmp_path)

    assert _paths(records) == ["caf\\xe9/men\\xfc.txt", "z.txt"]
    [named, _] = [r for r in records if isinstance(r, WorkspaceFile)]
    assert named.content == "soup"
    assert _snapshot(records).files[0] == ("caf\\xe9/men\\xfc.txt", named.sha256)
    assert display_name("caf\udce9") == "caf\\xe9"
    assert display_name("café") == "café"


def test_large_file_is_hashed_whole_and_its_content_bounded(tmp_path: Path) -> None:
    body = "é" * 100_000  # 200 000 bytes: several read chunks
    _write(tmp_path, {"big.txt": body})
    (record, _) = _scan(tmp_path, max_content_bytes=1001)
    assert isinstance(record, WorkspaceFile)
    assert record.sha256 == hashlib.sha256(body.encode()).hexdigest()
    assert record.size == 200_000
    assert record.truncated
    # 1001 bytes is 500 characters and half of one: the cut becomes one replacement char.
    assert record.content == "é" * 500 + "\ufffd"


def test_unchanged_rescan_gives_the_same_keys_and_stores_nothing(tmp_path: Path) -> None:
    _write(tmp_path, {"a.txt": "one", "b/c.txt": "two"})
    first, second = _scan(tmp_path), _scan(tmp_path)
    assert _keys(tmp_path, first) == _keys(tmp_path, second)
    store = SimulatedIngest()
    connector = _connector(tmp_path)
    store.ingest_all([connector.to_episode(r) for r in first])
    again = store.ingest_all([connector.to_episode(r) for r in second])
    assert set(again) == {IngestStatus.DUPLICATE}


def test_one_changed_file_is_exactly_one_new_file_key_and_one_new_snapshot(
    tmp_path: Path,
) -> None:
    _write(tmp_path, {"a.txt": "one", "b/c.txt": "two", "d.txt": "three"})
    before = _scan(tmp_path)
    _write(tmp_path, {"b/c.txt": "two, edited"})
    after = _scan(tmp_path)
    new_keys = _keys(tmp_path, after) - _keys(tmp_path, before)
    digest = _snapshot(after).digest
    sha = hashlib.sha256(b"two, edited").hexdigest()
    assert new_keys == {f"workspace:ws:file:b/c.txt:{sha}", f"workspace:ws:{digest}"}
    store = SimulatedIngest()
    connector = _connector(tmp_path)
    store.ingest_all([connector.to_episode(r) for r in before])
    outcomes = store.ingest_all([connector.to_episode(r) for r in after])
    assert outcomes.count(IngestStatus.CREATED) == 2
    assert outcomes.count(IngestStatus.DUPLICATE) == len(after) - 2


def test_snapshot_key_is_the_hash_of_sorted_path_hash_lines(tmp_path: Path) -> None:
    _write(tmp_path, {"b.txt": "b", "a.txt": "a"})
    snapshot = _snapshot(_scan(tmp_path))
    lines = "".join(
        f"{p}:{hashlib.sha256(c.encode()).hexdigest()}\n"
        for p, c in [("a.txt", "a"), ("b.txt", "b")]
    )
    assert snapshot.digest == hashlib.sha256(lines.encode()).hexdigest()
    assert _connector(tmp_path).to_episode(snapshot).payload["file_count"] == 2


def test_touching_a_file_without_changing_it_stores_nothing(tmp_path: Path) -> None:
    _write(tmp_path, {"a.txt": "one"})
    first = _scan(tmp_path)
    os.utime(tmp_path / "a.txt", (1_000_000, 1_000_000))
    store = SimulatedIngest()
    connector = _connector(tmp_path)
    store.ingest_all([connector.to_episode(r) for r in first])
    assert set(store.ingest_all([connector.to_episode(r) for r in _scan(tmp_path)])) == {
        IngestStatus.DUPLICATE
    }


def test_missing_root_stops_the_run(tmp_path: Path) -> None:
    with pytest.raises(StopRun, match="is not a readable directory"):
        _scan(tmp_path / "nope")


file_sets = st.dictionaries(
    st.text(alphabet="abc/\n:", min_size=1, max_size=8),
    st.sampled_from(["0" * 64, "1" * 64, "2" * 64]),
    max_size=8,
)


@given(file_sets)
def test_snapshot_digest_ignores_order(files: dict[str, str]) -> None:
    pairs = list(files.items())
    assert snapshot_digest(tuple(pairs)) == snapshot_digest(tuple(reversed(pairs)))


@given(file_sets, file_sets)
def test_different_file_sets_have_different_digests(a: dict[str, str], b: dict[str, str]) -> None:
    if a != b:
        assert snapshot_digest(tuple(a.items())) != snapshot_digest(tuple(b.items()))
