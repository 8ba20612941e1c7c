"""A Slack sync in its own process, for the crash test of the overlap re-read:
``python -m tests.e2e.slack_driver STORE_URL FAKE_BASE_URL NOW``.

It syncs the busy week (:mod:`tests.slack_week`) from the fake Slack at ``FAKE_BASE_URL``
with the run's clock at ``NOW`` (ISO 8601). The test holds one of the fake's answers
back and kills this process with SIGKILL while it waits for it.
"""

from __future__ import annotations

import argparse
from datetime import datetime

from memsync.clock import FakeClock
from memsync.connectors.slack import SlackConnector
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import SyncRepository, SyncRunner
from tests.slack_week import week_config

BATCH = 50


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store_url")
    parser.add_argument("base_url")
    parser.add_argument("now", type=datetime.fromisoformat)
    arguments = parser.parse_args()
    clock = FakeClock(arguments.now)
    store = Store.from_url(arguments.store_url)
    runner = SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, batch_size=BATCH
    )
    runner.sync(SlackConnector(week_config(arguments.base_url), clock=clock))


if __name__ == "__main__":
    main()
