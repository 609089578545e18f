# compactd: one image for every process (api, worker, beat, flower); the command picks the role.
FROM python:3.11-slim AS build
COPY --from=ghcr.io/astral-sh/uv:0.5 /uv /usr/local/bin/uv
WORKDIR /app
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PROJECT_ENVIRONMENT=/app/.venv
COPY pyproject.toml uv.lock README.md ./
# the client is a workspace member: its pyproject is part of the workspace the lock describes
COPY api/client/pyproject.toml api/client/README.md ./api/client/
RUN uv sync --frozen --no-dev --no-install-workspace
COPY api ./api
COPY worker ./worker
RUN uv sync --frozen --no-dev && uv run --frozen --no-dev compactd prewarm

FROM python:3.11-slim
RUN groupadd --system --gid 10001 compactd && useradd --system --uid 10001 --gid 10001 --home /app compactd
WORKDIR /app
COPY --from=build --chown=10001:10001 /app /app
ENV PATH=/app/.venv/bin:$PATH PYTHONUNBUFFERED=1 COMPACTD_HOST=0.0.0.0 COMPACTD_VAR_DIR=/app/var
USER compactd
EXPOSE 8700
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8700/healthz', timeout=2)"
CMD ["compactd", "api"]
