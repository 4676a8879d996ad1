"""Command line: `python -m agentstate_testkit provision [KIND ...]` or `run KIND`.

`provision` first stops servers that killed harness processes left running, then fetches
binaries into the cache (all kinds by default), checks every cached file against its checksum,
fetches a broken entry again and lists them; it exits 1 when a kind is unusable. `run` starts
one server, prints its URL on stdout and stops it on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence

from agentstate_testkit.servers import (
    KINDS,
    ServerError,
    _binary_version,
    _sweep,
    cache_dir,
    cli_path,
    provision,
    start,
)

__all__ = ["main"]


def _provision(kinds: Sequence[str]) -> int:
    failed = 0
    print(f"cache: {cache_dir()}")
    try:
        for line in _sweep():
            print(f"swept: {line}")
    except ServerError as error:
        print(f"error: {error}", file=sys.stderr)
        failed += 1
    for kind in kinds or KINDS:
        began = time.monotonic()
        try:
            server = provision(kind, checksums=True)
            cli = cli_path(kind)
        except ServerError as error:
            print(f"error: {error}", file=sys.stderr)
            failed += 1
            continue
        extra = f"  cli {cli}" if cli else ""
        version = _binary_version(server)
        print(f"{kind:<12} {version:<8} {server}{extra}  ({time.monotonic() - began:.1f}s)")
    if failed:
        print(f"error: {failed} kind(s) could not be provisioned, see above", file=sys.stderr)
        return 1
    return 0


def _run(kind: str, port: int | None, extra_args: Sequence[str]) -> int:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server = start(kind, extra_args=extra_args, port=port)
    except ServerError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    with server:
        print(server.url, flush=True)
        print(f"{kind} {server.version} in {server.directory}; stop with Ctrl-C", file=sys.stderr)
        while not stop.wait(0.5):
            # The server runs in its own session: a Ctrl-C reaches only us. Give a stop a moment.
            if not server.running and not stop.wait(1.0):
                print(f"error: {kind} exited; its log is {server.log_path}", file=sys.stderr)
                print(server.log_path.read_text(errors="replace")[-2000:], file=sys.stderr)
                return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line and returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m agentstate_testkit", description="Throwaway test servers."
    )
    kinds = " ".join(KINDS)
    commands = parser.add_subparsers(dest="command", required=True)
    provision_parser = commands.add_parser("provision", help="fetch binaries into the cache")
    provision_parser.add_argument("kinds", nargs="*", metavar="KIND", help=f"default: {kinds}")
    run_parser = commands.add_parser("run", help="run one server until SIGTERM/SIGINT")
    run_parser.add_argument("kind", choices=KINDS, metavar="KIND", help=kinds)
    run_parser.add_argument("--port", type=int, default=None, help="default: a free port")
    run_parser.add_argument(
        "extra_args", nargs=argparse.REMAINDER, help="server arguments, after `--`"
    )
    args = parser.parse_args(argv)
    if args.command == "provision":
        unknown = [kind for kind in args.kinds if kind not in KINDS]
        if unknown:
            parser.error(f"unknown kind {' '.join(unknown)}: use {kinds}")
        return _provision(args.kinds)
    extra = args.extra_args[1:] if args.extra_args[:1] == ["--"] else args.extra_args
    return _run(args.kind, args.port, extra)


if __name__ == "__main__":
    sys.exit(main())
