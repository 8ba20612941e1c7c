"""The ``http`` connector: reads the source its configuration's YAML file declares."""

from __future__ import annotations

from memsync.connectors.http.connector import HttpConnector, HttpRecord
from memsync.connectors.http.declarations import HttpSource
from memsync.connectors.http.yaml_declaration import HTTP, HttpYamlConfig

__all__ = ["YamlHttpConnector"]


class YamlHttpConnector(HttpConnector[HttpYamlConfig, HttpRecord], declaration=HTTP):
    """An :class:`HttpConnector` whose source is its configuration's ``declaration``.
    Records offer the subject fields ``stream``, ``id`` and ``parent_id`` besides what
    the declaration's ``subject_fields`` name (those are not checked when the config
    loads)."""

    def source_of(self, config: HttpYamlConfig) -> HttpSource:
        return config.declaration.source
