"""The admin page's session and CSRF tokens.

A person enters an API key once; the session cookie keeps the key's *hash* (the form
it is configured in, never the key) and the tenant chosen, signed with itsdangerous so
it cannot be forged or edited, ``HttpOnly`` (no script reads it) and ``SameSite=Strict``.
Each request checks the hash against the configured keys again, so removing a key
from the configuration ends its sessions. With no keys configured the server only
listens on loopback and the page is open, as the API is.

Every state-changing form carries a token signed for *that* form (``sync:gh``,
``resolve:<id>``) and bound to the session's random nonce: a token taken from one
form or one session is refused by any other.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

__all__ = ["SESSION_COOKIE", "Session", "SessionSigner"]

SESSION_COOKIE = "memsync_ui"
SESSION_MAX_AGE_SECONDS = 12 * 3600


@dataclass(frozen=True, slots=True)
class Session:
    """Who is looking: a random nonce (the CSRF binding), and once signed in, the
    API key's stored hash (None with no keys configured) and the tenant."""

    nonce: str
    tenant_id: str | None = None
    key_hash: str | None = None

    @classmethod
    def anonymous(cls) -> Session:
        return cls(secrets.token_urlsafe(16))

    def signed_in(self, tenant_id: str, key_hash: str | None) -> Session:
        """A new session for a person who just signed in (a fresh nonce: tokens of the
        anonymous session are not valid after)."""
        return Session(secrets.token_urlsafe(16), tenant_id, key_hash)


class SessionSigner:
    """Signs and checks session cookies and CSRF tokens with one secret.

    ``secret`` comes from ``api.session_secret``; without it each process makes its own
    (then a restart signs everyone out, and several replicas need the setting).
    """

    def __init__(self, secret: str | None = None) -> None:
        key = secret or secrets.token_urlsafe(32)
        self._sessions = URLSafeTimedSerializer(key, salt="memsync-ui-session")
        self._forms = URLSafeTimedSerializer(key, salt="memsync-ui-csrf")

    def dump(self, session: Session) -> str:
        return self._sessions.dumps([session.nonce, session.tenant_id, session.key_hash])

    def load(self, cookie: str | None) -> Session | None:
        """The session of a cookie this signer made and that has not expired, else None."""
        if not cookie:
            return None
        try:
            nonce, tenant_id, key_hash = self._sessions.loads(
                cookie, max_age=SESSION_MAX_AGE_SECONDS
            )
        except (BadSignature, ValueError, TypeError):
            return None
        if not isinstance(nonce, str):
            return None
        return Session(nonce, tenant_id, key_hash)

    def csrf_token(self, session: Session, form: str) -> str:
        """The token of ``form`` for this session."""
        return self._forms.dumps([session.nonce, form])

    def csrf_valid(self, session: Session, form: str, token: str | None) -> bool:
        """Whether ``token`` was made for this form in this session (and is not
        older than the session may be)."""
        if not token:
            return False
        try:
            nonce, signed_form = self._forms.loads(token, max_age=SESSION_MAX_AGE_SECONDS)
        except (BadSignature, ValueError, TypeError):
            return False
        return secrets.compare_digest(str(nonce), session.nonce) and signed_form == form
