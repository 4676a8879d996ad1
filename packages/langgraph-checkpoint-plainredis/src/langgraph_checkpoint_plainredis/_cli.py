"""The `plainredis` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import redis

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="plainredis", description="Operate on a langgraph-checkpoint-plainredis keyspace."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    migrate = sub.add_parser(
        "migrate",
        help="move a keyspace written by plainredis 0.1.0 into the current layout",
        description="Idempotent and lossless; stop 0.1.0 writers first.",
    )
    migrate.add_argument("--url", required=True, help="Redis URL, e.g. redis://127.0.0.1:6379/0")
    migrate.add_argument("--prefix", default="lg", help="key prefix 0.1.0 used (default: lg)")
    migrate.add_argument(
        "--ttl", type=float, default=None, help="TTL in seconds for migrated threads"
    )
    migrate.add_argument("--keep-old", action="store_true", help="leave the 0.1.0 keys in place")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "migrate":
        from ._migrate import migrate_v010

        client = redis.Redis.from_url(args.url, protocol=2)
        try:
            report = migrate_v010(
                client, args.prefix, ttl=args.ttl, keep_old=args.keep_old, progress=print
            )
        finally:
            client.close()
        print(
            f"migrated {report.threads} thread namespaces, {report.checkpoints} checkpoints, "
            f"{report.blobs} blobs, {report.writes} writes; deleted {report.old_keys_deleted} "
            "old keys"
        )
        for skipped in report.skipped:
            print(f"skipped unreadable registry entry {skipped!r}", file=sys.stderr)
        return 1 if report.skipped else 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
