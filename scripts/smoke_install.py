"""Smoke-tests one installed package, in an environment that has only it and its dependencies.

Usage: python scripts/smoke_install.py DIST [--extra NAME ...]

DIST is one of the workspace's packages; run it with the Python of a fresh venv into which
only that package's wheel was installed (the release workflow and the packaging tests do).
It imports nothing from the repository. `langgraph-checkpoint-plainredis` needs a running
Redis at `REDIS_URL`. `--extra` also checks what an installed extra of the package brings:
`langgraph` or `tokens` for `agentstate-reducer`. Exits non-zero with the reason on failure.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable
from typing import Any

MODULES = {
    "agentstate-reducer": "agentstate_reducer",
    "agentstate-reducer-langgraph": "agentstate_reducer_langgraph",
    "langgraph-checkpoint-plainredis": "langgraph_checkpoint_plainredis",
}


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"smoke: FAILED: {what}")


def conversation(turns: int) -> list[list[dict[str, str]]]:
    return [
        [
            {"role": "user", "content": f"q{n}", "id": f"q{n}"},
            {"role": "assistant", "content": f"a{n}", "id": f"a{n}"},
        ]
        for n in range(turns)
    ]


def smoke_reducer() -> None:
    from agentstate_reducer import MessageReducer, ReducerConfig

    delivered: list[dict[str, str]] = []
    reducer = MessageReducer(
        config=ReducerConfig(
            min_messages=4,
            max_messages=6,
            on_prune=[lambda pruned, _namespace: delivered.extend(pruned)],
        )
    )
    kept: list[dict[str, str]] = []
    sent: list[str] = []
    for turn in conversation(10):
        sent += [m["content"] for m in turn]
        kept = reducer.reduce(kept, turn, ("memories", "smoke")).surviving
    check(len(kept) <= 6, f"the window holds at most 6 messages, got {len(kept)}")
    check(kept[-1]["content"] == "a9", f"the newest answer survives, got {kept}")
    gone = [m["content"] for m in delivered]
    check(len(gone) == len(set(gone)), f"each pruned message is delivered once, got {gone}")
    check(
        sorted(gone + [m["content"] for m in kept]) == sorted(sent),
        f"every message survives or is delivered: {gone} + {kept}",
    )


def smoke_reducer_langgraph_import_error() -> None:
    try:
        importlib.import_module("agentstate_reducer.langgraph")
    except ImportError as error:
        check("agentstate-reducer[langgraph]" in str(error), f"the error names the fix: {error}")
    else:
        raise SystemExit("smoke: FAILED: agentstate_reducer.langgraph imported without the extra")


def smoke_reducing_saver(import_path: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.memory import InMemorySaver

    from agentstate_reducer import MessageReducer, ReducerConfig

    reducing_saver = importlib.import_module(import_path).ReducingSaver
    delivered: list[Any] = []
    reducer = MessageReducer(
        config=ReducerConfig(
            min_messages=4,
            max_messages=6,
            on_prune=[lambda pruned, _namespace: delivered.extend(pruned)],
        )
    )
    saver = reducing_saver(InMemorySaver(), reducer)
    config: Any = {"configurable": {"thread_id": "smoke", "checkpoint_ns": ""}}
    messages = [m for turn in conversation(10) for m in turn]
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": 1}
    saver.put(config, checkpoint, {"source": "input", "step": -1}, {"messages": 1})
    stored = saver.get_tuple({"configurable": {"thread_id": "smoke"}})
    check(stored is not None, "the saver returns what it stored")
    kept = stored.checkpoint["channel_values"]["messages"]
    check(len(kept) <= 6 and kept[-1]["content"] == "a9", f"a bounded window is stored: {kept}")
    check(len(delivered) + len(kept) == len(messages), "the cut messages were delivered")


def smoke_plainredis() -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver

    url = os.environ.get("REDIS_URL")
    check(bool(url), "set REDIS_URL to a running Redis (5.0 or newer)")
    prefix = f"smoke:{uuid.uuid4().hex[:12]}"

    def put(saver: Any, thread: str) -> Any:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": ["hello"]}
        checkpoint["channel_versions"] = {"messages": saver.get_next_version(None, None)}
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        return config, checkpoint, {"source": "input", "step": -1}, checkpoint["channel_versions"]

    with RedisSaver(url, prefix=prefix) as saver:
        saver.put(*put(saver, "sync"))
        found = saver.get_tuple({"configurable": {"thread_id": "sync"}})
        check(found is not None, "RedisSaver returns what it stored")
        check(found.checkpoint["channel_values"] == {"messages": ["hello"]}, f"got {found}")
        check(len(list(saver.list({"configurable": {"thread_id": "sync"}}))) == 1, "one listed")
        saver.delete_thread("sync")
        check(saver.get_tuple({"configurable": {"thread_id": "sync"}}) is None, "deleted")

    async def run_async() -> None:
        async with AsyncRedisSaver(url, prefix=prefix) as saver:
            await saver.aput(*put(saver, "async"))
            found = await saver.aget_tuple({"configurable": {"thread_id": "async"}})
            check(found is not None, "AsyncRedisSaver returns what it stored")
            await saver.adelete_thread("async")
            check(await saver.aget_tuple({"configurable": {"thread_id": "async"}}) is None, "gone")

    asyncio.run(run_async())


SMOKES: dict[str, Callable[[], None]] = {
    "agentstate-reducer": smoke_reducer,
    "agentstate-reducer-langgraph": lambda: smoke_reducing_saver("agentstate_reducer_langgraph"),
    "langgraph-checkpoint-plainredis": smoke_plainredis,
}


def smoke_extra(dist: str, extra: str) -> None:
    if (dist, extra) == ("agentstate-reducer", "langgraph"):
        smoke_reducing_saver("agentstate_reducer.langgraph")
    elif (dist, extra) == ("agentstate-reducer", "tokens"):
        importlib.import_module("tiktoken")
    else:
        raise SystemExit(f"smoke: {dist} has no extra {extra!r} to check")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", choices=sorted(MODULES))
    parser.add_argument("--extra", action="append", default=[])
    args = parser.parse_args(argv)
    module = importlib.import_module(MODULES[args.dist])
    installed = importlib.metadata.version(args.dist)
    check(module.__version__ == installed, f"__version__ {module.__version__} != {installed}")
    check(os.path.isfile(os.path.join(os.path.dirname(module.__file__), "py.typed")), "py.typed")
    check(bool(module.__all__), "a public API in __all__")
    for name in module.__all__:
        check(hasattr(module, name), f"{MODULES[args.dist]}.{name} in __all__ exists")
    SMOKES[args.dist]()
    without_extra = importlib.util.find_spec("agentstate_reducer_langgraph") is None
    if args.dist == "agentstate-reducer" and without_extra:
        smoke_reducer_langgraph_import_error()
    for extra in args.extra:
        smoke_extra(args.dist, extra)
    print(f"smoke: {args.dist} {installed} ok ({sys.executable})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
