"""Known secret values are scrubbed from text and log records, in the forms a request
carries them in."""

from __future__ import annotations

import base64
import logging
import urllib.parse

from pydantic import BaseModel, SecretStr

from memsync.scrub import REDACTED, Scrubber, ScrubbingFilter, secret_values

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
