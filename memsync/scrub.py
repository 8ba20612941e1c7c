"""Known secret values scrubbed from text before it is stored, printed or logged.

An upstream error can quote what it was sent (a 400 echoing the ``Authorization``
header), and that text ends up in a run record, a job's error, the terminal and the
log. Redacting by field name (``config show``) cannot catch it; knowing the values can.
A :class:`Scrubber` holds the values (and the encodings a request carries them in) and
replaces each occurrence with ``***``; :class:`ScrubbingFilter` applies one to every
record a logging handler emits.
"""

from __future__ import annotations

import base64
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, SecretStr

__all__ = [
    "REDACTED",
    "LearningScrubber",
    "Scrubber",
    "ScrubbingFilter",
    "scrub_every_log_record",
    "secret_values",
]

REDACTED = "***"
# Shorter values would scrub ordinary words; no real token is this short.
_MIN_SECRET_LENGTH = 6


class Scrubber:
    """Replaces every occurrence of the known secret values in a text with ``***``.

    Each value is also looked for URL-encoded and base64-encoded (as in a
    ``Basic`` header), the forms a source echoes back most. Repeats are harmless:
    scrubbing scrubbed text changes nothing.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._forms = _sorted_forms(secrets)

    def _known_forms(self) -> list[str]:
        return self._forms

    def __bool__(self) -> bool:
        return bool(self._known_forms())

    def __call__(self, text: str) -> str:
        for form in self._known_forms():
            if form in text:
                text = text.replace(form, REDACTED)
        return text

    def extended(self, secrets: Iterable[str]) -> Scrubber:
        """A scrubber that knows these values too."""
        combined = Scrubber()
        combined._forms = _longest_first(self._known_forms(), _sorted_forms(secrets))
        return combined


class LearningScrubber(Scrubber):
    """A scrubber that knows ``secrets`` at once and learns the rest from ``learn`` when
    it is first used (to scrub a text, or asked whether it knows any value).

    For secrets that cost work to find: the configured connectors' are known only once
    their configurations are parsed, which a command that never logs, prints an error
    or builds a connector need not pay for. ``learn`` runs once; if it raises, the
    error goes to the caller and the next use tries again. Another thread using the
    scrubber while ``learn`` runs waits for it; a log record made by ``learn`` itself
    (the same thread) is scrubbed of ``secrets`` only, the rest being unknown yet.
    """

    def __init__(self, secrets: Iterable[str], learn: Callable[[], Iterable[str]]) -> None:
        super().__init__(secrets)
        self._learn: Callable[[], Iterable[str]] | None = learn
        self._learning = False
        self._lock = threading.RLock()

    def _known_forms(self) -> list[str]:
        if self._learn is None:
            return self._forms
        with self._lock:
            learn = self._learn
            if learn is None or self._learning:  # learnt meanwhile, or re-entered by learn
                return self._forms
            self._learning = True
            try:
                learnt = _sorted_forms(learn())
            finally:
                self._learning = False
            self._forms = _longest_first(self._forms, learnt)
            self._learn = None
            return self._forms


def _sorted_forms(secrets: Iterable[str]) -> list[str]:
    """Each secret long enough to be one, as it is, URL-encoded and base64-encoded,
    longest first (:func:`_longest_first`)."""
    forms: set[str] = set()
    for secret in secrets:
        if len(secret) < _MIN_SECRET_LENGTH:
            continue
        forms.add(secret)
        forms.add(urllib.parse.quote(secret, safe=""))
        forms.add(base64.b64encode(secret.encode("utf-8")).decode("ascii"))
    return _longest_first(forms)


def _longest_first(*forms: Iterable[str]) -> list[str]:
    """The forms, each once, longest first, so a secret containing another is replaced
    whole."""
    return sorted({form for some in forms for form in some}, key=len, reverse=True)


class ScrubbingFilter(logging.Filter):
    """A logging filter for handlers: the message, its arguments and the formatted
    traceback of every record are scrubbed before any formatter sees them."""

    def __init__(self, scrubber: Scrubber) -> None:
        super().__init__()
        self._scrub = scrubber

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._scrub:
            return True
        record.msg = self._scrub(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = self._scrub(record.stack_info)
        return True


_plain_factory = logging.getLogRecordFactory()


def scrub_every_log_record(scrubber: Scrubber) -> None:
    """Scrub every log record this process creates, whichever handler (its own, or
    uvicorn's, or none yet) ends up emitting it. Calling it again replaces the scrubber.
    """
    scrubbing = ScrubbingFilter(scrubber)

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = _plain_factory(*args, **kwargs)
        scrubbing.filter(record)
        return record

    logging.setLogRecordFactory(factory)


def secret_values(value: Any) -> list[str]:
    """Every ``SecretStr`` value in ``value``: a pydantic model, or mappings and lists
    of them, searched all the way down."""
    found: list[str] = []
    if isinstance(value, SecretStr):
        found.append(value.get_secret_value())
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            found += secret_values(getattr(value, name))
    elif isinstance(value, Mapping):
        for item in value.values():
            found += secret_values(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            found += secret_values(item)
    return found
