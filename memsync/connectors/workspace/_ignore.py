"""Which paths of a workspace are out of scope: ``.gitignore`` files and config globs.

Git's rules, through ``pathspec``'s ``GitIgnoreSpec`` (negation ``!``, dir-only ``/``
suffix, anchored patterns, ``**``): a ``.gitignore`` applies to its own directory and
below, patterns in deeper files override shallower ones, and within one file the last
matching pattern wins. An ignored directory is never entered, so (as in git) nothing
inside it can be re-included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Imported by the scan that needs it: listing or validating connectors does not.
    from pathspec import GitIgnoreSpec

__all__ = ["GlobFilter", "IgnoreFile", "is_ignored", "read_ignore_file"]


@dataclass(frozen=True, slots=True)
class IgnoreFile:
    """The patterns of one ``.gitignore``; ``base`` is its directory relative to the root
    (``""`` for the root itself), in POSIX form."""

    base: str
    spec: GitIgnoreSpec


def read_ignore_file(directory: Path, base: str) -> IgnoreFile | None:
    """Parse ``directory/.gitignore`` if there is one (unreadable files count as absent)."""
    try:
        text = (directory / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        return None
    from pathspec import GitIgnoreSpec

    return IgnoreFile(base=base, spec=GitIgnoreSpec.from_lines(text.splitlines()))


def is_ignored(rules: Sequence[IgnoreFile], path: str, *, is_dir: bool) -> bool:
    """Whether ``path`` (POSIX, relative to the root) is ignored by ``rules``.

    ``rules`` are ordered root first; the deepest file with a matching pattern decides.
    """
    for rule in reversed(rules):
        relative = path[len(rule.base) + 1 :] if rule.base else path
        # A trailing slash is how a dir-only pattern ("build/") recognises a directory.
        decision = rule.spec.check_file(relative + "/" if is_dir else relative).include
        if decision is not None:
            return decision
    return False


@dataclass(frozen=True, slots=True)
class GlobFilter:
    """Configured ``include`` / ``exclude`` globs (gitignore syntax, relative to the root).

    A file is in scope when it matches some ``include`` glob (or there are none) and no
    ``exclude`` glob. Excluded directories are not entered.
    """

    include: GitIgnoreSpec | None
    exclude: GitIgnoreSpec | None

    @classmethod
    def from_globs(cls, include: Sequence[str], exclude: Sequence[str]) -> GlobFilter:
        from pathspec import GitIgnoreSpec

        return cls(
            include=GitIgnoreSpec.from_lines(include) if include else None,
            exclude=GitIgnoreSpec.from_lines(exclude) if exclude else None,
        )

    def enters(self, directory: str) -> bool:
        return self.exclude is None or not self.exclude.match_file(directory + "/")

    def keeps(self, path: str) -> bool:
        if self.exclude is not None and self.exclude.match_file(path):
            return False
        return self.include is None or self.include.match_file(path)
