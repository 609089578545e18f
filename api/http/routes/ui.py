"""The session inspector: a static page (HTML, CSS, JS shipped in api/ui) that reads everything
from the /v1 API with the key the user types. The page holds no data, so it is served without a
key; every call it makes needs one."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Response

from api.http.errors import NotFound

router = APIRouter(include_in_schema=False)

UI_DIR = Path(__file__).resolve().parents[2] / "ui"  # api/ui
ASSETS = {
    "inspector.js": "text/javascript; charset=utf-8",
    "inspector.css": "text/css; charset=utf-8",
}
# nothing from elsewhere: no CDN, no inline script, no framing by other sites
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


@router.get("/ui")
def page() -> Response:
    """The inspector page."""
    return Response(
        (UI_DIR / "index.html").read_bytes(), media_type="text/html; charset=utf-8", headers=HEADERS
    )


@router.get("/ui/{name}")
def asset(name: str) -> Response:
    """The page's own script and style sheet (a fixed list: no path from the URL reaches the disk)."""
    if name not in ASSETS:
        raise NotFound("no such inspector asset")
    return Response((UI_DIR / name).read_bytes(), media_type=ASSETS[name], headers=HEADERS)
