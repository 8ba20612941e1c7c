"""The admin web page at ``/ui/``: see and steer connectors, runs, jobs, conflicts and
subjects.

Server-rendered (Jinja2 templates and one stylesheet, shipped inside the package: no
build step, no CDN, no script needed to read). Same auth as the API: an API key
entered once and kept, as its hash, in a signed ``HttpOnly`` cookie; open on loopback
when no keys are configured. Every state-changing form carries a per-form CSRF token.
See docs/operations.md.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from memsync.runtime.app.services import Services
from memsync.runtime.app.ui.pages import LoginRequired, PageError, router, templates
from memsync.runtime.app.ui.session import SessionSigner

__all__ = ["install_ui"]

STATIC = Path(__file__).parent / "static"


def install_ui(app: FastAPI, services: Services) -> None:
    """Serve the admin pages and their stylesheet on ``app``."""
    secret = services.settings.api.session_secret
    app.state.ui_signer = SessionSigner(secret.get_secret_value() if secret else None)
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
    app.include_router(router)

    @app.exception_handler(LoginRequired)
    async def _login(_request: Request, _error: LoginRequired) -> Response:
        return RedirectResponse("/ui/login", status_code=303)

    @app.exception_handler(PageError)
    async def _page_error(request: Request, error: PageError) -> HTMLResponse:
        return templates.TemplateResponse(
            request,
            "error.html",
            {"error": error, "tenant": None, "ui": None},
            status_code=error.status,
        )
