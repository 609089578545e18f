"""Liveness, readiness and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from api.http.deps import ResourcesDep
from api.http.errors import problem

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(res: ResourcesDep) -> Response:
    """The database and Redis answer."""
    checks = {}
    try:
        with res.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = type(exc).__name__
    try:
        res.cache.client.ping()
        checks["redis"] = "ok"
    except Exception as exc:
        checks["redis"] = type(exc).__name__
    if all(v == "ok" for v in checks.values()):
        return Response(b'{"status":"ok"}', media_type="application/json")
    return problem(503, "Not ready", "a dependency does not answer", checks=checks)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    """Prometheus text format: the totals of every API process and worker (shared in Redis; see
    api/http/prometheus.py), whichever process is scraped."""
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
