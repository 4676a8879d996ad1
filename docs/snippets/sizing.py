"""Measure what one chat thread costs in Redis: bytes per thread and per turn.

Runs a 50-turn chat graph (a ~60-character question and a ~550-character answer per
turn) on `RedisSaver`, with and without `ReducingSaver` and `prune`, each variant under a
fresh prefix, and sums `MEMORY USAGE <key> SAMPLES 0` over every key under that prefix
(SCAN, never KEYS). Deletes what it wrote.

    REDIS_URL=redis://127.0.0.1:6379/0 uv run --frozen python docs/snippets/sizing.py
    uv run --frozen python docs/snippets/sizing.py redis-5 redis-7 valkey   # private servers
"""

from __future__ import annotations

import os
import random
import sys
import uuid
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer.langgraph import ReducingSaver
from langgraph_checkpoint_plainredis import RedisSaver

TURNS = 50
WORDS = "redis graph state thread window memory latency replica shard key value turn".split()


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: State) -> dict[str, Any]:
    # Varied text from a seeded generator, so compression has no easy repetition.
    rng = random.Random(len(state["messages"]))
    answer = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(60))
    return {"messages": [AIMessage(content=answer)]}


def question(turn: int) -> HumanMessage:
    return HumanMessage(f"Question number {turn}: how does the checkpointer store turn {turn}?")


def bytes_under(client: redis.Redis, prefix: str) -> tuple[int, int]:
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    return len(keys), sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)


def run(url: str, reduce: bool, prune: bool) -> list[tuple[int, int]]:
    """(keys, bytes) after each turn of one thread."""
    prefix = f"sizing:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(url, protocol=2)
    sizes = []
    with RedisSaver(url, prefix=prefix) as saver:
        checkpointer: Any = saver
        if reduce:
            reducer = MessageReducer(config=ReducerConfig(min_messages=10, max_messages=20))
            checkpointer = ReducingSaver(saver, reducer)
        graph = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
        app = graph.compile(checkpointer=checkpointer)
        config = {"configurable": {"thread_id": "user-42:session-7"}}
        for turn in range(1, TURNS + 1):
            app.invoke({"messages": [question(turn)]}, config)
            if prune:
                saver.prune(["user-42:session-7"], strategy="keep_latest")
            sizes.append(bytes_under(client, prefix))
        saver.delete_thread("user-42:session-7")
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)
    client.close()
    return sizes


VARIANTS: list[tuple[str, Callable[[str], list[tuple[int, int]]]]] = [
    ("RedisSaver", lambda url: run(url, reduce=False, prune=False)),
    ("RedisSaver + prune(keep_latest) each turn", lambda url: run(url, False, True)),
    ("ReducingSaver (window 20) around RedisSaver", lambda url: run(url, True, False)),
    ("ReducingSaver (window 20) + prune(keep_latest)", lambda url: run(url, True, True)),
]


def report(url: str, label: str) -> None:
    info = redis.Redis.from_url(url, protocol=2).info("server")
    server = f"{'Valkey' if 'valkey_version' in info else 'Redis'} "
    server += str(info.get("valkey_version") or info["redis_version"])
    print(f"\n{label}: {server}, {TURNS}-turn thread, MEMORY USAGE SAMPLES 0\n")
    print("| variant | keys | after turn 10 | after turn 50 | turn 10 added | turn 50 added |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, variant in VARIANTS:
        sizes = variant(url)
        keys, last = sizes[-1]
        tenth = sizes[9][1] - sizes[8][1]
        added = last - sizes[-2][1]
        print(f"| {name} | {keys:,} | {sizes[9][1]:,} | {last:,} | {tenth:,} | {added:,} |")


def main(kinds: list[str]) -> None:
    if not kinds:
        report(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), "REDIS_URL")
        return
    from agentstate_testkit.servers import start

    for kind in kinds:
        with start(kind) as server:
            report(server.url, kind)


if __name__ == "__main__":
    main(sys.argv[1:])
