"""Runtime: storage, ingest, jobs, scheduling, the HTTP API and the CLI."""

from __future__ import annotations
