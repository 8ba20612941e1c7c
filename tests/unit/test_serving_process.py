"""prepare_serving_process: what a process of ``memsync serve`` sets before it serves.
The process's settings are put back after the test (the suite runs in one process)."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from memsync.runtime.app.api.server import (
    SWITCH_INTERVAL_SECONDS,
    YOUNG_COLLECTION_THRESHOLD,
    prepare_serving_process,
)


@pytest.fixture
def process_settings_restored() -> Iterator[None]:
    threshold, interval = gc.get_threshold(), sys.getswitchinterval()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        sys.setswitchinterval(interval)


@pytest.mark.usefixtures("process_settings_restored")
def test_a_serving_process_collects_young_objects_less_often_and_freezes_its_start() -> None:
    _, middle, old = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    prepare_serving_process()
    assert gc.get_threshold() == (YOUNG_COLLECTION_THRESHOLD, middle, old)
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_SECONDS)
    assert gc.get_freeze_count() > frozen_before
