"""structlog set-up: JSON lines with ISO UTC time and bound context (tenant, session, task ids)."""

from __future__ import annotations

import logging
import sys

import structlog


def use_json(fmt: str = "auto", *, tty: bool) -> bool:
    """JSON lines unless asked for console, or "auto" on a terminal (then human-readable lines)."""
    return fmt == "json" or (fmt == "auto" and not tty)


def configure_logging(level: str = "INFO", *, fmt: str = "auto") -> None:
    """Call once per process. `fmt`: "auto" (console on a TTY, else JSON), "console" or "json"."""
    as_json = use_json(fmt, tty=sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Route stdlib logging (celery, uvicorn) through the same renderer.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[*shared[1:], structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.contextvars.merge_contextvars],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
