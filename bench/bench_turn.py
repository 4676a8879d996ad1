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

Prints the median turn of each, its ratio to InMemorySaver's and the median CPU time the
process spent in it (all its threads: a blocking turn's writes run on workers), the first 30
turns of each left out as warm-up; then how many script calls ours made per turn and the
server's time per call (`INFO commandstats`). Ours less InMemorySaver in CPU is the client work
our calls add; ours less the floor in wall time is all they add (that work, the server's and
the waits on either side). Writes bench/results/turn.md and turn.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any, NamedTuple

import redis
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


class Measured(NamedTuple):
    wall: dict[str, float]  # median µs per turn, by subject
    cpu: dict[str, float]  # median µs of process CPU per turn, by subject
    scripts: float  # our script calls per turn
    server: float  # server µs per script call


def script_stats(url: str) -> tuple[int, float]:
    """EVALSHA and EVAL calls so far on the server at `url`, and their server µs."""
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    rows = [stats.get(f"cmdstat_{name}", {}) for name in ("evalsha", "eval")]
    return sum(row.get("calls", 0) for row in rows), sum(row.get("usec", 0) for row in rows)


async def run(url: str, style: str, turns: int, works: list[int]) -> Measured:
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
    used: dict[str, list[int]] = {name: [] for name in names}

    async def turn(name: str, n: int) -> None:
        message = {"messages": [human_message(n // 10, n % 10)]}
        config = thread_config(f"{name}-{n // 10}")
        started, cpu = time.perf_counter_ns(), time.process_time_ns()
        if style == "async":
            await graphs[name].ainvoke(message, config)
        else:
            graphs[name].invoke(message, config)
        took[name].append(time.perf_counter_ns() - started)
        used[name].append(time.process_time_ns() - cpu)

    calls, usec = script_stats(url)
    try:
        for n in range(WARM + turns):
            if n == WARM:  # from here on turns count
                calls, usec = script_stats(url)
            shift = n % len(names)
            for name in names[shift:] + names[:shift]:
                await turn(name, n)
        calls_after, usec_after = script_stats(url)
    finally:
        if isinstance(ours, AsyncRedisSaver):
            await ours.aclose()
        else:
            ours.close()
        for saver in savers.values():
            if isinstance(saver, PingingMemorySaver):
                await saver.aclose()

    def medians(samples: dict[str, list[int]]) -> dict[str, float]:
        return {name: statistics.median(values[WARM:]) / 1e3 for name, values in samples.items()}

    scripts = calls_after - calls
    return Measured(
        medians(took), medians(used), scripts / turns, (usec_after - usec) / max(scripts, 1)
    )


def render(measured: Measured, kind: str, style: str, turns: int) -> str:
    base = measured.wall["InMemorySaver"]
    rows = [
        f"| {name} | {us:,.0f} | {us / base:.2f}× | {measured.cpu[name]:,.0f} |"
        for name, us in measured.wall.items()
    ]
    call = "ainvoke" if style == "async" else "invoke"
    return "\n".join(
        [
            f"# Chat turn alone: {call}, {kind}",
            "",
            f"{turns} turns each, alternating, median µs (after {WARM} warm-up turns).",
            "",
            "| saver | median µs | × InMemorySaver | CPU µs |",
            "|:---|---:|---:|---:|",
            *rows,
            "",
            f"Ours made {measured.scripts:.1f} script calls a turn, each taking the server "
            f"{measured.server:.0f} µs (`INFO commandstats`).",
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", default="redis-7", help="server kind (agentstate_testkit)")
    parser.add_argument("--style", choices=("async", "sync"), default="async")
    parser.add_argument("--turns", type=int, default=600, help="timed turns per subject, 1 or more")
    parser.add_argument("--work", default="40,70,100", help="µs of work per call, comma-separated")
    args = parser.parse_args()
    if args.turns < 1:
        parser.error(f"--turns {args.turns}: pass 1 or more (each subject is timed that often)")
    try:
        works = [int(w) for w in args.work.split(",") if w]
    except ValueError:
        parser.error(f"--work {args.work!r}: pass whole µs, comma-separated, e.g. 40,100")
    if any(w < 0 for w in works):
        parser.error(f"--work {args.work!r}: µs of work cannot be negative")
    with servers.start(args.kind) as server:
        measured = asyncio.run(run(server.url, args.style, args.turns, works))
    text = render(measured, args.kind, args.style, args.turns)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "turn.md").write_text(text, encoding="utf-8")
    record = {
        "kind": args.kind,
        "style": args.style,
        "turns": args.turns,
        "median_us": measured.wall,
        "median_cpu_us": measured.cpu,
        "script_calls_per_turn": measured.scripts,
        "server_us_per_script_call": measured.server,
    }
    (RESULTS / "turn.json").write_text(json.dumps(record, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
