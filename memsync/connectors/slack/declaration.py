"""The ``slack`` connector type as the registry knows it without importing the connector:
its configuration model and its declaration (see :mod:`memsync.connectors.declaration`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, SecretStr

from memsync.connectors.config import ConnectorConfig, Duration
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy

__all__ = ["SLACK", "SlackConfig"]

_PUBLIC_API = "https://slack.com/api/"


class SlackConfig(ConnectorConfig):
    """Credentials and channels of one Slack connector instance.

    ``token`` (a bot token ``xoxb-…``; a ``SecretStr``, never in reprs, logs or
    messages) needs ``channels:history`` and ``channels:read`` (``groups:*`` for private
    channels). ``channels`` are ids (``C024BE91L``) or names (``general``,
    ``#general``), names resolved through ``conversations.list``. ``lookback`` is how
    far back from now the history is scanned for edits and new thread replies (from
    the window start when it lies further back; a scan longer than a run's budget goes
    on in the next runs from where it stopped); ``overlap`` re-reads the edge of the
    previous window as usual.
    """

    type: Literal["slack"] = "slack"
    token: SecretStr
    channels: list[str] = Field(min_length=1)
    lookback: Duration = timedelta(days=7)
    include_threads: bool = True
    page_size: int = Field(default=200, ge=1, le=999)
    timeout: Duration = timedelta(seconds=30)

    @property
    def api_base(self) -> str:
        return f"{self.base_url}/" if self.base_url else _PUBLIC_API

    def stream_names(self) -> tuple[str, ...]:
        """One stream per channel, named as configured without ``#``, in the configured
        order, a channel configured twice read once."""
        return tuple(dict.fromkeys(name.removeprefix("#") for name in self.channels))


SLACK = ConnectorDeclaration(
    type="slack",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale=(
        "A Slack message is identified by its channel and its ts, which Slack assigns once "
        "and never changes (an edit adds edited.ts, a reply has its own ts), so the key is "
        "team, channel and ts, never the text: an edited message is a new revision of the "
        "same episode and re-reading an unchanged one stores nothing."
    ),
    config_model=SlackConfig,
    example_key="slack:T024BE7LD:C123ABC:1712345678.000200",
    implementation="memsync.connectors.slack.connector:SlackConnector",
    webhooks="Events API message, message_changed and message_deleted (X-Slack-Signature)",
    subject_fields=frozenset({"team", "channel", "channel_name", "user", "thread_ts"}),
    deletions=(
        "A top-level message absent from a complete re-read of the channel's history over "
        "the window and the lookback before it that held it before (or of the windows of "
        "that re-read a run finished, when it takes several runs), and messages the "
        "history shows as 'message_deleted' or 'tombstone'. A deleted reply is seen only "
        "as a 'message_deleted' item, and nothing older than the lookback is re-checked."
    ),
)
