"""Known secret values are scrubbed from text and log records, in the forms a request
carries them in."""

from __future__ import annotations

import base64
import logging
import threading
import urllib.parse
from collections.abc import Iterator

import pytest
from pydantic import BaseModel, SecretStr

from memsync.scrub import (
    REDACTED,
    LearningScrubber,
    Scrubber,
    ScrubbingFilter,
    scrub_every_log_record,
    secret_values,
)

TOKEN = "ghp_s3cr3t/t0ken+value"


def test_the_value_and_its_encoded_forms_are_replaced() -> None:
    scrub = Scrubber([TOKEN])
    basic = base64.b64encode(TOKEN.encode()).decode()
    echoed = (
        f"400: bad header 'Authorization: token {TOKEN}', "
        f"url ?token={urllib.parse.quote(TOKEN, safe='')}, Basic {basic}"
    )

    scrubbed = scrub(echoed)

    assert TOKEN not in scrubbed
    assert basic not in scrubbed
    assert urllib.parse.quote(TOKEN, safe="") not in scrubbed
    assert scrubbed.count(REDACTED) == 3
    assert scrub(scrubbed) == scrubbed  # a repeat changes nothing


def test_short_values_are_not_secrets_and_nothing_known_scrubs_nothing() -> None:
    assert Scrubber(["abc"])("abc def") == "abc def"
    assert not Scrubber()
    assert Scrubber()("text") == "text"


def test_a_longer_secret_containing_a_shorter_one_is_replaced_whole() -> None:
    assert Scrubber(["secret-one", "secret-one-two"])("x secret-one-two y") == "x *** y"


def test_secret_values_are_found_all_the_way_down() -> None:
    class Inner(BaseModel):
        token: SecretStr

    class Outer(BaseModel):
        name: str
        inner: Inner
        more: list[Inner]

    found = secret_values(
        Outer(name="n", inner=Inner(token=SecretStr("a1")), more=[Inner(token=SecretStr("b2"))])
    )
    assert found == ["a1", "b2"]


def test_the_filter_scrubs_message_arguments_and_traceback() -> None:
    record = logging.LogRecord("memsync", logging.ERROR, __file__, 1, "sent %s", (TOKEN,), None)
    try:
        raise ValueError(f"upstream said {TOKEN}")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()

    ScrubbingFilter(Scrubber([TOKEN])).filter(record)
    line = logging.Formatter().format(record)

    assert TOKEN not in line
    assert "sent ***" in line
    assert "upstream said ***" in line


LEARNT = "xoxb-learnt-later-token"


@pytest.fixture
def plain_log_records() -> Iterator[None]:
    """The process's log record factory put back after a test that replaces it."""
    factory = logging.getLogRecordFactory()
    yield
    logging.setLogRecordFactory(factory)


def test_a_learning_scrubber_learns_once_on_first_use_and_knows_both() -> None:
    calls: list[str] = []

    def learn() -> list[str]:
        calls.append("learn")
        return [LEARNT]

    scrub = LearningScrubber([TOKEN], learn=learn)

    assert calls == []  # made, not yet used
    assert scrub(f"{TOKEN} and {LEARNT}") == "*** and ***"
    assert scrub.extended(["another-secret"])(f"{LEARNT} another-secret") == "*** ***"
    assert scrub
    assert calls == ["learn"]


def test_a_learning_scrubber_whose_learning_fails_tries_again_on_next_use() -> None:
    attempts: list[int] = []

    def learn() -> list[str]:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("the registry failed to load")
        return [LEARNT]

    scrub = LearningScrubber([], learn=learn)

    with pytest.raises(RuntimeError):
        scrub(LEARNT)
    assert scrub(LEARNT) == REDACTED
    assert len(attempts) == 2


def test_a_record_logged_while_learning_is_scrubbed_of_what_is_known_already(
    plain_log_records: None,
) -> None:
    logged: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    logger = logging.getLogger("memsync.test.learning")
    logger.propagate = False
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)

    def learn() -> list[str]:
        logger.info("parsing connectors; the API key %s", TOKEN)  # re-enters the scrubber
        return [LEARNT]

    scrub_every_log_record(LearningScrubber([TOKEN], learn=learn))
    logger.info("first line, quoting %s", LEARNT)

    assert logged == ["parsing connectors; the API key ***", "first line, quoting ***"]


def test_a_thread_using_the_scrubber_while_another_learns_waits_for_the_whole_set() -> None:
    learning = threading.Event()
    finish = threading.Event()

    def learn() -> list[str]:
        learning.set()
        finish.wait(timeout=10)
        return [LEARNT]

    scrub = LearningScrubber([], learn=learn)
    first = threading.Thread(target=scrub, args=("x",))
    first.start()
    learning.wait(timeout=10)
    said: list[str] = []
    second = threading.Thread(target=lambda: said.append(scrub(LEARNT)))
    second.start()
    finish.set()
    first.join(timeout=10)
    second.join(timeout=10)

    assert said == [REDACTED]
