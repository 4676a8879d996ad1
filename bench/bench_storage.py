"""Stored bytes per thread over 1-200 turns: unwrapped, ReducingSaver, ReducingSaver + prune.

The plot a user looks at to understand the product. Real servers from the project's
harness (PostgreSQL 15 and Redis 7); prints the numbers and writes
bench/results/storage.md and bench/results/storage.png.

    uv run --frozen python bench/bench_storage.py [--turns 200] [--every 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
import redis
from _progress import Bar
from _results import RESULTS
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver
from agentstate_testkit.servers import ServerPool
from langgraph_checkpoint_plainredis import RedisSaver

MODES = ("unwrapped", "ReducingSaver", "ReducingSaver + prune")
WORDS = "redis graph state thread window memory latency replica shard key value agent".split()


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: State) -> dict[str, Any]:
    n = len(state["messages"])
    text = " ".join(f"{WORDS[(n * 7 + i) % len(WORDS)]}{(n * 31 + i) % 997}" for i in range(40))
    return {"messages": [AIMessage(content=text)]}


Measure = Callable[[], int]


@contextmanager
def postgres_store(url: str) -> Iterator[tuple[Any, Callable[[str], Measure]]]:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db = url.rsplit("/", 1)[0] + f"/{name}"
    try:
        with PostgresSaver.from_conn_string(db) as saver:
            saver.setup()

            def measure(thread: str) -> Measure:
                def total() -> int:
                    size = 0
                    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                        row = saver.conn.execute(
                            f"select coalesce(sum(pg_column_size(t.*)), 0) as n from {table} t "
                            "where thread_id = %s",
                            (thread,),
                        ).fetchone()
                        size += int(row["n"])  # type: ignore[index]
                    return size

                return total

            yield saver, measure
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@contextmanager
def redis_store(url: str) -> Iterator[tuple[Any, Callable[[str], Measure]]]:
    prefix = f"bench:{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(url, protocol=2)
    with RedisSaver(url, prefix=prefix) as saver:

        def measure(thread: str) -> Measure:
            pattern = f"{prefix}:*{{{saver.keyspace.thread(thread).component}}}*"

            def total() -> int:
                keys = list(client.scan_iter(match=pattern, count=1000))
                return sum(int(client.memory_usage(k) or 0) for k in keys)

            return total

        try:
            yield saver, measure
        finally:
            for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                client.delete(key)
            client.close()


def curve(
    saver: Any, measure: Measure, mode: str, thread: str, s: argparse.Namespace, label: str
) -> dict[int, int]:
    reducer = MessageReducer(config=ReducerConfig(min_messages=4, max_messages=6))
    checkpointer = saver if mode == "unwrapped" else ReducingSaver(saver, reducer)
    graph = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
    app = graph.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": thread}}
    points: dict[int, int] = {}
    with Bar(label, s.turns) as bar:
        for turn in range(1, s.turns + 1):
            app.invoke({"messages": [HumanMessage(f"question {turn}")]}, config)
            if mode.endswith("prune"):
                saver.prune([thread], strategy="keep_latest")
            if turn == 1 or turn % s.every == 0:
                points[turn] = measure()
            bar.advance()
    return points


def render(results: dict[str, dict[str, dict[int, int]]], s: argparse.Namespace) -> str:
    lines = [
        f"# Stored bytes per thread, 1-{s.turns} turns (window of 6 messages)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M')}: PostgreSQL rows (`pg_column_size`) and "
        "Redis `MEMORY USAGE` of the thread's keys, one chat thread per mode.",
        "",
        "![stored bytes per thread](storage.png)",
        "",
    ]
    for store, modes in results.items():
        turns = sorted(next(iter(modes.values())))
        lines += [f"## {store}", "", "| turn | " + " | ".join(MODES) + " |"]
        lines.append("|---:|" + "---:|" * len(MODES))
        for t in turns:
            lines.append(f"| {t} | " + " | ".join(f"{modes[m][t]:,}" for m in MODES) + " |")
        last, mid = turns[-1], turns[len(turns) // 2]
        grow = {
            m: (modes[m][last] - modes[m][mid]) / max(1, modes[m][mid] - modes[m][turns[0]])
            for m in MODES
        }
        lines += [
            "",
            f"Second half over first half of the growth: unwrapped {grow[MODES[0]]:.2f} "
            f"(quadratic: > 1), ReducingSaver {grow[MODES[1]]:.2f} (linear: about 1), "
            f"with prune {modes[MODES[2]][last]:,} bytes at turn {last} against "
            f"{modes[MODES[2]][turns[0]]:,} at turn {turns[0]} (constant).",
            "",
        ]
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[int, int]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    for ax, (store, modes) in zip(axes[0], results.items(), strict=True):
        for mode in MODES:
            turns = sorted(modes[mode])
            ax.plot(turns, [modes[mode][t] / 1e6 for t in turns], marker="o", ms=3, label=mode)
        ax.set_title(f"{store}: one chat thread")
        ax.set_xlabel("turns")
        ax.set_ylabel("stored MB")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--every", type=int, default=10)
    s = parser.parse_args(argv)
    results: dict[str, dict[str, dict[int, int]]] = {}
    with ServerPool() as pool:
        stores = {
            "PostgreSQL 15 (PostgresSaver)": (postgres_store, pool.get("postgres-15")),
            "Redis 7 (plainredis RedisSaver)": (redis_store, pool.get("redis-7")),
        }
        for store, (opener, url) in stores.items():
            results[store] = {}
            with opener(url) as (saver, measure):
                for mode in MODES:
                    thread = f"{mode}-{uuid.uuid4().hex[:6]}"
                    label = f"{store.split(' (')[0]}: {mode}"
                    results[store][mode] = curve(saver, measure(thread), mode, thread, s, label)
    report = render(results, s)
    print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "storage.md").write_text(report + "\n")
    (RESULTS / "storage.json").write_text(json.dumps(results, indent=1))
    plot(results, RESULTS / "storage.png")
    print(f"\nwrote {RESULTS / 'storage.md'} and {RESULTS / 'storage.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
