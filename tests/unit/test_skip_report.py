"""Every run names its skips, and under MEMSYNC_CI=1 a skip CI could avoid fails the run
(tests/skip_report.py), tried on a small suite in a child pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]

SUITE = """
import pytest
from tests.skip_report import skip_unless_ci

def test_runs():
    pass

@pytest.mark.skip(reason="only on Tuesdays")
def test_skipped_one():
    pass

@pytest.mark.skip(reason="only on Tuesdays")
def test_skipped_two():
    pass

def test_needs_a_browser():
    skip_unless_ci("needs a browser")
"""


def run_suite(tmp_path: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_small.py").write_text(SUITE)
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY), "MEMSYNC_CI": "1" if ci else ""}
    return subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "tests.skip_report", "-p", "no:cacheprovider"),
            *("-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        env=environment,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )


def test_a_run_ends_with_its_skipped_tests_grouped_by_reason(tmp_path: Path) -> None:
    result = run_suite(tmp_path, ci=False)

    assert result.returncode == 0, result.stdout
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    start = next(i for i, line in enumerate(lines) if "skipped tests (3), by reason" in line)
    assert lines[start + 1 : start + 6] == [
        "needs a browser (1):",
        "  test_small.py::test_needs_a_browser",
        "only on Tuesdays (2):",
        "  test_small.py::test_skipped_one",
        "  test_small.py::test_skipped_two",
    ]


def test_under_memsync_ci_a_skip_ci_could_avoid_fails_the_run(tmp_path: Path) -> None:
    result = run_suite(tmp_path, ci=True)

    assert result.returncode == 1, result.stdout
    assert "MEMSYNC_CI=1, yet this test would be skipped: needs a browser" in result.stdout
    assert "skipped tests (2), by reason" in result.stdout
