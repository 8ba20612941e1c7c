"""The labelling rule a connector's ``labels:`` and the compile settings' ``labels:``
write.

Apart from :mod:`.config` (which offers it too) because the compile settings validate
against it: reading a configuration then builds none of the connectors' config models,
which a command that reads no connector (``memsync runs list``) never needs
(docs/benchmarks.md, "CLI start-up").
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LabelRuleSetting"]


class LabelRuleSetting(BaseModel):
    """A connector's labelling rule: a record whose episode matches every entry of
    ``when`` gets the sensitivity labels ``add``.

    ``when`` maps a dotted path in the episode (``type``, ``source``, ``subject_id``,
    ``session_id``, ``idempotency_key``, ``payload.…``, ``metadata.…``, ``fields.…``:
    the record's subject fields) to the value it must have; a string is a glob
    (``docs/hr/*``). E.g. ``{when: {fields.channel: C0PRIVATE1}, add:
    [confidential]}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    when: dict[str, Any] = Field(min_length=1)
    add: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        min_length=1, max_length=32
    )
