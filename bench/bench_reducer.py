"""Time `MessageReducer` on 1,000 and 10,000 messages with tool calls; print the growth.

Run: `uv run --frozen python bench/bench_reducer.py`. A linear reducer grows ~10x from
1,000 to 10,000 messages; a quadratic one (0.5.0's tool cascade) ~100x. Writes
bench/results/reducer.md and reducer.json.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

from _results import RESULTS

from agentstate_reducer import MessageReducer, ReducerConfig

SIZES = (1_000, 10_000)
REPEATS = 7


def conversation(size: int) -> list[dict[str, Any]]:
    """A system prompt, then turns of human, ai with two tool calls, two results, ai."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief.", "id": "sys"}]
    turn = 0
    while len(messages) < size:
        calls = [{"id": f"c{turn}-{j}", "name": "search", "args": {"q": str(turn)}} for j in (0, 1)]
        messages += [
            {"role": "human", "content": f"question {turn}", "id": f"h{turn}"},
            {"role": "ai", "content": "", "tool_calls": calls, "id": f"a{turn}"},
            *(
                {"role": "tool", "content": "result " * 20, "tool_call_id": c["id"], "id": c["id"]}
                for c in calls
            ),
            {"role": "ai", "content": f"answer {turn} " * 10, "id": f"b{turn}"},
        ]
        turn += 1
    return messages[:size]


def best_of(config: ReducerConfig, messages: list[dict[str, Any]]) -> float:
    """Best wall time of `reduce` by a fresh reducer, so every run delivers for real."""
    times = []
    for _ in range(REPEATS):
        reducer = MessageReducer(config=config)
        gc.collect()  # start each run from the same heap, so earlier runs' garbage costs nothing
        started = time.perf_counter()
        reducer.reduce(messages, namespace="bench")
        times.append(time.perf_counter() - started)
    return min(times)


def bench(label: str, config: ReducerConfig) -> dict[str, Any]:
    timings = {size: best_of(config, conversation(size)) for size in SIZES}
    small, large = (timings[s] for s in SIZES)
    cells = "  ".join(f"{size:>6,} msgs {timings[size] * 1000:8.2f} ms" for size in SIZES)
    print(f"{label:<26} {cells}  growth x{large / small:5.1f}")
    return {"mode": label, "ms": {size: timings[size] * 1000 for size in SIZES}}


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"# Reducer throughput ({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        f"`MessageReducer.reduce()` on a conversation with 2 tool calls per turn, best of "
        f"{REPEATS} runs by a fresh reducer. Linear: about 10× from 1,000 to 10,000 messages.",
        "",
        "| mode | "
        + " | ".join(f"{size:,} messages ms" for size in SIZES)
        + f" | growth | messages/s at {SIZES[-1]:,} |",
        "|:---|" + "---:|" * (len(SIZES) + 2),
    ]
    for row in rows:
        ms = [row["ms"][size] for size in SIZES]
        cells = " | ".join(f"{value:.2f}" for value in ms)
        rate = SIZES[-1] / ms[-1] * 1000
        lines.append(f"| {row['mode']} | {cells} | {ms[-1] / ms[0]:.1f}× | {rate:,.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    print(f"reduce(), best of {REPEATS}; messages carry tool calls (2 per turn)")

    def remember(pruned: list[Any], namespace: Any) -> None:
        return None

    rows = [
        bench("count mode", ReducerConfig(min_messages=20, max_messages=40)),
        bench(
            "count mode + on_prune",
            ReducerConfig(min_messages=20, max_messages=40, on_prune=[remember]),
        ),
        bench("token mode (heuristic)", ReducerConfig(max_tokens=4_000, target_tokens=2_000)),
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "reducer.md").write_text(render(rows))
    (RESULTS / "reducer.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {RESULTS / 'reducer.md'} and reducer.json")


if __name__ == "__main__":
    main()
