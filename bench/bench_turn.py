"""A chat turn of our saver timed alone against InMemorySaver, and the floors under it.

    uv run --frozen python bench/bench_turn.py [--kind redis-7] [--style async|sync]
        [--turns 600] [--work 40,70,100]

`make bench` alternates 36 subjects turn by turn, so each turn starts with caches the others
left cold. Here only these take turns, in an order rotated every turn, each on conversation
threads of its own (ten turns per thread, the graph of `make bench`):

- InMemorySaver;
- ours (`AsyncRedisSaver` for `--style async`, `RedisSaver` for `sync`) on a private server;
- the floor: `make bench`'s InMemorySaver that also makes a `PING` round trip on a plain
  socket per call (asyncio streams for `ainvoke`), the round trip of a one-round-trip-per-call
  saver and nothing else;
- the floor plus W µs of Python per call, for each W of `--work`: how the turn grows with
  the client work of each call (in a blocking turn that work competes for the GIL with the
  graph's own thread).

Prints the median turn of each and its ratio to InMemorySaver's (the first 30 turns of each
warm up and are not counted); writes bench/results/turn.md and turn.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from _floor import PingingMemorySaver
from _results import RESULTS
from _v010_probe import chat_graph, human_message, thread_config
from langgraph.checkpoint.memory import InMemorySaver

from agentstate_testkit import servers
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver

WARM = 30


def spin(micros: int) -> None:
    """Holds the CPU (and the GIL) for `micros` µs, as Python work would."""
    end = time.perf_counter_ns() + micros * 1000
    while time.perf_counter_ns() < end:
        pass


class _Working:
    """A pinger that spends `work` µs of Python before each `PING`."""

    def __init__(self, pinger: Any, work: int) -> None:
        self.pinger, self.work = pinger, work

    def ping(self) -> None:
        spin(self.work)
        self.pinger.ping()

    async def aping(self) -> None:
        spin(self.work)
        await self.pinger.aping()

    async def aclose(self) -> None:
        await self.pinger.aclose()


def floor_saver(url: str, work: int) -> PingingMemorySaver:
    """`make bench`'s raw-PING floor (blocking or asyncio, as called), plus `work` µs a call."""
    saver = PingingMemorySaver(url, raw=True)
    if work:
        saver.pinger = _Working(saver.pinger, work)  # type: ignore[assignment]
    return saver


async def run(url: str, style: str, turns: int, works: list[int]) -> dict[str, float]:
    ours = (
        AsyncRedisSaver(url, prefix="turn") if style == "async" else RedisSaver(url, prefix="turn")
    )
    savers: dict[str, Any] = {"InMemorySaver": InMemorySaver(), "ours": ours}
    savers["floor"] = floor_saver(url, 0)
    for work in works:
        savers[f"floor + {work} µs a call"] = floor_saver(url, work)
    graphs = {
        name: chat_graph(saver, asynchronous=style == "async") for name, saver in savers.items()
    }
    names = list(graphs)
    took: dict[str, list[int]] = {name: [] for name in names}

    async def turn(name: str, n: int) -> int:
        message = {"messages": [human_message(n // 10, n % 10)]}
        config = thread_config(f"{name}-{n // 10}")
        started = time.perf_counter_ns()
        if style == "async":
            await graphs[name].ainvoke(message, config)
        else:
            graphs[name].invoke(message, config)
        return time.perf_counter_ns() - started

    try:
        for n in range(WARM + turns):
            shift = n % len(names)
            for name in names[shift:] + names[:shift]:
                took[name].append(await turn(name, n))
    finally:
        if isinstance(ours, AsyncRedisSaver):
            await ours.aclose()
        else:
            ours.close()
        for saver in savers.values():
            if isinstance(saver, PingingMemorySaver):
                await saver.aclose()
    return {name: statistics.median(times[WARM:]) / 1e3 for name, times in took.items()}


def render(medians: dict[str, float], kind: str, style: str, turns: int) -> str:
    base = medians["InMemorySaver"]
    rows = [f"| {name} | {us:,.0f} | {us / base:.2f}× |" for name, us in medians.items()]
    call = "ainvoke" if style == "async" else "invoke"
    return "\n".join(
        [
            f"# Chat turn alone: {call}, {kind}",
            "",
            f"{turns} turns each, alternating, median µs (after {WARM} warm-up turns).",
            "",
            "| saver | median µs | × InMemorySaver |",
            "|:---|---:|---:|",
            *rows,
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="redis-7", help="server kind (agentstate_testkit)")
    parser.add_argument("--style", choices=("async", "sync"), default="async")
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--work", default="40,70,100", help="µs of work per call, comma-separated")
    args = parser.parse_args()
    works = [int(w) for w in args.work.split(",") if w]
    with servers.start(args.kind) as server:
        medians = asyncio.run(run(server.url, args.style, args.turns, works))
    text = render(medians, args.kind, args.style, args.turns)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "turn.md").write_text(text, encoding="utf-8")
    record = {"kind": args.kind, "style": args.style, "turns": args.turns, "median_us": medians}
    (RESULTS / "turn.json").write_text(json.dumps(record, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
