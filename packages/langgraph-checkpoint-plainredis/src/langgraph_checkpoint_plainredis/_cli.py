"""The `plainredis` command: inspect, prune and migrate a keyspace from a shell."""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

import redis

from ._core import MAX_TTL, _ttl_ms
from ._errors import LegacyKeyspaceError, PlainRedisError
from ._inspect import Inspector, Usage, _without_protocol
from ._keys import KeySpace, LegacyKeys
from ._migrate import MIN_TTL, MigrationReport, migrate_v010, parked_source, target_prefix
from ._shell import check_database, redacted, scrubbed, validate_client

__all__ = ["main"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
_DESCRIPTION = """\
Inspect and operate on a langgraph-checkpoint-plainredis keyspace. Checkpoints
are stored as raw bytes, which redis-cli cannot show; these commands decode them.

Every command but migrate takes --url (default: $REDIS_URL, else
%s) and --prefix (default: lg).

Exit status: 0 done, 1 runtime error or declined prompt, 2 bad arguments, 141 the
reader of the output stopped reading (as `| head` does)."""


def _text(value: str) -> str:
    """An id or prefix from the command line: text that a Redis key can hold. Python hands
    over bytes that are not UTF-8 as lone surrogates, which no key can be built from."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        shown = value.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
        raise argparse.ArgumentTypeError(
            f"'{shown}' is not UTF-8 text; pass ids as UTF-8 (the savers store them so)"
        ) from None
    return value


def _prefix(value: str) -> str:
    _text(value)
    try:
        KeySpace(value)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _ttl(value: str) -> float:
    try:
        seconds = float(value)
        _ttl_ms(seconds)  # the saver's own check
    except ValueError:
        # In the command line's words: the saver's message names `ttl=` and Python.
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a positive number of seconds up to {MAX_TTL:,} (about 31 "
            "years): pass e.g. --ttl 604800 (a week), or no --ttl to keep threads forever"
        ) from None
    return seconds


def _migrate_ttl(value: str) -> float:
    seconds = _ttl(value)
    if seconds < MIN_TTL:
        raise argparse.ArgumentTypeError(
            f"{value!r} is shorter than {MIN_TTL} seconds: the run reads back what it writes "
            "before it deletes the 0.1.0 keys, and keys that expire sooner could be gone by "
            f"then; pass --ttl {MIN_TTL} or more, e.g. --ttl 604800 (a week), or no --ttl to "
            "keep threads forever"
        )
    return seconds


def _count(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; pass 0 for no limit")
    return number


def _parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="plainredis",
        description=_DESCRIPTION % DEFAULT_URL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=None, help=f"Redis URL (default: $REDIS_URL, else {DEFAULT_URL})"
    )
    common.add_argument(
        "--prefix", type=_prefix, default="lg", help="key prefix the savers use (default: lg)"
    )
    ns = argparse.ArgumentParser(add_help=False)
    ns.add_argument(
        "--ns",
        type=_text,
        default="",
        metavar="NS",
        help="checkpoint namespace (default: '', the root graph)",
    )
    confirm = argparse.ArgumentParser(add_help=False)
    confirm.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    sub.add_parser(
        "threads",
        parents=[common],
        help="list threads: checkpoints, namespaces, expiry",
        description="List every thread in the registry, with its checkpoint count, "
        "namespaces and expiry (from the TTL), in registry order.",
    )
    history = sub.add_parser(
        "history",
        parents=[common, ns],
        help="list a thread's checkpoints, newest first",
        description="List the checkpoints of one thread and namespace, newest first: "
        "id, step, source, pending writes, parent.",
    )
    history.add_argument("thread", type=_text, metavar="THREAD", help="thread id")
    history.add_argument(
        "--limit", type=_count, default=20, metavar="N", help="at most N (default: 20; 0: all)"
    )
    show = sub.add_parser(
        "show",
        parents=[common, ns],
        help="print one checkpoint as JSON",
        description="Print one checkpoint, decoded, as JSON: ids, parent, metadata, "
        "channel values and pending writes. LangChain messages become "
        "{type, content, id, ...}; other objects their repr.",
    )
    show.add_argument("thread", type=_text, metavar="THREAD", help="thread id")
    show.add_argument(
        "checkpoint",
        type=_text,
        metavar="CHECKPOINT",
        nargs="?",
        default=None,
        help="default: the newest",
    )
    stats = sub.add_parser(
        "stats",
        parents=[common],
        help="keys and bytes (MEMORY USAGE) per thread",
        description="Sum MEMORY USAGE over every key each registered thread reaches, "
        "largest first. With --scan, also SCAN the prefix (never KEYS) for run sets, for "
        "the metadata index (index_metadata=) and for orphans: keys no registry entry "
        "reaches.",
    )
    stats.add_argument(
        "--scan",
        action="store_true",
        help="also SCAN for run sets, the metadata index and orphans",
    )
    stats.add_argument(
        "--top", type=_count, default=20, metavar="N", help="show the N largest (0: all)"
    )
    stats.add_argument(
        "--progress",
        action="store_true",
        help="draw the progress bar on stderr even when it is not a terminal",
    )
    delete = sub.add_parser(
        "delete",
        parents=[common, confirm],
        help="delete a thread (asks first)",
        description="Delete every checkpoint, write and blob of one thread, in every "
        "namespace. Asks first unless --yes.",
    )
    delete.add_argument("thread", type=_text, metavar="THREAD", help="thread id")
    prune = sub.add_parser(
        "prune",
        parents=[common, confirm],
        help="keep only the newest checkpoint of threads, or delete them (asks first)",
        description="keep_latest keeps the newest checkpoint per namespace (and what it "
        "reads); delete removes the threads. Asks first unless --yes.",
    )
    prune.add_argument("threads", type=_text, metavar="THREAD", nargs="+", help="thread ids")
    prune.add_argument(
        "--strategy",
        choices=("keep_latest", "delete"),
        default="keep_latest",
        help="default: keep_latest",
    )

    migrate = sub.add_parser(
        "migrate",
        help="move a keyspace written by plainredis 0.1.0 into the current layout",
        description="Idempotent and lossless; stop 0.1.0 writers first. Needs the standalone "
        "server 0.1.0 wrote to (not a cluster).",
    )
    migrate.add_argument("--url", required=True, help="Redis URL, e.g. redis://127.0.0.1:6379/0")
    migrate.add_argument(
        "--prefix",
        type=_text,  # any prefix 0.1.0 accepted; checked with --to-prefix in _migrate
        default="lg",
        help="key prefix 0.1.0 used (default: lg)",
    )
    migrate.add_argument(
        "--to-prefix",
        type=_prefix,
        default=None,
        metavar="PREFIX",
        help="key prefix to migrate into (default: --prefix); needed when the savers refuse "
        "0.1.0's, e.g. {agents} or 'my app'; a rerun of an unfinished run needs the same one",
    )
    migrate.add_argument(
        "--ttl",
        type=_migrate_ttl,
        default=None,
        help=f"TTL in seconds for migrated threads ({MIN_TTL} or more)",
    )
    migrate.add_argument(
        "--keep-old",
        action="store_true",
        help="leave the 0.1.0 keys of every thread in place (not 0.1.0's registry, "
        "PREFIX:threads, which the run empties: to go back to 0.1.0, restore a backup)",
    )
    migrate.add_argument(
        "--dry-run",
        action="store_true",
        help="write nothing: make the run's checks, read and decode all it would migrate, "
        "and print what it would migrate and delete",
    )
    for command in sub.choices.values():  # its usage errors show its own usage line
        command.set_defaults(command_parser=command)
    return parser


# -- output helpers ----------------------------------------------------------------------


def _shown(text: str) -> str:
    """Text as typed, or its repr when it is empty or would garble a line."""
    return text if text and text.isprintable() else repr(text)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def _expiry(expires_ms: float | None, now_ms: float) -> str:
    if expires_ms is None:
        return "never"
    if expires_ms < now_ms:
        return "expired"
    try:
        at = datetime.datetime.fromtimestamp(expires_ms / 1000, tz=datetime.timezone.utc)
    except (OverflowError, OSError, ValueError):  # past year 9999: a score no saver writes
        return f"after {datetime.datetime.max:%Y-%m-%d}"
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class ProgressBar:
    """A one-line progress bar on `stream`, redrawn at most ten times a second."""

    WIDTH = 30

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self._phase: str | None = None
        self._drawn = 0.0

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        final = total is not None and done >= total
        if phase == self._phase and not final and now - self._drawn < 0.1:
            return
        if self._phase is not None and phase != self._phase:
            self.stream.write("\n")
        self._phase, self._drawn = phase, now
        if total is None:
            line = f"{phase:<8} {done:,} keys"
        else:
            share = min(done, total) / total if total else 1.0
            filled = int(self.WIDTH * share)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            line = f"{phase:<8} [{bar}] {int(share * 100):3d}% {done:,}/{total:,}"
        self.stream.write("\r" + line)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self._phase is not None:
            self.stream.write("\n")
            self.stream.flush()
            self._phase = None


def _ask(question: str) -> bool:
    """Asks on stderr and reads a line from stdin; only y or yes agrees."""
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    # No stdin at all (closed, as with `0<&-`) is no answer, as an empty one is.
    answer = sys.stdin.readline() if sys.stdin is not None else ""
    if not answer:
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _fail(message: str) -> int:
    print(f"plainredis: error: {message}", file=sys.stderr)
    return 1


# -- commands ----------------------------------------------------------------------------


def _threads(inspector: Inspector, args: argparse.Namespace) -> int:
    now_ms = inspector.server_ms()  # the clock the expiry scores were written against
    threads = inspector.threads()
    first = next(threads, None)  # reach the server before printing anything
    print(f"{'CHECKPOINTS':>11}  {'NS':>3}  {'EXPIRES':<20}  THREAD")
    count = 0
    for info in () if first is None else (first, *threads):
        count += 1
        expires = _expiry(info.expires_ms, now_ms)
        print(f"{info.checkpoints:>11,}  {len(info.namespaces):>3}  {expires:<20}  "
              f"{_shown(info.thread_id)}")  # fmt: skip
    why = "" if count else _why_none(inspector, args)
    print(f"{_plural(count, 'thread')} under prefix {args.prefix!r}{why}", file=sys.stderr)
    return 0


def _why_none(inspector: Inspector, args: argparse.Namespace) -> str:
    """Why no thread is under the prefix, when the keyspace says more than nothing."""
    into = inspector.migrating_into()
    if into is not None:
        marker = LegacyKeys(args.prefix).parked_into
        return (
            f": a migration from it into {into!r} has not finished ({marker!r} records it); "
            f"run `plainredis migrate --url redis://... --prefix {shlex.quote(args.prefix)} "
            f"--to-prefix {shlex.quote(into)}` again, then `plainredis threads --prefix "
            f"{shlex.quote(into)}`"
        )
    if inspector.registry_exists() is False:
        return (
            f": nothing is stored under it (no registry {inspector.keyspace.threads!r}); "
            "is --prefix mistyped? (the savers' default is lg)"
        )
    return ""


def _history(inspector: Inspector, args: argparse.Namespace) -> int:
    entries = inspector.history(args.thread, args.ns, args.limit or None)
    first = next(entries, None)
    if first is None:
        elsewhere = _elsewhere(inspector, args)
        return _fail(
            f"thread {args.thread!r} has no checkpoints in namespace {args.ns!r} under prefix "
            f"{args.prefix!r}: " + (elsewhere or "`plainredis threads` lists the threads there")
        )
    print(f"{'CHECKPOINT':<36}  {'STEP':>5}  {'SOURCE':<6}  {'WRITES':>6}  {'CREATED':<20}  PARENT")
    for entry in (first, *entries):
        step = "-" if entry.step is None else str(entry.step)
        print(
            f"{entry.checkpoint_id:<36}  {step:>5}  {entry.source or '-':<6}  "
            f"{entry.writes:>6}  {entry.ts[:19]:<20}  {entry.parent_id or '-'}"
        )
    return 0


def _history_command(args: argparse.Namespace, ns: str | None = None) -> str:
    """The `history` command for the thread, prefix and namespace (`ns`, else the one
    `args` name) that `args` name, quoted for a POSIX shell (the URL is left out: it may
    carry a password)."""
    ns = args.ns if ns is None else ns
    # argparse takes a word that starts with '-' for an option: such a value is written
    # `--ns=-x`, and such a thread id goes last, after `--`.
    words: list[str] = []
    for flag, value in (("--prefix", "" if args.prefix == "lg" else args.prefix), ("--ns", ns)):
        if value:
            words += [f"{flag}={value}"] if value.startswith("-") else [flag, value]
    if args.thread.startswith("-"):
        return shlex.join(["plainredis", "history", *words, "--", args.thread])
    return shlex.join(["plainredis", "history", args.thread, *words])


def _elsewhere(inspector: Inspector, args: argparse.Namespace) -> str | None:
    """When the thread `args` name has checkpoints, but not in the namespace they name: its
    namespaces, and the command listing the checkpoints of the first; else None."""
    namespaces = inspector.namespaces(args.thread)
    if not namespaces or args.ns in namespaces:
        return None
    return (
        f"its namespaces are {', '.join(map(repr, namespaces))}; "
        f"`{_history_command(args, namespaces[0])}` lists the checkpoints of the first"
    )


def _show(inspector: Inspector, args: argparse.Namespace) -> int:
    doc = inspector.show(args.thread, args.ns, args.checkpoint)
    if doc is None:
        named = args.checkpoint is not None  # '' too: no checkpoint has an empty id
        which = f"checkpoint {args.checkpoint!r}" if named else "no checkpoint"
        elsewhere = _elsewhere(inspector, args)
        return _fail(
            f"{which} in thread {args.thread!r}, namespace {args.ns!r}, prefix "
            f"{args.prefix!r}{' was not found' if named else ''}: "
            + (elsewhere or f"`{_history_command(args)}` lists its checkpoints")
        )
    print(json.dumps(doc, indent=2, ensure_ascii=False))
    return 0


def _render_usage(usage: Usage, top: int) -> None:
    rows = sorted(usage.threads, key=lambda t: (-t.bytes, t.thread_id))
    shown = rows[:top] if top else rows
    print(f"{'BYTES':>13}  {'KEYS':>7}  {'CHECKPOINTS':>11}  {'NS':>3}  THREAD")
    for t in shown:
        print(f"{t.bytes:>13,}  {t.keys:>7,}  {t.checkpoints:>11,}  {t.namespaces:>3}  "
              f"{_shown(t.thread_id)}")  # fmt: skip
    if len(shown) < len(rows):
        print(f"({len(rows) - len(shown):,} smaller threads not shown; --top 0 shows all)")
    n = len(rows)
    total = sum(t.bytes for t in rows)
    average = f"; {total // n:,} bytes per thread on average" if n else ""
    checkpoints = _plural(sum(t.checkpoints for t in rows), "checkpoint")
    keys = _plural(sum(t.keys for t in rows), "key")
    print(f"{_plural(n, 'thread')}: {checkpoints}, {keys}, {total:,} bytes ({_size(total)})"
          f"{average}")  # fmt: skip
    if usage.cluster:
        print("registry: none on a cluster; threads were found by SCAN")
    else:
        print(f"registry: {usage.registry_bytes or 0:,} bytes")
    if usage.expired:
        entries = "entry" if usage.expired == 1 else "entries"
        print(f"expired threads: {usage.expired:,} registry {entries} past their TTL, not "
              "counted above (later puts to the prefix sweep them)")  # fmt: skip
    if not usage.scanned:
        print(
            "run sets, metadata index and orphans: not counted; --scan walks the prefix with "
            "SCAN for them"
        )
        return
    print(f"run sets: {usage.run_keys:,} keys, {usage.run_bytes:,} bytes")
    print(f"metadata index: {usage.index_keys:,} keys, {usage.index_bytes:,} bytes")
    orphan_bytes = sum(size for _, size in usage.orphans)
    print(f"orphans (keys no registered thread reaches): {len(usage.orphans):,} keys, "
          f"{orphan_bytes:,} bytes")  # fmt: skip
    for key, size in sorted(usage.orphans, key=lambda o: -o[1])[:10]:
        print(f"  {size:>11,}  {key}")
    if len(usage.orphans) > 10:
        print(f"  ... and {len(usage.orphans) - 10:,} more")


def _stats(inspector: Inspector, args: argparse.Namespace) -> int:
    bar = ProgressBar(sys.stderr, enabled=args.progress or sys.stderr.isatty())
    try:
        usage = inspector.usage(scan=args.scan, progress=bar)
    finally:
        bar.close()
    _render_usage(usage, args.top)
    return 0


def _delete(inspector: Inspector, args: argparse.Namespace) -> int:
    namespaces, checkpoints = inspector.checkpoint_count(args.thread)
    if not namespaces:
        return _fail(
            f"thread {args.thread!r} has no keys under prefix {args.prefix!r}; nothing to "
            "delete (`plainredis threads` lists the threads there)"
        )
    what = f"thread {args.thread!r} ({_plural(checkpoints, 'checkpoint')})"
    if not args.yes and not _ask(f"Delete {what}?"):
        return _fail("not deleted (pass --yes to skip the question)")
    inspector.delete(args.thread)
    print(f"deleted {what}")
    return 0


def _prune(inspector: Inspector, args: argparse.Namespace) -> int:
    before: dict[str, int] = {}
    for thread in dict.fromkeys(args.threads):
        namespaces, checkpoints = inspector.checkpoint_count(thread)
        if namespaces:
            before[thread] = checkpoints
        else:
            print(f"thread {thread!r} has no keys under prefix {args.prefix!r}; skipped",
                  file=sys.stderr)  # fmt: skip
    if not before:
        return _fail("none of the threads exists; nothing to prune")
    total = _plural(sum(before.values()), "checkpoint")
    count = _plural(len(before), "thread")
    what = "keep only the newest checkpoint of" if args.strategy == "keep_latest" else "delete"
    if not args.yes and not _ask(f"Prune ({args.strategy}): {what} {count} ({total})?"):
        return _fail("not pruned (pass --yes to skip the question)")
    try:
        inspector.prune(list(before), args.strategy)
    except NotImplementedError as exc:  # keep_latest refuses a DeltaChannel's threads
        # The saver's message, in the command line's words.
        return _fail(
            str(exc)
            .replace("prune(strategy='keep_latest')", "prune --strategy keep_latest")
            .replace("strategy='delete'", "--strategy delete")
        )
    after = _plural(sum(inspector.checkpoint_count(thread)[1] for thread in before), "checkpoint")
    print(f"pruned {count} ({args.strategy}): {total} before, {after} now")
    return 0


_STOPPED_THERE = (
    "The run stopped there: threads migrated so far stay migrated, the rest keep their 0.1.0 "
    "keys (the savers refuse the keyspace until they are migrated), and the same command run "
    "again goes on where it stopped"
)


def _stopped_there(args: argparse.Namespace) -> str:
    """What a migration that stopped before its end left behind."""
    return "Nothing was written (--dry-run)" if args.dry_run else _STOPPED_THERE


class _Lines:
    """The lines a migration prints on stdout. When stdout fails (its reader went away, as
    with `| head`, or a full disk), the lines stop and the migration goes on: one stopped
    half-way leaves the keyspace refused by every saver until it is run again."""

    def __init__(self) -> None:
        self.failed: Exception | None = None

    def __call__(self, line: str) -> None:
        if self.failed is not None:
            return
        try:
            print(line)
            sys.stdout.flush()  # each line as it comes, and a failure at once
        except (OSError, _OutputFailed) as exc:
            self.failed = exc.error if isinstance(exc, _OutputFailed) else exc
            _silence_stdout()

    def note(self, report: MigrationReport | None) -> None:
        """Says on stderr, on one line, that stdout failed, with the summary it missed."""
        if self.failed is None:
            return
        went_on = (
            f"the migration went on to its end: {_summary(report)}"
            if report is not None
            else "the run went on without printing until it stopped"
        )
        print(f"plainredis: stdout failed during the migration ({self.failed}); {went_on}",
              file=sys.stderr)  # fmt: skip


def _summary(report: MigrationReport) -> str:
    gone = f" ({len(report.gone):,} gone, skipped)" if report.gone else ""
    migrated, deleted = (
        ("would migrate", "would delete") if report.dry_run else ("migrated", "deleted")
    )
    return (
        f"{migrated} {report.threads:,} thread namespaces{gone}, {report.checkpoints:,} "
        f"checkpoints, {report.blobs:,} blobs, {report.writes:,} writes; {deleted} "
        f"{report.old_keys_deleted:,} old keys"
        + ("; nothing was written (--dry-run)" if report.dry_run else "")
    )


def _migrate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        target = target_prefix(args.prefix, args.to_prefix, ("--prefix", "--to-prefix"))
    except ValueError as exc:
        parser.error(str(exc))
    try:
        check_database(args.url, "it")
        Inspector.check_url_options(args.url)
        # It parses RESP2 replies, as the inspector: a `protocol` in the URL's query would
        # override the argument (and Redis 5 knows no HELLO).
        client = redis.Redis.from_url(_without_protocol(args.url), protocol=2)
    except ValueError as exc:  # redis-py cannot parse the URL, a query option or a database
        parser.error(f"--url {redacted(args.url)!r}: {scrubbed(str(exc), args.url)}")
    try:
        # What the migration's saver refuses (decode_responses=true in the query, say),
        # refused before anything is read or written.
        validate_client(client, "RedisSaver", "sync")
        # The login, before the run: a password that is not UTF-8 cannot be sent, and is
        # refused as the other commands refuse it (a usage error naming --url).
        client.ping()
    except ValueError as exc:
        client.close()
        parser.error(f"--url {redacted(args.url)!r}: {_url_option_error(exc, args.url)}")
    except BaseException:  # a server down or a login refused: `main` says what to do
        client.close()
        raise
    lines = _Lines()
    report: MigrationReport | None = None
    try:
        try:
            report = migrate_v010(
                client,
                args.prefix,
                to_prefix=target,
                ttl=args.ttl,
                keep_old=args.keep_old,
                progress=lines,
                dry_run=args.dry_run,
            )
        finally:
            client.close()
        lines(_summary(report))
        if not report.found:
            lines(
                f"no 0.1.0 registry at {LegacyKeys(args.prefix).registry!r} (and none parked "
                "by an unfinished run): nothing to migrate. Already migrated, or not 0.1.0's "
                "--prefix? (0.1.0's default was lg)"
            )
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        if isinstance(exc, redis.AuthenticationError):
            raise
        # The server answered the PING above: the run had started, and `main`'s "cannot
        # connect" would send the user to start a server that is running.
        return _fail(
            f"lost the connection to {redacted(args.url)} during the migration ({exc}). "
            f"{_stopped_there(args)} (if the connection drops again at the same point, the "
            "server log says why)"
        )
    except KeyboardInterrupt:
        print(f"\nplainredis: interrupted during the migration. {_stopped_there(args)}",
              file=sys.stderr)  # fmt: skip
        return 130
    finally:
        lines.note(report)
    skipped = "a run would skip" if args.dry_run else "skipped"
    for entry in report.skipped:
        print(f"{skipped} unreadable registry entry {entry!r}", file=sys.stderr)
    if report.skipped:
        parked = LegacyKeys(target).stash
        print(
            f"the savers refuse the keyspace until these entries of {parked!r} are repaired "
            "or removed (HDEL) and the migration runs again"
            if not args.dry_run
            else f"a run would park them at {parked!r}, and the savers would refuse the keyspace "
            "until they were repaired or removed (HDEL) and the migration ran again: repair or "
            "remove them first (HDEL from the registry that holds them now)",
            file=sys.stderr,
        )
    return 1 if report.skipped else 0


def _read_only(url: str, command: str) -> str:
    """What a command refused a write by a read-only replica needs."""
    after = (
        " (a run refused at its start changed nothing; one stopped later goes on where it stopped)"
        if command == "migrate"
        else ""
    )
    return (
        f"the server at {url} is a read-only replica (it answered READONLY to a write): "
        "point --url at its primary (`INFO replication` on the replica names it: "
        f"master_host, master_port) and run the command again{after}"
    )


def _url_option_error(error: ValueError, url: str) -> str:
    """The saver's refusal of a client option, in the command line's words, without any
    part of a credential in `url` (`scrubbed`)."""
    if "decode_responses" in str(error):
        return (
            "decode_responses=true in its query makes redis-py decode replies to text, and "
            "checkpoints are raw bytes: remove it from the URL"
        )
    return scrubbed(str(error), url)


def _migrate_refused(url: str, error: Exception, dry_run: bool = False) -> str:
    """What a `migrate` run by a Redis user that may not run one of its commands needs."""
    return (
        f"the Redis user of {url} may not run this ({error}); plainredis migrate needs the "
        "savers' commands plus RENAME, MULTI and EXEC, on the keys of --prefix and of "
        "--to-prefix (docs/operations/access.md, its note on plainredis migrate): run it as a "
        "user that may. "
        + (
            "Nothing was written (--dry-run)"
            if dry_run
            else "The run stopped there: threads migrated so far stay migrated, the rest keep "
            "their 0.1.0 keys, and a rerun goes on where it stopped"
        )
    )


_COMMANDS: dict[str, Callable[[Inspector, argparse.Namespace], int]] = {
    "threads": _threads,
    "history": _history,
    "show": _show,
    "stats": _stats,
    "delete": _delete,
    "prune": _prune,
}


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    parser = getattr(args, "command_parser", parser)  # usage errors show its usage line
    if args.command == "migrate":
        return _migrate(args, parser)
    try:
        inspector = Inspector.connect(args.url, args.prefix, socket_connect_timeout=5)
    except ValueError as exc:  # redis-py cannot parse the URL, or a query option
        parser.error(f"--url {redacted(args.url)!r}: {_url_option_error(exc, args.url)}")
    with inspector:
        try:
            return _COMMANDS[args.command](inspector, args)
        except LegacyKeyspaceError as error:
            raise _naming_the_rerun(error, inspector) from None


def _naming_the_rerun(error: LegacyKeyspaceError, inspector: Inspector) -> LegacyKeyspaceError:
    """`error`, for an unfinished migration, with the prefix it migrates from: read from the
    0.1.0 registry it parked, whose entries the migration parses (a saver reads only whether
    one is parked, so its error asks for the rerun's prefixes)."""
    if error.parked is None or error.source is not None:
        return error
    source = parked_source(inspector.client, error.prefix)
    return LegacyKeyspaceError(error.prefix, error.parked, source)


_KEY_REFUSED = (  # Redis's NOPERM replies for a key outside the user's ACL key patterns
    "access one of the keys",
    "access a key",
    "access at least one of the keys",
)


def _replaceable_output() -> None:
    """Text a terminal's encoding cannot show (an id on a cp1252 console, say) is written
    with backslash escapes rather than failing the command after part of its output."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


class _OutputFailed(Exception):
    """Writing to stdout failed for another reason than its reader going away: `error`."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class _Stdout:
    """`sys.stdout` while a command runs: a write or flush that fails raises `_OutputFailed`
    (a full disk, say), but for a reader gone (`BrokenPipeError`, handled in `main`)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _OutputFailed(exc) from exc

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _OutputFailed(exc) from exc

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


def _silence_stdout() -> None:
    """Points stdout at /dev/null: output still buffered would fail again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a capturing test's buffer, say)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status (argparse exits 2 on bad arguments)."""
    _replaceable_output()
    stdout = sys.stdout
    if stdout is not None:
        sys.stdout = _Stdout(stdout)
    try:
        code = _main(argv)
        sys.stdout.flush()  # a reader gone shows at the last flush too
    except BrokenPipeError:
        # The reader stopped reading (`plainredis threads | head -1`): stop quietly, with
        # the status of a command SIGPIPE ended. (`migrate` goes on: see `_Lines`.)
        _silence_stdout()
        return 128 + 13  # 128 + SIGPIPE
    except _OutputFailed as exc:
        _silence_stdout()
        return _fail(
            f"cannot write the output to stdout ({exc.error}): free space where it goes, or "
            "send it elsewhere"
        )
    finally:
        sys.stdout = stdout
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.url is None:
        args.url = os.environ.get("REDIS_URL") or DEFAULT_URL
    url = redacted(args.url)
    try:
        return _run(args, parser)
    except redis.AuthenticationError as exc:
        # Redis 6 and later, then Redis 5, on an AUTH sent to a server without a password.
        if any(no in str(exc) for no in ("without any password configured", "no password is set")):
            return _fail(
                f"{url} refused the login ({exc}): the server has no password; remove "
                "the user:password (or password= in the query) from the --url"
            )
        return _fail(f"{url} refused the login ({exc}): put user:password in the --url")
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return _fail(
            f"cannot connect to {url} ({exc}): start Redis there, or point --url "
            + ("at your server" if args.command == "migrate" else "(or $REDIS_URL) at your server")
        )
    except redis.exceptions.NoPermissionError as exc:
        if args.command == "migrate":
            return _fail(_migrate_refused(url, exc, args.dry_run))
        if any(reply in str(exc).lower() for reply in _KEY_REFUSED):
            pattern = KeySpace(args.prefix).pattern
            return _fail(
                f"the Redis user of {url} may not access the keys of --prefix "
                f"{args.prefix!r} ({exc}): give it the ACL key pattern ~{pattern} "
                f"(ACL SETUSER <user> ~{pattern}), or pass the --prefix its key patterns cover"
            )
        return _fail(
            f"the Redis user of {url} may not run this ({exc}); the inspector needs the "
            "saver's commands plus TYPE, ZCARD, MEMORY USAGE and SCAN"
        )
    except PlainRedisError as exc:
        return _fail(str(exc))
    except redis.RedisError as exc:
        # A refused EXEC discards the transaction: redis-py raises it as an EXECABORT.
        if args.command == "migrate" and "NOPERM" in str(exc):
            return _fail(_migrate_refused(url, exc, args.dry_run))
        if isinstance(exc, redis.exceptions.ReadOnlyError) or "READONLY" in str(exc):
            # A script's refusal, or a pipeline's, wraps the reply in its own words.
            return _fail(_read_only(url, args.command))
        if "DB index is out of range" in str(exc):
            return _fail(
                f"Redis at {url} has no such database ({exc}): name one it has in --url, "
                "0 up to its `databases` setting less one (16 databases by default: 0 to 15)"
            )
        return _fail(f"Redis at {url} answered with an error: {exc}")
    except KeyboardInterrupt:
        print("\nplainredis: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
