"""Connectors: read a source and turn its records into episode drafts.

Connectors know nothing of SQL or of the scheduler; the runtime owns windows,
cursors, batching and run records. This module is the public surface for runner and
connector authors; built-in connectors live in subpackages (``github``, ``slack``, ``tickets``,
``workspace``)
and in ``fake``, and are found through the ``memsync.connectors`` entry-point group.
"""

from __future__ import annotations

from memsync.connectors.base import (
    DEFAULT_STREAM,
    Connector,
    Cursor,
    Deletion,
    KeyPolicy,
    Listing,
    RecordConnector,
    SourceRecord,
    Stream,
    Window,
    fetch_every_stream,
    validate_connector_class,
)
from memsync.connectors.config import (
    ConnectorConfig,
    Duration,
    RetrySettings,
    ScheduleSetting,
    ScheduleSpec,
    SubjectTemplate,
    SubjectTemplateError,
    format_duration,
    parse_duration,
    parse_schedule,
)
from memsync.connectors.errors import (
    ConnectorConfigError,
    ConnectorDefinitionError,
    ConnectorError,
    RateLimited,
    RateLimitExhausted,
    RetryableError,
    SkipRecord,
    StopRun,
)
from memsync.connectors.registry import (
    ENTRY_POINT_GROUP,
    ConnectorInfo,
    ConnectorRegistry,
    load_registry,
)
from memsync.connectors.retry import (
    RequestObserver,
    RequestOutcome,
    Retrier,
    RetryPolicy,
    observing_requests,
    retry_after_from_headers,
)
from memsync.episode import KeyScope, Tombstone

__all__ = [
    "DEFAULT_STREAM",
    "ENTRY_POINT_GROUP",
    "Connector",
    "ConnectorConfig",
    "ConnectorConfigError",
    "ConnectorDefinitionError",
    "ConnectorError",
    "ConnectorInfo",
    "ConnectorRegistry",
    "Cursor",
    "Deletion",
    "Duration",
    "KeyPolicy",
    "KeyScope",
    "Listing",
    "RateLimitExhausted",
    "RateLimited",
    "RecordConnector",
    "RequestObserver",
    "RequestOutcome",
    "Retrier",
    "RetryPolicy",
    "RetrySettings",
    "RetryableError",
    "ScheduleSetting",
    "ScheduleSpec",
    "SkipRecord",
    "SourceRecord",
    "StopRun",
    "Stream",
    "SubjectTemplate",
    "SubjectTemplateError",
    "Tombstone",
    "Window",
    "fetch_every_stream",
    "format_duration",
    "load_registry",
    "observing_requests",
    "parse_duration",
    "parse_schedule",
    "retry_after_from_headers",
    "validate_connector_class",
]
