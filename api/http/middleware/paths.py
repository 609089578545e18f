"""Which /v1 paths the compactd middlewares guard (bearer key, JSON body)."""

from __future__ import annotations

from api.http.error_shapes import drop_in


def compactd_api(path: str) -> bool:
    """A /v1 path of compactd's own API: every one but the drop-in endpoints (api/http/error_shapes.py
    SHAPES), which authenticate and answer in their provider's shape themselves."""
    return path.startswith("/v1/") and not drop_in(path)
