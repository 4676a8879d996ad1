"""Throughput under load: many threads at once through asyncio, and several processes.

    uv run --frozen python bench/bench_load.py [--threads 200] [--turns 20] [--processes 4]

Prints turns per second for AsyncRedisSaver (one process, all threads concurrent) and for
RedisSaver in several processes writing the same threads; writes bench/results/load.md
and load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import time
import uuid
from typing import Annotated, Any, TypedDict

from _progress import Bar
from _results import RESULTS
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_testkit.servers import ServerPool
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def build(saver: Any) -> Any:
    graph = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
    return graph.compile(checkpointer=saver)


async def asyncio_load(url: str, threads: int, turns: int) -> float:
    async with AsyncRedisSaver(url, prefix=f"load:{uuid.uuid4().hex[:8]}") as saver:
        app = build(saver)
        with Bar(f"asyncio: {threads} threads x {turns} turns", threads * turns) as bar:

            async def chat(thread: int) -> None:
                config = {"configurable": {"thread_id": f"t{thread}"}}
                for turn in range(turns):
                    await app.ainvoke({"messages": [HumanMessage(f"q{turn}")]}, config)
                    bar.advance()

            began = time.perf_counter()
            await asyncio.gather(*(chat(t) for t in range(threads)))
            return threads * turns / (time.perf_counter() - began)


def worker(url: str, prefix: str, threads: int, turns: int, offset: int) -> None:
    with RedisSaver(url, prefix=prefix) as saver:
        app = build(saver)
        for turn in range(turns):
            for thread in range(threads):
                config = {"configurable": {"thread_id": f"t{(thread + offset) % threads}"}}
                app.invoke({"messages": [HumanMessage(f"q{turn}")]}, config)


def process_load(url: str, processes: int, threads: int, turns: int) -> float:
    prefix = f"load:{uuid.uuid4().hex[:8]}"
    procs = [
        multiprocessing.Process(target=worker, args=(url, prefix, threads, turns, i))
        for i in range(processes)
    ]
    began = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit("a worker process failed")
    return processes * threads * turns / (time.perf_counter() - began)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--processes", type=int, default=4)
    s = parser.parse_args(argv)
    with ServerPool() as pool:
        url = pool.get("redis-7")
        concurrent = asyncio.run(asyncio_load(url, s.threads, s.turns))
        print(f"processes: {s.processes} x 20 shared threads x 10 turns...", file=sys.stderr)
        shared = process_load(url, s.processes, 20, 10)
    report = "\n".join(
        [
            f"# Throughput on Redis 7 ({time.strftime('%Y-%m-%d %H:%M')}, one machine)",
            "",
            "| load | chat turns per second |",
            "|---|---:|",
            f"| AsyncRedisSaver, {s.threads} threads x {s.turns} turns concurrently | "
            f"{concurrent:,.0f} |",
            f"| RedisSaver, {s.processes} processes on the same 20 threads | {shared:,.0f} |",
            "",
        ]
    )
    print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "load.md").write_text(report)
    numbers = {
        "server": "redis-7",
        "asyncio": {"threads": s.threads, "turns": s.turns, "turns_per_second": concurrent},
        "processes": {
            "processes": s.processes,
            "threads": 20,
            "turns": 10,
            "turns_per_second": shared,
        },
    }
    (RESULTS / "load.json").write_text(json.dumps(numbers, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
