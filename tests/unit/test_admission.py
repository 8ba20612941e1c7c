"""RequestAdmission: how many requests are worked on at once, in what order the others
are let in, what never waits, and that a slow upload holds no place. Driven through
httpx's ASGI transport against a small application that holds each request until the
test lets it go; nothing sleeps, every wait polls a condition with a deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from functools import partial

import anyio
import httpx
from starlette.types import Receive, Scope, Send

from memsync.runtime.app.api.admission import RequestAdmission

HELD = "/held"


class HoldingApp:
    """Reads each request's whole body, then answers it, at once for any path but those
    starting with ``/held``, which wait until :attr:`release` is set."""

    def __init__(self) -> None:
        self.inside = 0
        self.most_inside = 0
        self.entered: list[str] = []
        self.release = anyio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.entered.append(scope["path"])
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        if scope["path"].startswith(HELD):
            await self.release.wait()
        self.inside -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


async def until(condition: Callable[[], bool]) -> None:
    """Let the other tasks run until ``condition`` holds (at most 5 s)."""
    with anyio.fail_after(5):
        while not condition():
            await anyio.sleep(0)


def arrived(app: HoldingApp, admission: RequestAdmission, count: int) -> bool:
    return app.inside + admission.waiting == count


def test_at_most_limit_requests_are_inside_the_others_enter_in_arrival_order() -> None:
    app = HoldingApp()
    admission = RequestAdmission(app, limit=2)

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=admission)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
            anyio.create_task_group() as requests,
        ):
            for number in range(5):
                requests.start_soon(partial(client.post, f"{HELD}/{number}", content=b"x"))
                # Each arrives before the next is sent: two inside, then the queue.
                await until(partial(arrived, app, admission, number + 1))
            assert (app.inside, admission.waiting) == (2, 3)

            # However full the process, probes and the metrics scrape are answered.
            for probe in ["/healthz", "/readyz", "/metrics"]:
                assert (await client.get(probe)).status_code == 200
            assert admission.waiting == 3

            app.release.set()
        assert app.most_inside == 2 + 1  # the held two, and one probe beside them

    anyio.run(scenario)
    held = [path for path in app.entered if path.startswith(HELD)]
    assert held == [f"{HELD}/{number}" for number in range(5)]


def test_a_slow_upload_holds_no_place_and_its_body_arrives_whole() -> None:
    app = HoldingApp()
    admission = RequestAdmission(app, limit=1)
    uploaded = anyio.Event()

    async def slow_body() -> AsyncIterator[bytes]:
        yield b"first part, "
        await uploaded.wait()
        yield b"second part"

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=admission)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            async with anyio.create_task_group() as requests:
                answers: dict[str, bytes] = {}

                async def upload() -> None:
                    answers["slow"] = (await client.post("/slow", content=slow_body())).content

                requests.start_soon(upload)
                # The slow upload is still sending while another request is answered.
                with anyio.fail_after(5):
                    fast = await client.post("/fast", content=b"quick")
                assert fast.content == b"quick"
                assert "slow" not in answers
                uploaded.set()
            assert answers["slow"] == b"first part, second part"

    anyio.run(scenario)
    assert app.entered == ["/fast", "/slow"]
