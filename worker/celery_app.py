"""The Celery app: configured from Settings by the CLI; Resources built once per worker process."""

from __future__ import annotations

import gc
from typing import Any

from celery import Celery
from celery.schedules import crontab
from celery.signals import setup_logging, worker_process_init, worker_process_shutdown

from worker.logs import configure_logging
from worker.memory.prune import parse_at
from worker.resources import Resources, broker_url
from worker.settings import Settings

app = Celery("compactd", include=["worker.tasks"])

_settings: Settings | None = None
_resources: Resources | None = None


def celery_config(settings: Settings) -> dict[str, Any]:
    limit = settings.task_time_limit_seconds
    return {
        "broker_url": broker_url(settings),
        "broker_connection_retry_on_startup": True,
        # longer than the longest task plus its countdown, or Redis would redeliver a running task
        "broker_transport_options": {
            "visibility_timeout": 2 * limit + int(settings.idle_seconds) + 60,
            "socket_timeout": 5,
            "socket_connect_timeout": 2,
        },
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_time_limit": limit,
        "task_soft_time_limit": max(1, limit - 10),
        "task_default_queue": settings.queue,
        "worker_hijack_root_logger": False,
        "worker_redirect_stdouts": False,
        "worker_send_task_events": True,
        "task_send_sent_event": True,
        "enable_utc": True,
        "timezone": "UTC",
        "beat_schedule": {
            "idle-sweep": {"task": "compactd.sweep", "schedule": settings.sweep_seconds},
            "prune-memory": {"task": "compactd.prune_memory", "schedule": prune_schedule(settings)},
            "expire-sessions": {"task": "compactd.expire", "schedule": crontab(hour=3, minute=30)},
        },
    }


def prune_schedule(settings: Settings) -> float | crontab:
    """Every memory_prune_every_seconds when set, else daily at memory_prune_at (UTC). The task
    claims its period, so a second beat started by mistake sends a message that does nothing."""
    if settings.memory_prune_every_seconds > 0:
        return settings.memory_prune_every_seconds
    hour, minute = parse_at(settings.memory_prune_at)
    return crontab(hour=hour, minute=minute)


def configure(settings: Settings, target: Celery | None = None) -> Celery:
    """Apply settings to the app (the worker's, or a sender's own instance)."""
    global _settings
    target = target or app
    target.conf.update(celery_config(settings))
    if target is app:
        _settings = settings
    return target


def start_worker(
    target: Celery, *, queue: str, concurrency: int, pool: str, loglevel: str, quiet: bool
) -> int:
    """Run a worker in this process until it stops; its exit code. What `celery worker -Q queue
    --without-gossip --without-mingle` does, without Celery's command line (click and every
    subcommand: about a fifth of a worker's start-up)."""
    worker = target.Worker(
        queues=[queue],
        concurrency=concurrency,
        pool_cls=pool,
        loglevel=loglevel,
        quiet=quiet,
        without_gossip=True,
        without_mingle=True,
    )
    worker.start()
    return int(worker.exitcode or 0)


def sender(settings: Settings) -> Celery:
    """A Celery instance for processes that only send tasks (the API). It sends no task-sent event:
    that event is a second publish per job (a Redis client built, a PUBLISH round trip: about half
    of an enqueue's ~2 ms of CPU, on the proxy's relay), and what it would show, a job waiting, is
    the compactd_queue_length gauge; Flower still sees each job once a worker receives it."""
    target = configure(settings, Celery("compactd-sender", set_as_current=False))
    target.conf.task_send_sent_event = False
    return target


def resources() -> Resources:
    """This process's resources, built on first use (after the fork, never at import). The rule
    catalog is the parent's when it loaded one before forking, else loaded on the first redaction."""
    global _resources
    if _resources is None:
        _resources = Resources.build(_settings or Settings(), run_migrations=False, warm_rules=False)
    return _resources


@setup_logging.connect
def _logging(**_: Any) -> None:
    settings = _settings or Settings()
    configure_logging(settings.log_level, fmt=settings.log_format)


@worker_process_init.connect
def _init(**_: Any) -> None:
    global _resources
    _resources = None  # never reuse a parent's connections in a forked child
    resources()
    # what start-up built lives as long as the process: out of the collector's way, so a full
    # collection between jobs scans the jobs' objects, not every imported module's (as the API
    # does at start-up). No collection first: it would write to every object inherited from the
    # parent and so copy the pages the fork shares; freezing only moves the collector's lists.
    gc.freeze()


@worker_process_shutdown.connect
def _shutdown(**_: Any) -> None:
    if _resources is not None:
        _resources.close()
