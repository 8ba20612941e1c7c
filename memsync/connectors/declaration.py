"""What the registry knows of a connector type before it imports the implementation.

A connector's class attributes (``type``, ``key_policy``, ``key_rationale``,
``config_model``, ``example_key``, ``subject_fields``, ``deletions``) are all that
validating a configuration and listing the installed types read; the class itself,
with its record types, parsing and client code, is needed only to build a connector.
A :class:`ConnectorDeclaration` states those attributes in a light module beside the
config model and names the class by import path, so ``memsync config validate`` and
``memsync connectors list`` never import a connector's implementation. The class
takes its attributes from the declaration (``class MyConnector(Connector[...],
declaration=MINE)``), so they are written once.

An entry point of the ``memsync.connectors`` group names either a declaration or, as
before, the class itself.
"""

from __future__ import annotations

import builtins
import enum
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memsync.connectors.errors import ConnectorDefinitionError

if TYPE_CHECKING:
    from memsync.connectors.base import Connector
    from memsync.connectors.config import ConnectorConfig

__all__ = ["ConnectorDeclaration", "KeyPolicy", "check_declared"]


class KeyPolicy(enum.StrEnum):
    """What "the same event" means for a source.

    ``identity``: records have a stable id that survives edits; the key is built from
    ids, so an edit is a new *revision* of the same episode. ``content``: records have
    no identity apart from their content (a workspace scan); the key includes a content
    hash, so any change is a new episode and an unchanged re-read is a duplicate.
    """

    IDENTITY = "identity"
    CONTENT = "content"


def check_declared(where: str, declared: Any) -> None:
    """Refuse a connector class or declaration whose declared attributes are missing or
    wrong; :class:`ConnectorDefinitionError` names ``where`` and the attribute."""
    from memsync.connectors.config import ConnectorConfig

    connector_type = getattr(declared, "type", None)
    if not isinstance(connector_type, str) or not connector_type.strip():
        raise ConnectorDefinitionError(f"{where} must set a non-empty class attribute 'type'")
    if not isinstance(getattr(declared, "key_policy", None), KeyPolicy):
        raise ConnectorDefinitionError(f"{where} must set 'key_policy' to a KeyPolicy")
    rationale = getattr(declared, "key_rationale", None)
    if not isinstance(rationale, str) or not rationale.strip():
        raise ConnectorDefinitionError(
            f"{where} (type '{connector_type}') has an empty key_rationale: say what "
            "'the same event' means for this source and why the key is built as it is"
        )
    config_model = getattr(declared, "config_model", None)
    if not (isinstance(config_model, type) and issubclass(config_model, ConnectorConfig)):
        raise ConnectorDefinitionError(
            f"{where} must set 'config_model' to a ConnectorConfig subclass"
        )
    example = getattr(declared, "example_key", None)
    if not isinstance(example, str) or not example.startswith(f"{connector_type}:"):
        raise ConnectorDefinitionError(
            f"{where} must set 'example_key' to a key starting with '{connector_type}:'"
        )


@dataclass(frozen=True, slots=True)
class ConnectorDeclaration:
    """A connector type's declared attributes, and where its class is.

    The fields mean what the :class:`~memsync.connectors.base.Connector` class
    attributes of the same names mean; ``implementation`` is the class as
    ``"package.module:ClassName"``, imported by :meth:`load` when a connector is built.
    """

    type: str
    key_policy: KeyPolicy
    key_rationale: str
    # builtins.type: inside this class body, ``type`` is the field above.
    config_model: builtins.type[ConnectorConfig]
    example_key: str
    implementation: str
    subject_fields: frozenset[str] = frozenset()
    deletions: str = ""
    #: The pushed deliveries its webhook receiver takes, in a few words; empty: it has
    #: none, and a ``webhook:`` in its configuration is refused.
    webhooks: str = ""

    def load(self) -> builtins.type[Connector[Any, Any]]:
        """The class named by ``implementation`` (imported here if it was not yet);
        refused (:class:`ConnectorDefinitionError`) unless it is a valid connector class
        that took its attributes from this declaration."""
        from memsync.connectors.base import Connector, validate_connector_class

        module_name, _, class_name = self.implementation.partition(":")
        where = f"connector type '{self.type}' (implementation {self.implementation})"
        try:
            loaded = getattr(importlib.import_module(module_name), class_name)
        except Exception as error:  # whatever the module raises, as for an entry point
            raise ConnectorDefinitionError(f"{where} failed to import: {error}") from error
        if not (isinstance(loaded, type) and issubclass(loaded, Connector)):
            raise ConnectorDefinitionError(f"{where} does not name a Connector subclass")
        if getattr(loaded, "declaration", None) is not self:
            raise ConnectorDefinitionError(
                f"{where} must take its attributes from the declaration "
                "(class ...(Connector[...], declaration=...))"
            )
        validate_connector_class(loaded)
        return loaded
