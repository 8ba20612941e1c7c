"""Runtime: the stages of the data flow, each owning its SQL, and the application.

Read top-down, in flow order:

- :mod:`.storage` — the schema, engines, migrations, table handles and shared predicates;
- :mod:`.sync` — windows, cursors, run records and backfills around a connector;
- :mod:`.ingest` — the one path by which episodes enter the store;
- :mod:`.compiling` — episodes into memories, as a set, and what triggers it;
- :mod:`.reading` — episodes, memories, context bundles and the inspector;
- :mod:`.jobs` — a generic durable queue, workers and schedules;
- :mod:`.app` — configuration, the composition root, the HTTP API and the CLI.
"""
