"""Exceptions raised by the savers. Each names the key or value at fault and the fix."""

from __future__ import annotations

import shlex

__all__ = ["CorruptDataError", "LegacyKeyspaceError", "PlainRedisError", "WrongTypeError"]


# How a refusal ends. Read-only calls and commands (`get_tuple`, `plainredis threads`) raise
# these errors too, so it does not say that a write was refused: only that none was made.
UNCHANGED = "The keyspace is unchanged."


class PlainRedisError(Exception):
    """Base class of every error this package raises on its own account."""


class CorruptDataError(PlainRedisError, ValueError):
    """A stored value cannot be decoded.

    Attributes:
        key: The Redis key that holds the value.
    """

    def __init__(self, key: str, reason: str, fix: str | None = None) -> None:
        self.key = key
        super().__init__(
            f"Redis key {key!r} does not hold a valid plainredis payload ({reason}); it was "
            "truncated, corrupted or written by another program. "
            + (
                fix
                or "The rest of the thread is unaffected: delete this key (or restore it from "
                "a backup) to clear the error."
            )
        )


class WrongTypeError(PlainRedisError, TypeError):
    """A key under the saver's prefix holds a Redis type the layout does not use there."""

    def __init__(self, key: str, found: str, expected: str, fix: str | None = None) -> None:
        self.key = key
        super().__init__(
            f"Redis key {key!r} is a {found}, but the plainredis layout keeps a {expected} "
            "there. "
            + (
                fix
                or "Another program writes under this prefix: give the saver its own "
                f"prefix= (or database), or delete the foreign key. {UNCHANGED}"
            )
        )


class LegacyKeyspaceError(PlainRedisError):
    """The prefix holds data in the layout of langgraph-checkpoint-plainredis 0.1.0.

    Attributes:
        prefix: The prefix the saver or command was given.
        parked: Where an unfinished migration into `prefix` parked 0.1.0's registry, or None
            when the prefix holds 0.1.0's registry itself (never migrated).
        source: The prefix 0.1.0 wrote under that the unfinished migration reads from, when
            it was read from the parked registry (its fields are 0.1.0 keys of that prefix).
    """

    def __init__(self, prefix: str, parked: str | None = None, source: str | None = None) -> None:
        self.prefix = prefix
        self.parked = parked
        self.source = source
        if not parked:
            super().__init__(
                f"The keys under {prefix!r} were written by langgraph-checkpoint-plainredis "
                "0.1.0. Stop every process that uses this prefix (0.1.0 writers and upgraded "
                "savers alike: a saver left running during the migration reads the threads "
                "not migrated yet as empty), then migrate them once, losslessly and "
                f"idempotently, with `plainredis migrate --url redis://... --prefix "
                f"{shlex.quote(prefix)}` or `langgraph_checkpoint_plainredis.migrate_v010("
                f"client, prefix={prefix!r})`. {UNCHANGED}"
            )
            return
        what = (
            f"A migration into {prefix!r} of keys written by langgraph-checkpoint-plainredis "
            f"0.1.0 has not finished: 0.1.0's registry is still parked at {parked!r}, and the "
            "threads it names would read as empty. With every process that uses this prefix "
            "stopped, run it again (it goes on where it stopped; an entry it reported "
            "unreadable must be repaired or removed from that hash first) "
        )
        if source is None:  # a rerun must name the same source and target as the run
            how = (
                "with the same --prefix and --to-prefix as the run that stopped: `plainredis "
                f"migrate --url redis://... --prefix OLD --to-prefix {shlex.quote(prefix)}` or "
                "`langgraph_checkpoint_plainredis.migrate_v010(client, prefix=OLD, "
                f"to_prefix={prefix!r})`, where OLD is the prefix 0.1.0 wrote under ({prefix!r} "
                f"itself for a migration in place; the fields of {parked!r} start with it)"
            )
        else:
            into = "" if source == prefix else f" --to-prefix {shlex.quote(prefix)}"
            to = "" if source == prefix else f", to_prefix={prefix!r}"
            how = (
                f"with `plainredis migrate --url redis://... --prefix {shlex.quote(source)}"
                f"{into}` or `langgraph_checkpoint_plainredis.migrate_v010(client, "
                f"prefix={source!r}{to})`"
            )
        super().__init__(f"{what}{how}. {UNCHANGED}")


class ArgumentTypeError(TypeError, ValueError):
    """A `ttl` or `prefix` of the wrong type. Both a `TypeError` (its kind) and a
    `ValueError` (every invalid `ttl` or `prefix` is one), so either ``except`` catches it."""
