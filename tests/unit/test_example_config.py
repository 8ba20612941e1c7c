"""The documented example configuration loads, and every connector in it validates."""

from __future__ import annotations

from pathlib import Path

from memsync.connectors import load_registry
from memsync.runtime.app.config import load_settings

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "memsync.example.yaml"


def test_the_example_configuration_is_valid() -> None:
    settings = load_settings(EXAMPLE, environ={"ZENDESK_TOKEN": "example-token"})

    configs = load_registry().parse_configs(settings.connectors, source=str(EXAMPLE))

    assert [config.type for config in configs] == ["workspace", "zendesk"]
    assert all(config.tenant == "default" for config in configs)
    assert "connectors[1].token" in settings.secret_paths
