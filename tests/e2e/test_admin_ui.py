"""The admin page in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``.ci/run``) driven through Selenium against a live
server on loopback. Nothing is downloaded: the driver is the system's chromedriver.

Screenshots of every page are saved under ``artifacts/ui/`` (ignored by git).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ApiKey, ApiSettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from tests.helpers import live_server
from tests.skip_report import skip_unless_ci

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    skip_unless_ci("needs Debian's chromium and chromium-driver (.ci/run installs them)")

from selenium import webdriver  # noqa: E402 - only once the browser is known to exist
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402

KEY = "ui-test-key-0123456789"
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "ui"


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    profile = tempfile.mkdtemp(prefix="memsync-chromium-")
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _said(text: str, days: int) -> EpisodeDraft:
    return EpisodeDraft(
        subject_id="ana",
        source="chat",
        type="message",
        payload={"text": text},
        occurred_at=T0 + timedelta(days=days),
    )


@pytest.fixture
def services(store: Store, tmp_path: Path) -> Services:
    """A tenant with a workspace connector that has run once, and a flagged conflict."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    notes = workspace / "NOTES.md"
    notes.write_text("We decided to use Postgres for the queue.\n")
    os.utime(notes, (T0.timestamp(), T0.timestamp()))  # the decision's moment
    settings = Settings(
        api=ApiSettings(keys=[ApiKey(name="ops", key=KEY, tenants=["acme"])]),
        connectors=[
            {
                "name": "notes",
                "type": "workspace",
                "root": str(workspace),
                "subject": "ws:notes",
                "tenant": "acme",
                "schedule": "every 1h",
            }
        ],
    )
    services = Services(settings, store, FakeClock(T0 + timedelta(days=10)))
    services.run_sync(services.connector("notes"))
    services.compile_service.compile("acme", "ws:notes")
    services.ingest.ingest(
        "acme",
        [
            _said("Stripe charges 3.5% + 35¢ per card payment.", 0),
            _said("Stripe charges 2.9% + 30¢ per card payment.", 5),
        ],
    )
    assert services.compile_service.compile("acme", "ana").conflicts_opened == 1
    return services


def _shot(driver: WebDriver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def _text(driver: WebDriver, css: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def _shows(driver: WebDriver, css: str, text: str) -> None:
    """Wait (up to a deadline) until the page after a click shows ``text`` in ``css``."""

    def shown(driver: WebDriver) -> bool:
        try:
            return text in driver.find_element(By.CSS_SELECTOR, css).text
        except (NoSuchElementException, StaleElementReferenceException):
            return False  # the old page is going or the new one is not there yet
        except WebDriverException as error:
            # Chromium's name for an element of a page replaced while it was read.
            if "does not belong to the document" in str(error):
                return False
            raise

    WebDriverWait(driver, 20).until(shown)


def test_a_person_signs_in_follows_a_connector_to_its_subject_and_resolves_a_conflict(
    browser: WebDriver, services: Services
) -> None:
    with live_server(create_app(services)) as base:
        browser.get(f"{base}/ui/")
        assert browser.current_url == f"{base}/ui/login"
        _shot(browser, "01-login")
        browser.find_element(By.ID, "api_key").send_keys(KEY)
        browser.find_element(By.ID, "sign_in").click()

        _shows(browser, "h1", "Connectors")
        assert browser.current_url == f"{base}/ui/connectors"
        assert _text(browser, "#tenant") == "acme"
        row = _text(browser, "#connectors tbody tr")
        assert "notes" in row
        assert "workspace" in row
        assert "content" in row  # the workspace connector's key policy
        assert "succeeded" in row
        _shot(browser, "02-connectors")

        # A connector → its runs → a run → the subject it stored episodes of.
        browser.find_element(By.CSS_SELECTOR, "a.connector-link").click()
        _shows(browser, "h1", "Runs of notes")
        _shot(browser, "03-runs")
        browser.find_element(By.CSS_SELECTOR, "a.run-link").click()
        _shows(browser, "#run-status", "succeeded")
        _shot(browser, "04-run")
        browser.find_element(By.CSS_SELECTOR, "a.subject-link").click()
        _shows(browser, "h1", "ws:notes")
        browser.find_element(By.ID, "task").send_keys("which database for the queue")
        as_of = browser.find_element(By.NAME, "as_of")
        as_of.send_keys((T0 + timedelta(days=10)).isoformat())  # pinned: the clock's now
        browser.find_element(By.ID, "preview").click()
        _shows(browser, "#bundle", "Postgres")
        _shot(browser, "05-subject")

        # Sync now enqueues a job the jobs page shows.
        browser.get(f"{base}/ui/connectors")
        browser.find_element(By.CSS_SELECTOR, "button.sync-now").click()
        _shows(browser, ".notice", "Sync enqueued as job")
        browser.get(f"{base}/ui/jobs")
        assert "notes" in _text(browser, "#recent")
        _shot(browser, "06-jobs")

        # The conflict, side by side with its evidence; keep the newer rate.
        browser.get(f"{base}/ui/conflicts")
        _shot(browser, "07-conflicts")
        sides = browser.find_elements(By.CSS_SELECTOR, ".conflict .side")
        assert len(sides) == 2
        [newer] = [side for side in sides if "2.9%" in side.text]
        assert "Stripe charges 2.9% + 30¢ per card payment." in newer.text  # the evidence
        kept = newer.find_element(By.CSS_SELECTOR, "button.keep").get_attribute("data-memory")
        newer.find_element(By.CSS_SELECTOR, "button.keep").click()
        _shows(browser, ".notice", "resolved")
        assert _text(browser, "#no-conflicts") == "No open conflicts."
        _shot(browser, "08-conflict-resolved")

        browser.get(f"{base}/ui/subjects/ana")
        assert "Superseded (1)" in _text(browser, "main")
        _shot(browser, "09-subject-after")

        # The API tells the same story.
        resolved = httpx.get(
            f"{base}/v1/conflicts",
            params={"status": "resolved", "subject_id": "ana"},
            headers={"X-API-Key": KEY, "X-Tenant-ID": "acme"},
        ).json()["conflicts"]
    assert [conflict["kept_memory_id"] for conflict in resolved] == [kept]


def test_a_form_without_its_token_changes_nothing(browser: WebDriver, services: Services) -> None:
    with live_server(create_app(services)) as base:
        browser.get(f"{base}/ui/login")
        browser.find_element(By.ID, "api_key").send_keys(KEY)
        browser.find_element(By.ID, "sign_in").click()
        _shows(browser, "h1", "Connectors")
        browser.get(f"{base}/ui/conflicts")
        # Another site's page posting to ours: the token is missing (and the cookie,
        # SameSite=Strict, would not even be sent); here the session is ours.
        browser.execute_script(
            "for (const input of document.querySelectorAll('input[name=csrf]'))"
            " input.value = 'forged';"
        )
        browser.find_element(By.CSS_SELECTOR, "button.keep").click()
        _shows(browser, "h1", "403")
        _shot(browser, "10-csrf-refused")
    open_conflicts = services.memories.conflicts("acme", "ana")
    assert len(open_conflicts) == 1
