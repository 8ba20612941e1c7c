"""The admin page over HTTP: sign-in, tenant scope, CSRF on every change, retry.

The browser test (tests/e2e/test_admin_ui.py) walks the pages as a person does; these
pin the rules each request follows."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.compile.support import ResolutionStatus
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ApiKey, ApiSettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.jobs import Job, JobStatus
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK

T0 = datetime(2026, 3, 1, tzinfo=UTC)
KEY = "ui-key-0123456789"


def _csrf(html: str, action: str) -> str:
    """The token of the form posting to ``action`` on the page."""
    form = re.search(
        rf'<form method="post" action="{re.escape(action)}".*?name="csrf" value="([^"]+)"',
        html,
        re.S,
    )
    assert form is not None, f"no form posting to {action}"
    return form.group(1)


def _keyed(store: Store, connectors: list[dict[str, str]] | None = None) -> Services:
    api = ApiSettings(keys=[ApiKey(name="ops", key=KEY, tenants=["acme", "globex"])])
    return Services(Settings(api=api, connectors=connectors or []), store, FakeClock(T0))


def _signed_in(services: Services, tenant: str = "acme") -> TestClient:
    client = TestClient(create_app(services), base_url=LOOPBACK)
    page = client.get("/ui/login").text
    response = client.post(
        "/ui/login",
        data={"csrf": _csrf(page, "/ui/login"), "api_key": KEY, "tenant": tenant},
        follow_redirects=False,
    )
    assert response.status_code == 303
    return client


def _failed_job(services: Services, error: str) -> Job:
    """A compile job of acme's subject ana that failed for good with ``error``."""
    job, _ = services.queue.enqueue("acme", "compile", "ana", now=T0)
    claimed = services.queue.claim("w", now=T0, lease=timedelta(minutes=1))
    assert claimed is not None
    services.queue.fail(claimed, "w", error, now=T0, retryable=False)
    return job


def test_pages_need_a_signed_in_session_when_keys_are_configured(store: Store) -> None:
    client = TestClient(create_app(_keyed(store)), base_url=LOOPBACK)
    for page in ("/ui/connectors", "/ui/runs", "/ui/jobs", "/ui/conflicts", "/ui/subjects/x"):
        response = client.get(page, follow_redirects=False)
        assert (response.status_code, response.headers["location"]) == (303, "/ui/login"), page


def test_a_wrong_key_is_refused_and_a_right_one_kept_only_as_its_hash(store: Store) -> None:
    client = TestClient(create_app(_keyed(store)), base_url=LOOPBACK)
    token = _csrf(client.get("/ui/login").text, "/ui/login")

    wrong = client.post("/ui/login", data={"csrf": token, "api_key": "nope"})
    right = client.post("/ui/login", data={"csrf": token, "api_key": KEY}, follow_redirects=False)

    assert wrong.status_code == 401
    assert "unknown API key" in wrong.text
    assert right.status_code == 303
    cookie = right.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "samesite=strict" in cookie.lower()
    assert KEY not in cookie


def test_a_session_sees_only_its_tenant(store: Store) -> None:
    services = _keyed(store)
    theirs, _ = services.queue.enqueue("globex", "compile", "secret-subject", now=T0)
    client = _signed_in(services, "acme")

    jobs = client.get("/ui/jobs").text

    assert "secret-subject" not in jobs
    assert _signed_in(services, "globex").get("/ui/jobs").text.count("secret-subject") >= 1
    retry = client.post(f"/ui/jobs/{theirs.id}/retry", data={"csrf": "x"})
    assert retry.status_code == 403  # refused before it could even look


@pytest.mark.parametrize("token", ["", "forged", "from-another-form"])
def test_a_change_without_its_own_form_token_changes_nothing(store: Store, token: str) -> None:
    services = _keyed(store)
    failed = _failed_job(services, "boom")
    client = _signed_in(services)
    page = client.get("/ui/jobs").text
    if token == "from-another-form":
        token = _csrf(page, "/ui/logout")

    response = client.post(f"/ui/jobs/{failed.id}/retry", data={"csrf": token})

    assert response.status_code == 403
    assert [job.status for job in services.queue.list("acme")] == [JobStatus.FAILED]


def test_retrying_a_failed_job_enqueues_it_again_and_keeps_the_failure(store: Store) -> None:
    services = _keyed(store)
    failed = _failed_job(services, "boom: the model timed out")
    client = _signed_in(services)
    page = client.get("/ui/jobs").text
    assert "boom: the model timed out" in page  # the reason is shown

    response = client.post(
        f"/ui/jobs/{failed.id}/retry",
        data={"csrf": _csrf(page, f"/ui/jobs/{failed.id}/retry")},
        follow_redirects=False,
    )

    assert response.status_code == 303
    jobs = {job.id: job for job in services.queue.list("acme")}
    assert jobs[failed.id].status is JobStatus.FAILED
    [retry] = [job for job in jobs.values() if job.id != failed.id]
    assert (retry.kind, retry.target, retry.status, retry.trigger) == (
        "compile",
        "ana",
        JobStatus.PENDING,
        "retry",
    )


def test_without_keys_the_page_is_open_and_still_checks_form_tokens(store: Store) -> None:
    services = Services(Settings(), store, FakeClock(T0))
    client = TestClient(create_app(services), base_url=LOOPBACK)

    page = client.get("/ui/jobs")
    refused = client.post("/ui/logout", data={"csrf": "forged"})
    accepted = client.post(
        "/ui/logout", data={"csrf": _csrf(page.text, "/ui/logout")}, follow_redirects=False
    )

    assert page.status_code == 200
    assert "memsync_ui=" in page.headers["set-cookie"]
    assert refused.status_code == 403
    assert accepted.status_code == 303


def test_a_subjects_page_shows_its_health_and_the_resolutions_behind_it(store: Store) -> None:
    services = _keyed(store)
    services.resolutions.record("acme", "ana", "s1", ResolutionStatus.UNRESOLVED)
    services.resolutions.record("globex", "ana", "g1", ResolutionStatus.UNRESOLVED)
    client = _signed_in(services)

    page = client.get("/ui/subjects/ana").text

    assert re.search(
        r'id="health"><span class="status health-healthy">healthy</span> <strong>85</strong>', page
    )
    assert "unresolved_sessions" in page
    assert "1 session ended unresolved" in page
    assert "<code>s1</code>" in page
    # Another tenant's record; matched as a cell, since the page's random form tokens may hold "g1".
    assert "<code>g1</code>" not in page
