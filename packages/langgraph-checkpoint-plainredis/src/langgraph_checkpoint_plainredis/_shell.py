"""What the sync and async shells share: construction checks and wrong-side errors."""

from __future__ import annotations

from typing import Any, NoReturn

from ._core import Eval, Scan
from ._scripts import SCRIPTS

__all__ = ["validate_client", "wire_args", "wrong_side"]


def wire_args(command: Eval | Scan | tuple[Any, ...], fallback: bool = False) -> tuple[Any, ...]:
    """The arguments to send for one planned command.

    A script goes as EVALSHA, or as EVAL with its source when `fallback` is set
    (the server has not cached it yet).
    """
    if isinstance(command, Scan):
        raise TypeError("a Scan runs alone in its plan, through the client's scan_iter")
    if not isinstance(command, Eval):
        return command
    script = SCRIPTS[command.script]
    head = ("EVAL", script.source) if fallback else ("EVALSHA", script.sha)
    return (*head, len(command.keys), *command.keys, *command.args)


def validate_client(client: Any, cls: str, expected: str) -> None:
    """Rejects clients the saver cannot use, naming the fix."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if kwargs.get("decode_responses"):
        raise ValueError(
            f"{cls} stores raw bytes and needs a client with decode_responses=False; "
            "create a separate client for the saver (the connection pool can be shared)"
        )
    module = type(client).__module__
    is_async = module.startswith("redis.asyncio")
    if expected == "async" and not is_async and hasattr(client, "execute_command"):
        raise TypeError(
            f"{cls} needs a redis.asyncio client, got {type(client).__module__}."
            f"{type(client).__name__}: use RedisSaver for a blocking client"
        )
    if expected == "sync" and is_async:
        raise TypeError(
            f"{cls} needs a blocking redis client, got {type(client).__module__}."
            f"{type(client).__name__}: use AsyncRedisSaver for a redis.asyncio client"
        )


def wrong_side(cls: str, method: str, other: str, usage: str) -> NoReturn:
    raise NotImplementedError(
        f"{cls}.{method}() is not available: {cls} is {usage}. Use {other} "
        f"(from langgraph_checkpoint_plainredis import {other}) for this calling style."
    )
