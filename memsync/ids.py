"""Random ids for rows made many at a time.

``uuid.uuid4()`` reads 16 bytes from the system's random source each call, and
``os.urandom`` lets go of the GIL around that system call. Alone that costs nothing, but
beside a thread that computes (a compile's read-ahead, the API's other requests) every
call waits for the GIL back, up to a switch interval: beside a busy thread, 1,000 ids
took 320-409 ms at CPython's 5 ms interval, 7-9 ms drawn in one read (4 ms alone;
``bench.busy_thread_ids``). A batch of rows draws its ids in one read instead.
"""

from __future__ import annotations

import os
import uuid

__all__ = ["random_uuids"]

_UUID_BYTES = 16


def random_uuids(count: int) -> list[uuid.UUID]:
    """``count`` random UUIDs of version 4, as ``uuid.uuid4()`` makes them (122 random
    bits from ``os.urandom``, the version and variant bits set), from one read of the
    random source. Every call returns new ids; ``count`` 0 or less returns none."""
    if count <= 0:
        return []
    drawn = os.urandom(_UUID_BYTES * count)
    return [
        uuid.UUID(bytes=drawn[start : start + _UUID_BYTES], version=4)
        for start in range(0, len(drawn), _UUID_BYTES)
    ]
