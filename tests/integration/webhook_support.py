"""What the webhook integration tests (``test_webhooks_*.py``) share: the store's rows of
a key, the delivery counter, the answers to deliveries taken or refused, and a re-read
made now to be ingested after a change pushed."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient

from memsync.connectors import ConnectorConfig, Listing, Progress, Tombstone, Window
from memsync.episode import EpisodeDraft
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store, tables


def stored(store: Store, key: str) -> list[tuple[int, Any, Any]]:
    """The ``(revision, payload, deleted_at)`` of the episode with idempotency key
    ``key``: one tuple when it is stored (a tombstone too), none when it is not."""
    episodes = tables.episodes
    query = sa.select(episodes.c.revision, episodes.c.payload, episodes.c.deleted_at).where(
        episodes.c.idempotency_key == key
    )
    with store.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(query)]


def every_key(store: Store) -> list[str]:
    """The idempotency keys of every stored episode (tombstones too), sorted."""
    with store.engine.connect() as connection:
        return sorted(
            connection.execute(sa.select(tables.episodes.c.idempotency_key)).scalars().all()
        )


def counted(services: Services, connector: str, outcome: str) -> float:
    """How many deliveries to ``connector`` (``""`` for a name no connector has) ended
    in ``outcome``, as ``memsync_webhook_deliveries_total`` says; 0.0 for none."""
    value = services.metrics.registry.get_sample_value(
        "memsync_webhook_deliveries_total", {"connector": connector, "outcome": outcome}
    )
    return value or 0.0


def accepted(client: TestClient, path: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
    """The JSON answer to ``body`` POSTed to ``path`` with ``headers``, which must be
    taken (200): its ``outcome``, ``episodes`` and ``event``."""
    response = client.post(path, content=body, headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def refused(
    client: TestClient, path: str, body: bytes, headers: dict[str, str], status: int
) -> str:
    """Why ``body`` POSTed to ``path`` with ``headers`` is refused with ``status``: the
    outcome its error details name, else the error's code. Asserts the error has a
    message saying why, for the person reading the vendor's delivery log."""
    response = client.post(path, content=body, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    return str(error.get("details", {}).get("outcome", error["code"]))


def read_now(
    services: Services, config: ConnectorConfig, window: Window, *kinds: type
) -> list[EpisodeDraft]:
    """The drafts of a re-read of ``config``'s connector over ``window`` made now and not
    ingested: one per record the fetch yields (only records of ``kinds``, when given),
    none for the tombstones, listings and progress marks it yields besides. Ingested
    after a change is pushed, they are a re-read that read before the change."""
    with services.connector_instance(config) as connector:
        return [
            connector.to_episode(item)
            for item in connector.fetch(window, None)
            if not isinstance(item, Tombstone | Listing | Progress)
            and (not kinds or isinstance(item, kinds))
        ]
