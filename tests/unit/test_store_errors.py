"""Which database errors mean "the store cannot be used just now" (503, retry) and which
mean the statement itself failed: Citus' reports of a lost worker and of a shard's
constraint violation, told apart by their message as Citus words it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from memsync.runtime.storage.engine import is_store_unavailable, lost_a_node
from memsync.runtime.storage.tables import _relayed_constraint_violation


@dataclass
class Diagnostic:
    message_primary: str | None


class ServerError(Exception):
    """What psycopg raises for an error the server sent: a SQLSTATE and its diagnostic."""

    def __init__(self, sqlstate: str, message: str | None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.diag = Diagnostic(message)


def internal(message: str | None, sqlstate: str = "XX000") -> sa.exc.InternalError:
    return sa.exc.InternalError("SELECT 1", None, ServerError(sqlstate, message))


@pytest.mark.parametrize(
    "message",
    [
        "failure on connection marked as essential: 127.0.0.1:9702",
        "connection to the remote node postgres@10.0.0.7:5432 failed with the following "
        "error: Connection refused",
    ],
)
def test_a_lost_citus_worker_makes_the_store_unavailable(message: str) -> None:
    error = internal(message)
    assert lost_a_node(error)
    assert is_store_unavailable(error)


@pytest.mark.parametrize(
    "message",
    [
        "could not run distributed query with FOR UPDATE/SHARE commands",
        "division by zero",
        None,
    ],
)
def test_other_internal_errors_are_not_an_outage(message: str | None) -> None:
    error = internal(message)
    assert not lost_a_node(error)
    assert not is_store_unavailable(error)


def test_a_store_that_does_not_answer_is_unavailable_without_a_node() -> None:
    refused = sa.exc.OperationalError("SELECT 1", None, ServerError("08006", "refused"))
    assert is_store_unavailable(refused)
    assert not lost_a_node(refused)


@pytest.mark.parametrize(
    ("sqlstate", "message", "relayed"),
    [
        ("XX000", 'duplicate key value violates unique constraint "pk_memories_102008"', True),
        (
            "XX000",
            'insert or update on table "memory_sources_102040" violates foreign '
            'key constraint "fk_memory_sources"',
            True,
        ),
        ("XX000", "failure on connection marked as essential: 127.0.0.1:9702", False),
        ("23505", 'duplicate key value violates unique constraint "pk_memories"', False),
    ],
)
def test_a_constraint_violation_citus_relays_from_copy_is_recognised(
    sqlstate: str, message: str, relayed: bool
) -> None:
    assert _relayed_constraint_violation(ServerError(sqlstate, message)) is relayed
