"""The benchmark's chat graph and keyspace sizing, and a probe that runs them with 0.1.0.

`bench_savers.py` imports the graph and the sizing from here, so our saver and 0.1.0's
store the very same conversation. 0.1.0 has our import name, so it runs only in its own
venv: `bench_savers.py` builds one and runs `python bench/_v010_probe.py --prefix P
--thread T --turns N URL...` there, which prints one JSON object. This module may
import only what that venv has: langgraph, langchain-core and redis.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import time
from collections.abc import Iterator
from typing import Annotated, Any

import redis
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from typing_extensions import TypedDict

__all__ = [
    "ChatState",
    "chat_graph",
    "delete_prefix",
    "human_message",
    "keyspace_size",
    "run_thread",
    "thread_config",
]

_VOCABULARY_SIZE = 3_000
_SYLLABLES = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]


def _vocabulary() -> tuple[list[str], list[float]]:
    """Pseudo-words with Zipf weights: text that compresses about as well as prose."""
    rng = random.Random(2024)
    words: set[str] = set()
    while len(words) < _VOCABULARY_SIZE:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
    ordered = sorted(words)
    rng.shuffle(ordered)
    weights = itertools.accumulate(1 / rank for rank in range(1, _VOCABULARY_SIZE + 1))
    return ordered, list(weights)


_WORDS, _CUM_WEIGHTS = _vocabulary()


def _text(seed: str, low: int, high: int) -> str:
    rng = random.Random(seed)
    words = rng.choices(_WORDS, cum_weights=_CUM_WEIGHTS, k=rng.randint(low, high))
    return " ".join(words).capitalize() + "."


def human_message(thread_index: int, turn: int) -> HumanMessage:
    """The user's message of one turn: 12-24 words, the same in every run."""
    return HumanMessage(content=_text(f"human:{thread_index}:{turn}", 12, 24), id=f"h{turn}")


class ChatState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _reply(state: ChatState) -> dict[str, list[AnyMessage]]:
    last = state["messages"][-1]
    turn = sum(isinstance(m, HumanMessage) for m in state["messages"])
    content = _text(f"ai:{last.content}", 50, 70)
    return {"messages": [AIMessage(content=content, id=f"a{turn}")]}


async def _areply(state: ChatState) -> dict[str, list[AnyMessage]]:
    return _reply(state)


def chat_graph(
    checkpointer: BaseCheckpointSaver[Any], *, asynchronous: bool = False
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """START -> chat -> END; `chat` appends an AIMessage of 50-70 words (async for ainvoke)."""
    builder = StateGraph(ChatState)
    builder.add_node("chat", _areply if asynchronous else _reply)
    builder.add_edge(START, "chat")
    builder.add_edge("chat", END)
    return builder.compile(checkpointer=checkpointer)


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


def run_thread(checkpointer: BaseCheckpointSaver[Any], thread_id: str, turns: int) -> None:
    """Runs `turns` chat turns on one thread with `graph.invoke`."""
    graph = chat_graph(checkpointer)
    for turn in range(turns):
        graph.invoke({"messages": [human_message(0, turn)]}, thread_config(thread_id))


def _scan(client: redis.Redis, prefix: str) -> Iterator[list[bytes]]:
    """Batches of the keys under `prefix` (SCAN, never KEYS)."""
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        batch.append(key)
        if len(batch) == 500:
            yield batch
            batch = []
    if batch:
        yield batch


def _value_bytes(kind: str, reply: Any) -> int:
    if kind == "string":
        return int(reply)
    if kind == "hash":
        return sum(len(f) + len(v) for f, v in reply.items())
    return sum(len(member) for member in reply)  # zset, set, list


def keyspace_size(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """MEMORY USAGE (SAMPLES 0) and raw value bytes of every key under `prefix`.

    Raw bytes are string lengths, hash fields plus values, and set or zset members.
    `families` splits both by the key segment after the prefix (cp, blob, wr, idx...).
    """
    total = {"keys": 0, "memory_usage": 0, "raw_bytes": 0}
    families: dict[str, dict[str, int]] = {}
    for keys in _scan(client, prefix):
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.memory_usage(key, samples=0)
            pipe.type(key)
        replies = pipe.execute()
        kinds = [k.decode() for k in replies[1::2]]
        reads = {
            "string": "strlen",
            "hash": "hgetall",
            "zset": "zrange",
            "set": "smembers",
            "list": "lrange",
        }
        pipe = client.pipeline(transaction=False)
        for key, kind in zip(keys, kinds, strict=True):
            method = reads[kind]
            if method in ("zrange", "lrange"):
                getattr(pipe, method)(key, 0, -1)
            else:
                getattr(pipe, method)(key)
        values = pipe.execute()
        for key, memory, kind, value in zip(keys, replies[0::2], kinds, values, strict=True):
            family = key.decode()[len(prefix) + 1 :].split(":", 1)[0]
            raw = _value_bytes(kind, value)
            entry = families.setdefault(family, {"keys": 0, "memory_usage": 0, "raw_bytes": 0})
            for counts in (total, entry):
                counts["keys"] += 1
                counts["memory_usage"] += int(memory or 0)
                counts["raw_bytes"] += raw
    return {**total, "families": families}


def delete_prefix(client: redis.Redis, prefix: str) -> int:
    """Deletes every key under `prefix` (SCAN, then DEL in batches); returns the count."""
    deleted = 0
    for keys in _scan(client, prefix):
        deleted += int(client.delete(*keys))
    return deleted


def _probe(urls: list[str], prefix: str, thread_id: str, turns: int) -> dict[str, Any]:
    import langgraph_checkpoint_plainredis as v010

    version = getattr(v010, "__version__", "?")
    if version != "0.1.0":
        raise SystemExit(
            f"_v010_probe: langgraph_checkpoint_plainredis is {version}, not 0.1.0: "
            "run this probe with the 0.1.0 venv's python (bench_savers.py does)"
        )
    results = {}
    for url in urls:
        client = redis.Redis.from_url(url, protocol=2)
        try:
            started = time.perf_counter_ns()
            run_thread(v010.RedisSaver(url=url, prefix=prefix), thread_id, turns)
            elapsed = time.perf_counter_ns() - started
            results[url] = {**keyspace_size(client, prefix), "seconds": elapsed / 1e9}
        finally:
            delete_prefix(client, prefix)
            client.close()
    return {"version": version, "results": results}


def _chat_turns(url: str, prefix: str, threads: int, turns: int) -> dict[str, Any]:
    """Median chat turn of 0.1.0 and of InMemorySaver, timed alternately in this process.

    The same procedure as bench_savers.py's chat section (every saver takes each turn in
    turn), so the ratio to InMemorySaver compares with the ratios measured there.
    """
    import asyncio
    import statistics

    from langgraph.checkpoint.memory import InMemorySaver

    import langgraph_checkpoint_plainredis as v010

    async def style(asynchronous: bool) -> dict[str, float]:
        old = v010.AsyncRedisSaver(url=url, prefix=prefix) if asynchronous else None
        savers = {
            "memory": InMemorySaver(),
            "v010": old if old is not None else v010.RedisSaver(url=url, prefix=prefix),
        }
        graphs = {
            name: chat_graph(saver, asynchronous=asynchronous) for name, saver in savers.items()
        }
        samples: dict[str, list[int]] = {name: [] for name in graphs}
        tag = "a" if asynchronous else "s"
        for turn in range(-2, turns):  # two warm-up turns
            for i in range(threads):
                for name, graph in graphs.items():
                    state = {"messages": [human_message(i, max(turn, 0))]}
                    config = thread_config(f"chat-{tag}-{name}-{i}-{turn < 0}")
                    started = time.perf_counter_ns()
                    if asynchronous:
                        await graph.ainvoke(state, config)
                    else:
                        graph.invoke(state, config)
                    if turn >= 0:
                        samples[name].append(time.perf_counter_ns() - started)
        if old is not None:
            await old.aclose()
        memory, ours = (statistics.median(samples[n]) / 1e3 for n in ("memory", "v010"))
        return {"memory_us": memory, "v010_us": ours, "ratio": ours / memory}

    client = redis.Redis.from_url(url, protocol=2)
    try:
        return {"sync": asyncio.run(style(False)), "async": asyncio.run(style(True))}
    finally:
        delete_prefix(client, prefix)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--turns", type=int, required=True)
    parser.add_argument("--chat-url", help="also time chat turns against InMemorySaver here")
    parser.add_argument("--chat-threads", type=int, default=10)
    parser.add_argument("--chat-turns", type=int, default=10)
    parser.add_argument("urls", nargs="+")
    args = parser.parse_args()
    result = _probe(args.urls, args.prefix, args.thread, args.turns)
    if args.chat_url:
        prefix = f"{args.prefix}-chat"
        result["chat"] = _chat_turns(args.chat_url, prefix, args.chat_threads, args.chat_turns)
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
