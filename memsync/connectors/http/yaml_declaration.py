"""The ``http`` connector type as the registry knows it: a source declared in a YAML file
(:mod:`memsync.connectors.http.yaml_form`), configured like any connector::

    - name: desk
      type: http
      declaration: config/desk.http.yaml   # relative to the working directory
      token: ${DESK_TOKEN}
      values: {account: acme}              # read by templates as {config.values[account]}
      subject: "ticket:{ticket_id}"

The declaration file is read and validated when the configuration is, and every mistake
in it is reported naming the file and the field.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PlainSerializer, PlainValidator, SecretStr

from memsync.connectors.config import ConnectorConfig, Duration
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy
from memsync.connectors.http.declarations import HttpSource
from memsync.connectors.http.yaml_form import load_http_source

__all__ = ["HTTP", "HttpYamlConfig", "SourceFile"]


class SourceFile:
    """A YAML declaration file and the source it declares (read once, when the
    configuration is validated)."""

    def __init__(self, path: Path, source: HttpSource) -> None:
        self.path = path
        self.source = source

    def __repr__(self) -> str:
        return f"SourceFile({str(self.path)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SourceFile) and (other.path, other.source) == (
            self.path,
            self.source,
        )

    def __hash__(self) -> int:
        return hash(self.path)


def _load(value: object) -> SourceFile:
    if isinstance(value, SourceFile):
        return value
    if not isinstance(value, str | Path):
        raise ValueError(f"declaration must be the path of a YAML file, got {value!r}")
    path = Path(value)
    # HttpYamlError's message names the file and each field already.
    return SourceFile(path, load_http_source(path))


SourceFileValue = Annotated[
    SourceFile, PlainValidator(_load), PlainSerializer(lambda file: str(file.path))
]


class HttpYamlConfig(ConnectorConfig):
    """An ``http`` connector: ``declaration`` (the YAML file), the credentials its auth
    reads (``token``, a ``SecretStr``; ``username`` for basic auth) and ``values``, the
    settings its templates read (``{config.values[account]}``)."""

    type: Literal["http"] = "http"
    declaration: SourceFileValue
    token: SecretStr | None = None
    username: str | None = None
    values: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = timedelta(seconds=30)

    @property
    def subject_fields_offered(self) -> frozenset[str]:
        """The subject fields the declaration's streams name (the registry checks the
        subject template against these and the type's own)."""
        streams = list(self.declaration.source.streams)
        offered: set[str] = set()
        while streams:
            stream = streams.pop()
            offered |= set(stream.subject_fields)
            streams.extend(stream.children)
        return frozenset(offered)


HTTP = ConnectorDeclaration(
    type="http",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale=(
        "Each stream's key template, in its YAML declaration, builds the key from the "
        "source's ids (after 'http:', a namespace of the declaration's choosing): an edited "
        "record keeps its key and becomes a revision, an unchanged re-read stores nothing."
    ),
    config_model=HttpYamlConfig,
    example_key="http:desk:acme:ticket:7:note:3",
    implementation="memsync.connectors.http.yaml_connector:YamlHttpConnector",
    subject_fields=frozenset({"stream", "id", "parent_id"}),
    deletions=(
        "What the YAML declaration says: a status or archive field (deleted_when), a 404 "
        "or 410 on a child read (on_not_found: parent_gone), absence from a full re-read "
        "(absent_from_full_read)."
    ),
)
