"""What the server spends on the bytes a script call moves, per server kind.

    uv run --frozen python bench/bench_script_bytes.py [--kinds redis-5,redis-7,redis-8,valkey]
        [--turns 300]

Every call of ours is one Lua script, and every value it stores or reads passes through Lua
as a string. Redis 7.0 made Lua hash every byte of a string it creates (redis/redis#9449;
before, it sampled at most 32 of them), so from Redis 7 a script pays for each byte it is
passed (ARGV) or reads (GET), where a plain GET or SET only copies it; Valkey hashes them
faster (MurmurHash3, valkey-io/valkey#1168). This prints, for each server kind:

1. the server's time per call (`INFO commandstats`) of a script that reads one value of
   1 KiB, 16 KiB and 256 KiB (`GET`) or is passed one (`ARGV`), against a plain `GET`: what a
   byte moved through Lua costs;
2. the server's time per `put` and per `get_tuple` of ours on one chat thread's newest
   checkpoint, unwrapped and in `ReducingSaver` (a window of 4-6 messages), at a few turns
   up to `--turns`, with the stored size of its messages value: an unwrapped thread's calls
   grow with it, a bounded window's do not.

Writes bench/results/script_bytes.md and script_bytes.json.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Iterator
from typing import Any

import redis
from _results import RESULTS
from _v010_probe import chat_graph, human_message, thread_config
from langchain_core.runnables import RunnableConfig

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver
from agentstate_testkit import servers
from langgraph_checkpoint_plainredis import RedisSaver

SIZES = (1 << 10, 16 << 10, 256 << 10)
CALLS = 200  # per probe of bytes
PROBES = 20  # per probe of a thread
_READ = "return #redis.call('GET', KEYS[1])"
_PASSED = "return #ARGV[1]"


def _usec_per_call(admin: redis.Redis, command: str, run: Any, calls: int) -> float:
    admin.config_resetstat()
    for _ in range(calls):
        run()
    stats = admin.info("commandstats")[f"cmdstat_{command}"]
    return float(stats["usec"]) / float(stats["calls"])


def probe_bytes(admin: redis.Redis) -> list[dict[str, float]]:
    """Server µs per call of a script reading or passed one value, and of a plain GET."""
    read, passed = admin.script_load(_READ), admin.script_load(_PASSED)
    rows = []
    for size in SIZES:
        value = bytes(range(256)) * (size // 256)
        admin.set("bytes:probe", value)
        rows.append(
            {
                "bytes": size,
                "get": _usec_per_call(admin, "get", lambda: admin.get("bytes:probe"), CALLS),
                "script_get": _usec_per_call(
                    admin, "evalsha", lambda: admin.evalsha(read, 1, "bytes:probe"), CALLS
                ),
                "script_argv": _usec_per_call(
                    admin, "evalsha", functools.partial(admin.evalsha, passed, 0, value), CALLS
                ),
            }
        )
    admin.delete("bytes:probe")
    return rows


def _put_into(saver: RedisSaver, configs: Iterator[RunnableConfig], stored: Any) -> None:
    """Puts checkpoint tuple `stored` with every channel written, into the next config."""
    versions = stored.checkpoint["channel_versions"]
    saver.put(next(configs), stored.checkpoint, stored.metadata, versions)


def probe_thread(url: str, admin: redis.Redis, turns: int, wrapped: bool) -> list[dict[str, Any]]:
    """Server µs of our put and get_tuple of one thread's state, at a few of its turns.

    At each mark the thread's newest checkpoint is read back `PROBES` times (`get_tuple`)
    and put `PROBES` times with every channel written, on threads of its own (what a turn's
    put of the messages value passes), timed by `INFO commandstats`."""
    prefix = "bytes-w" if wrapped else "bytes-u"
    saver = RedisSaver(url, prefix=prefix)
    reducer = MessageReducer(config=ReducerConfig(min_messages=4, max_messages=6))
    graph = chat_graph(ReducingSaver(saver, reducer) if wrapped else saver)
    marks = {t for t in (10, 30, 100, turns) if t <= turns}
    config = thread_config("t")
    rows = []
    try:
        for turn in range(1, turns + 1):
            graph.invoke({"messages": [human_message(0, turn)]}, config)
            if turn not in marks:
                continue
            stored = saver.get_tuple(config)
            assert stored is not None
            get_us = _usec_per_call(admin, "evalsha", lambda: saver.get_tuple(config), PROBES)
            versions = stored.checkpoint["channel_versions"]
            copies = (thread_config(f"probe-{turn}-{n}") for n in range(PROBES))
            put = functools.partial(_put_into, saver, copies, stored)
            put_us = _usec_per_call(admin, "evalsha", put, PROBES)
            blob = saver.keyspace.thread("t").blob("", "messages", versions["messages"])
            rows.append(
                {
                    "turn": turn,
                    "messages_bytes": int(admin.strlen(blob)),
                    "put_us": put_us,
                    "get_us": get_us,
                }
            )
    finally:
        saver.close()
    return rows


def measure(kind: str, turns: int) -> dict[str, Any]:
    with servers.start(kind) as server:
        admin = redis.Redis.from_url(server.url, protocol=2)
        try:
            info = admin.info("server")
            version = info.get("valkey_version") or info["redis_version"]
            return {
                "kind": kind,
                "version": version,
                "bytes": probe_bytes(admin),
                "unwrapped": probe_thread(server.url, admin, turns, wrapped=False),
                "ReducingSaver": probe_thread(server.url, admin, turns, wrapped=True),
            }
        finally:
            admin.close()


def per_byte_ns(rows: list[dict[str, float]]) -> float:
    """ns per byte a script's GET adds beyond a plain GET, between the two largest values."""
    small, large = rows[-2], rows[-1]
    extra = (large["script_get"] - large["get"]) - (small["script_get"] - small["get"])
    return extra * 1000 / (large["bytes"] - small["bytes"])


def render(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Server time of the bytes a script call moves",
        "",
        f"Server µs per call (`INFO commandstats`, mean of {CALLS} calls): a script reading "
        "one value (`GET` in Lua), a script passed one (`ARGV`), a plain `GET`. ns per byte: "
        "what each byte between the two largest values added to the script's `GET` beyond "
        "the plain one's.",
        "",
        "| server | value | plain GET µs | script GET µs | script ARGV µs |",
        "|:---|---:|---:|---:|---:|",
    ]
    slopes = []
    for result in results:
        for row in result["bytes"]:
            lines.append(
                f"| {result['kind']} {result['version']} | {row['bytes'] >> 10} KiB "
                f"| {row['get']:.1f} | {row['script_get']:.1f} | {row['script_argv']:.1f} |"
            )
        slopes.append(f"{result['kind']} {per_byte_ns(result['bytes']):.2f}")
    lines += ["", "ns per byte through Lua: " + ", ".join(slopes) + "."]
    lines += [
        "",
        "Our `put` and `get_tuple` of one chat thread's newest checkpoint: the server's µs per "
        f"call (`INFO commandstats`, mean of {PROBES}) and the stored bytes of its messages "
        "value, unwrapped and in `ReducingSaver` (window of 4-6 messages).",
        "",
        "| server | saver | turn | messages bytes | put µs | get_tuple µs |",
        "|:---|:---|---:|---:|---:|---:|",
    ]
    for result in results:
        for mode in ("unwrapped", "ReducingSaver"):
            for row in result[mode]:
                lines.append(
                    f"| {result['kind']} | {mode} | {row['turn']} | {row['messages_bytes']:,} "
                    f"| {row['put_us']:.0f} | {row['get_us']:.0f} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="redis-5,redis-7,redis-8,valkey")
    parser.add_argument("--turns", type=int, default=300, help="turns of the chat thread, 10+")
    args = parser.parse_args()
    if args.turns < 10:
        parser.error(f"--turns {args.turns}: pass 10 or more (the first mark is turn 10)")
    kinds = [k for k in args.kinds.split(",") if k]
    results = [measure(kind, args.turns) for kind in kinds]
    text = render(results)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "script_bytes.md").write_text(text, encoding="utf-8")
    (RESULTS / "script_bytes.json").write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
