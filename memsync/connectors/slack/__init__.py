"""The Slack connector (slack-sdk): channel messages and thread replies."""

from __future__ import annotations

from memsync.connectors.slack.connector import (
    CONTENTLESS_SUBTYPES,
    SlackConfig,
    SlackConnector,
    SlackMessage,
    slack_ts_to_datetime,
)

__all__ = [
    "CONTENTLESS_SUBTYPES",
    "SlackConfig",
    "SlackConnector",
    "SlackMessage",
    "slack_ts_to_datetime",
]
