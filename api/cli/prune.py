"""`compactd prune`: every session's working memory pruned once, now (what beat does nightly)."""

from __future__ import annotations

import argparse

from api.cli.embedded_redis import with_redis
from worker.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `prune` to the CLI's subparsers."""
    p = sub.add_parser(
        "prune", help="prune every session's working memory once, now (what beat does nightly)"
    )
    p.add_argument("--dry-run", action="store_true", help="print what would be removed or merged, and why")
    p.set_defaults(func=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    from worker.enqueue import CeleryEnqueue
    from worker.flows import prune as pruning
    from worker.memory.prune import describe
    from worker.resources import Resources
    from worker.store import memory

    settings = with_redis(Settings(), "compactd prune")
    res = Resources.build(settings)
    try:
        if not args.dry_run:
            with CeleryEnqueue(settings, res) as enqueue:
                report = pruning.prune_now(res, enqueue=enqueue)
            print(" ".join(f"{k}={v}" for k, v in report.items()))
            return 0
        plans = pruning.prune_plans(res)
        for planned in plans:
            print(f"session {planned.client_id} (tenant {planned.tenant_id}, pk {planned.session_pk}):")
            for step in planned.steps:
                print(f"  {describe(step)}")
        gone = memory.orphaned_sessions(res.engine)
        if gone:
            print(
                f"memory of {len(gone)} deleted or expired sessions would go (pks {', '.join(map(str, gone))})"
            )
        if not plans and not gone:
            print("nothing to prune")
        return 0
    finally:
        res.close()
