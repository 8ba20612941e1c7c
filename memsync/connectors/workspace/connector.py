"""The workspace connector: one episode per file version, one per scan (snapshot)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

from memsync.connectors.base import Cursor, Deletion, Listing, RecordConnector, Window
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import StopRun
from memsync.connectors.workspace._ignore import (
    GlobFilter,
    IgnoreFile,
    is_ignored,
    read_ignore_file,
)
from memsync.connectors.workspace.declaration import WORKSPACE, WorkspaceConfig
from memsync.episode import JSONObject, KeyScope

_CHUNK_BYTES = 64 * 1024


def files_prefix(workspace_id: str) -> str:
    """What the keys of a workspace's file versions start with."""
    return f"workspace:{workspace_id}:file:"


@dataclass(frozen=True, slots=True)
class _WorkspaceRecord:
    """What files and snapshots share: the workspace they were scanned in, the
    namespace of their keys and their whole subject."""

    workspace_id: str

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return {"workspace_id": self.workspace_id}


@dataclass(frozen=True, slots=True)
class WorkspaceFile(_WorkspaceRecord):
    """One text file as scanned: its path (POSIX, relative to the root) and content."""

    path: str
    size: int
    sha256: str
    modified_at: datetime
    content: str
    truncated: bool

    episode_type: ClassVar[str] = "workspace.file"

    def key(self) -> str:
        """``workspace:{id}:file:{path}:{sha256}``: any change of content is a new key."""
        return f"{files_prefix(self.workspace_id)}{self.path}:{self.sha256}"

    @property
    def position(self) -> datetime:
        return self.modified_at

    @property
    def occurred_at(self) -> datetime:
        return self.modified_at

    def payload(self) -> JSONObject:
        # Only values determined by the key: the mtime lives in occurred_at, which is
        # not hashed, so touching a file stores nothing new.
        return {
            "path": self.path,
            "size": self.size,
            "sha256": self.sha256,
            "content": self.content,
            "truncated": self.truncated,
        }


@dataclass(frozen=True, slots=True)
class WorkspaceSnapshot(_WorkspaceRecord):
    """The set of files one scan found, as sorted ``(path, sha256)`` pairs.

    ``skipped`` lists ``(path, reason)`` for files left out (binary, oversize,
    unreadable); it is informative only and not part of the episode, because a
    snapshot's payload must depend on its key alone.
    """

    files: tuple[tuple[str, str], ...]
    scanned_at: datetime
    skipped: tuple[tuple[str, str], ...] = ()

    episode_type: ClassVar[str] = "workspace.snapshot"

    @property
    def digest(self) -> str:
        return snapshot_digest(self.files)

    def key(self) -> str:
        """``workspace:{id}:{digest}``: an unchanged tree scans to the same key."""
        return f"workspace:{self.workspace_id}:{self.digest}"

    @property
    def position(self) -> datetime:
        return self.scanned_at

    @property
    def occurred_at(self) -> datetime:
        return self.scanned_at

    def payload(self) -> JSONObject:
        # The scan time lives in occurred_at: a payload of the key alone.
        return {
            "digest": self.digest,
            "file_count": len(self.files),
            "files": [{"path": path, "sha256": file_hash} for path, file_hash in self.files],
        }


WorkspaceRecord = WorkspaceFile | WorkspaceSnapshot


@dataclass(frozen=True, slots=True)
class FilesListing(Listing):
    """Every file of a complete scan: a stored file version is gone when its *path* is
    absent. Earlier versions of a file that is still there stay as they were seen (the
    content key policy); every version of a removed file goes."""

    paths: frozenset[str] = frozenset()

    def gone(self, key: str) -> bool:
        path, _, _ = key.removeprefix(self.scope.prefix).rpartition(":")
        return path not in self.paths


def display_name(name: str) -> str:
    """A file name as memsync stores it: the name itself when it is UTF-8, else each
    byte that is not valid UTF-8 written as ``\\xNN`` (Python's ``backslashreplace``).

    POSIX names are bytes; ``os.scandir`` hands undecodable ones over with surrogate
    escapes, which no store can hold. The written form keeps every byte readable and
    distinct, so such a file is synced like any other.
    """
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return name


def _escape(path: str) -> str:
    # Keeps one line per file even for the (legal, rare) newline in a file name.
    return path.replace("\\", "\\\\").replace("\n", "\\n")


def snapshot_digest(files: tuple[tuple[str, str], ...]) -> str:
    """SHA-256 of the sorted ``path:sha256`` lines, one per file, each ending in ``\\n``."""
    hasher = hashlib.sha256()
    for path, file_hash in sorted(files):
        hasher.update(f"{_escape(path)}:{file_hash}\n".encode())
    return hasher.hexdigest()


@dataclass(frozen=True, slots=True)
class _Scanned:
    record: WorkspaceFile | None
    skip_reason: str | None = None


class WorkspaceConnector(RecordConnector[WorkspaceConfig, WorkspaceRecord], declaration=WORKSPACE):
    """Files of a directory tree (IDE workspace, repository checkout) and scan snapshots.

    A scan is always complete: the window is not used to filter, because a snapshot is
    only meaningful over every file, and unchanged files cost nothing at ingest (their
    key already exists). Streams the tree: ``os.scandir``, files hashed in chunks; only
    the ``(path, hash)`` list of the snapshot is held in memory. Symbolic links are not
    followed (they could loop or leave the workspace); ``.git`` is never entered.
    """

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[WorkspaceRecord | Deletion]:
        """Yield a :class:`WorkspaceFile` per in-scope text file, one snapshot, then the
        listing of every file found (skipped files count as present).

        Repeats: an unchanged tree yields the same records (same keys, same payloads).
        A missing or unreadable root raises :class:`StopRun`; an unreadable directory
        below it makes the scan incomplete, and no listing is yielded.
        """
        root = self.config.root
        if not root.is_dir():
            raise StopRun(f"workspace '{self.name}': root {root} is not a readable directory")
        globs = GlobFilter.from_globs(self.config.include, self.config.exclude)
        found: list[tuple[str, str]] = []
        skipped: list[tuple[str, str]] = []
        unread: list[str] = []
        for path, entry in self._walk(root, "", (), globs, unread):
            scanned = self._scan_file(path, entry)
            if scanned.record is None:
                skipped.append((path, scanned.skip_reason or "skipped"))
                continue
            found.append((path, scanned.record.sha256))
            yield scanned.record
        snapshot = WorkspaceSnapshot(
            workspace_id=self.config.effective_workspace_id,
            files=tuple(sorted(found)),
            scanned_at=window.end,
            skipped=tuple(skipped),
        )
        yield snapshot
        if not unread:
            prefix = files_prefix(snapshot.workspace_id)
            yield FilesListing(
                KeyScope(prefix, episode_types=frozenset({WorkspaceFile.episode_type})),
                frozenset(f"{prefix}{path}:{file_hash}" for path, file_hash in found),
                paths=frozenset(path for path, _ in (*found, *skipped)),
            )

    def _walk(
        self,
        directory: Path,
        relative: str,
        rules: tuple[IgnoreFile, ...],
        globs: GlobFilter,
        unread: list[str],
    ) -> Iterator[tuple[str, os.DirEntry[str]]]:
        # ``directory`` is the real path, ``relative`` the stored (display) one.
        if self.config.respect_gitignore:
            ignore_file = read_ignore_file(directory, relative)
            if ignore_file is not None:
                rules = (*rules, ignore_file)
        try:
            with os.scandir(directory) as iterator:
                # Sorted so that records come out in the same order on every scan.
                entries = sorted(iterator, key=lambda entry: entry.name)
        except PermissionError:
            unread.append(relative)
            return
        for entry in entries:
            name = display_name(entry.name)
            path = f"{relative}/{name}" if relative else name
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name == ".git" or is_ignored(rules, path, is_dir=True):
                    continue
                if globs.enters(path):
                    yield from self._walk(Path(entry.path), path, rules, globs, unread)
            elif (
                entry.is_file(follow_symlinks=False)
                and not is_ignored(rules, path, is_dir=False)
                and globs.keeps(path)
            ):
                yield path, entry

    def _scan_file(self, path: str, entry: os.DirEntry[str]) -> _Scanned:
        try:
            stat = entry.stat(follow_symlinks=False)
            if stat.st_size > self.config.max_file_bytes:
                return _Scanned(None, f"oversize ({stat.st_size} > {self.config.max_file_bytes})")
            hasher = hashlib.sha256()
            head = bytearray()
            size = 0
            with open(entry.path, "rb") as handle:
                while chunk := handle.read(_CHUNK_BYTES):
                    # Git looks for a NUL in the first 8000 bytes only; the whole file
                    # is read for its hash anyway, and a NUL anywhere would reach the
                    # payload, which no store can hold as text.
                    if b"\0" in chunk:
                        return _Scanned(None, "binary")
                    size += len(chunk)
                    if size > self.config.max_file_bytes:
                        # Grew after stat: treat like any oversize file.
                        return _Scanned(None, "oversize (grew while scanning)")
                    hasher.update(chunk)
                    room = self.config.max_content_bytes - len(head)
                    if room > 0:
                        head += chunk[:room]
        except OSError as error:
            return _Scanned(None, f"unreadable ({error.strerror or error})")
        return _Scanned(
            WorkspaceFile(
                workspace_id=self.config.effective_workspace_id,
                path=path,
                size=size,
                sha256=hasher.hexdigest(),
                modified_at=datetime.fromtimestamp(stat.st_mtime, UTC),
                # A cut in the middle of a UTF-8 sequence becomes one replacement char.
                content=bytes(head).decode("utf-8", errors="replace"),
                truncated=size > len(head),
            )
        )
