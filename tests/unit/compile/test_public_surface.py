"""The compile package's surface and boundaries are what we meant them to be."""

from __future__ import annotations

import ast
from pathlib import Path

import memsync.compile
from memsync.compile import llm

PACKAGE = Path(memsync.compile.__file__).parent
FORBIDDEN = ("memsync.runtime", "sqlalchemy", "fastapi", "apscheduler", "alembic", "psycopg")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_package_exports_exactly_the_engine_surface() -> None:
    assert set(memsync.compile.__all__) == {
        "DEFAULT_POLICIES", "Bundle", "CandidateMemory", "Cardinality", "ChangeSet",
        "ClaimKey", "ClaimRegistry", "ClaimRegistryError", "Compiler", "ConflictPolicy",
        "ConflictStatus", "Defeat", "EpisodeView", "HeuristicCompiler", "MemoryKind",
        "MemoryStatus", "OpenConflict", "PolicyTable", "ProvenanceAddition", "RankedMemory",
        "Reassertion", "SimilarityThresholds", "SourceEvidence", "SourceStanding",
        "StatusChange", "StoredMemory", "Supersession", "SupersessionRule", "apply_changes",
        "assemble_bundle", "conflict_id", "estimate_tokens", "jaccard", "manual_resolution",
        "memory_id", "memory_key", "reconsider_losers", "resolve", "tokens", "unsettled",
        "withdraw_unsupported",
    }  # fmt: skip
    for name in memsync.compile.__all__:
        assert hasattr(memsync.compile, name), name


def test_every_module_declares_its_public_names() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = [
            node
            for node in tree.body
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
        ]
        assert declared, f"{path.name} has no __all__"


def test_compile_never_imports_the_runtime_or_a_database_or_web_stack() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        for name in _imports(path):
            assert not name.startswith(FORBIDDEN), f"{path.name} imports {name}"


def test_only_the_llm_compiler_imports_httpx() -> None:
    importers = {path.name for path in PACKAGE.glob("*.py") if "httpx" in _imports(path)}

    assert importers == {Path(llm.__file__).name}
