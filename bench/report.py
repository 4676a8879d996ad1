"""Combine the benchmarks' results into bench/results/report.md, summary first.

Run last by `make bench`: `uv run --frozen python bench/report.py [--started EPOCH]`.
Reads the JSON and Markdown that bench_savers.py, bench_storage.py, bench_load.py and
bench_reducer.py wrote to bench/results/, prints the summary and writes report.md: the
summary (targets met or not, headline numbers), then each benchmark's own Markdown. A
part that is missing is named, with the command that produces it.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable
from typing import Any

from _results import RESULTS

PARTS = {  # file stem: (title, the command that writes it)
    "savers": ("Savers", "uv run --frozen python bench/bench_savers.py"),
    "storage": ("Stored bytes per thread", "uv run --frozen python bench/bench_storage.py"),
    "load": ("Throughput under load", "uv run --frozen python bench/bench_load.py"),
    "reducer": ("Reducer throughput", "uv run --frozen python bench/bench_reducer.py"),
}
PLOTS = {
    "chat.png": "chat turn",
    "ops.png": "per-op latency",
    "scale.png": "scale",
    "storage.png": "stored bytes",
}


def load(stem: str) -> Any:
    path = RESULTS / f"{stem}.json"
    return json.loads(path.read_text()) if path.exists() else None


def span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}×" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}–{high:.2f}×"


def size(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def met(value: bool | None) -> str:
    return "no target" if value is None else "yes" if value else "**no**"


def saver_lines(savers: dict[str, Any]) -> list[str]:
    """Targets table and headline numbers of bench_savers.py."""
    lines = [
        "| target (ours, unwrapped) | worst ratio | where | met |",
        "|:---|---:|---:|---:|",
    ]
    for t in savers["targets"]:
        lines.append(f"| {t['target']} | {t['worst']:.2f}× | {t['where']} | {met(t['met'])} |")
    lines.append("")
    chat = [r for r in savers["chat"] if r["family"] == "ours"]
    for style, call in (("sync", "invoke"), ("async", "ainvoke")):
        bare = [r["ratio_to_memory"] for r in chat if r["style"] == style and not r["wrapped"]]
        wrapped = [r for r in chat if r["style"] == style and r["wrapped"]]
        lines.append(
            f"- Chat turn, `{call}`, median × unwrapped InMemorySaver: ours {span(bare)} "
            f"unwrapped, {span([r['ratio_to_memory'] for r in wrapped])} wrapped in "
            f"ReducingSaver ({span([r['ratio_to_unwrapped'] for r in wrapped])} of the "
            "unwrapped turn)."
        )
        old = (savers.get("v010") or {}).get("chat") or {}
        if style in old:
            lines.append(
                f"  plainredis 0.1.0 (its own venv, same graph): {old[style]['ratio']:.2f}×."
            )
        for floor in (r for r in savers["chat"] if r["family"] == "floor" and r["style"] == style):
            client = "a plain socket" if "raw" in floor["saver"] else "redis-py"
            lines.append(
                f"  The round trips alone (InMemorySaver + one PING per call through {client}): "
                f"{floor['ratio_to_memory']:.2f}×."
            )
    for key, against in (
        ("ratio_to_postgres", "PostgresSaver (PostgreSQL as installed)"),
        ("ratio_to_fast_postgres", "PostgresSaver on the test harness's server, fsync off"),
    ):
        ops = [
            (r["ops"][op][key], f"{r['saver']} {op}")
            for r in savers["ops"]
            if r["family"] == "ours" and not r["wrapped"]
            for op in r["ops"]
            if key in r["ops"][op]
        ]
        if not ops:
            continue
        below = sum(value < 1 for value, _ in ops)
        worst, where = max(ops)
        lines.append(
            f"- Per op, median × {against}: {below} of {len(ops)} of our unwrapped "
            f"(saver, op) pairs are below 1; worst {worst:.2f}× ({where})."
        )
    by_kind: dict[str, list[str]] = {}
    for r in savers["scale"]:
        by_kind.setdefault(f"{r['server']} ({r['others']:,} others)", []).append(
            f"{r['op']} {r['ratio']:.2f}×"
        )
    scale = "; ".join(f"{kind}: {', '.join(cells)}" for kind, cells in by_kind.items())
    small = savers["settings"]["others_small"]
    lines.append(
        f"- Scale, one thread's reads beside many other threads ÷ beside {small}: {scale}."
    )
    long = savers["long_thread"]
    cells = ", ".join(f"{r['op']} {r['ratio']:.2f}×" for r in long["rows"])
    lines.append(
        f"- A {long['checkpoints']:,}-checkpoint timeline ÷ a 50-checkpoint one "
        f"({long['server']}): {cells}."
    )
    return lines


def storage_lines(storage: dict[str, Any]) -> list[str]:
    lines = []
    for store, modes in storage.items():
        last = max(int(turn) for turn in next(iter(modes.values())))
        cells = ", ".join(f"{mode} {size(points[str(last)])}" for mode, points in modes.items())
        lines.append(f"- Stored bytes of one thread at turn {last}, {store}: {cells}.")
    return lines


def load_lines(numbers: dict[str, Any]) -> list[str]:
    a, p = numbers["asyncio"], numbers["processes"]
    return [
        f"- Throughput on {numbers['server']}: {a['turns_per_second']:,.0f} chat turns/s with "
        f"AsyncRedisSaver ({a['threads']} threads at once), {p['turns_per_second']:,.0f} with "
        f"RedisSaver in {p['processes']} processes."
    ]


def reducer_lines(rows: list[dict[str, Any]]) -> list[str]:
    cells = []
    for row in rows:
        small, large = (row["ms"][size] for size in sorted(row["ms"], key=int))
        cells.append(f"{row['mode']} {small:.2f} → {large:.2f} ms ({large / small:.1f}×)")
    return [f"- Reducer, 1,000 → 10,000 messages: {'; '.join(cells)}."]


def without_targets(markdown: str) -> str:
    """savers.md minus its "## Targets" section: the summary shows that very table."""
    return re.sub(r"^## Targets\n.*?(?=^## )", "", markdown, flags=re.MULTILINE | re.DOTALL)


def demoted(markdown: str) -> str:
    """One heading level down, so each part sits under the report's own title."""
    return re.sub(r"^(#{1,5}) ", r"#\1 ", markdown, flags=re.MULTILINE)


SUMMARIES: dict[str, Callable[[Any], list[str]]] = {
    "savers": saver_lines,
    "storage": storage_lines,
    "load": load_lines,
    "reducer": reducer_lines,
}


def written_at(stem: str) -> str:
    return time.strftime("%H:%M", time.localtime((RESULTS / f"{stem}.md").stat().st_mtime))


def summary(started: float | None) -> str:
    """The report's title, where and when it ran, and the summary."""
    took = f" in {(time.time() - started) / 60:.1f} minutes" if started else ""
    parts = [f"{stem} {written_at(stem)}" for stem in PARTS if (RESULTS / f"{stem}.md").exists()]
    intro = (
        f"`make bench` on {time.strftime('%Y-%m-%d %H:%M')}{took}; parts written at "
        f"{', '.join(parts) or 'none'}. Each part compares its subjects side by side in one "
        "run on this machine: compare within a part, not across machines."
    )
    savers = load("savers")
    if savers:
        env = savers["environment"]
        intro += (
            f" Python {env['python']}, {env['cpus']} CPUs, load average "
            f"{env['load_before'][0]:.1f} when the saver benchmark ({savers['mode']} run) began."
        )
    lines = ["# Benchmark report", "", intro, "", "## Summary", ""]
    for stem, summarize in SUMMARIES.items():
        numbers = load(stem)
        if numbers is not None:
            lines += summarize(numbers)
    plots = [f"[{name}]({file})" for file, name in PLOTS.items() if (RESULTS / file).exists()]
    if plots:
        lines += ["", "Plots: " + ", ".join(plots) + " (each shown in its part below)."]
    return "\n".join(lines)


def parts() -> list[str]:
    """Each benchmark's own Markdown, a heading level down; a missing one says how to run it."""
    out = []
    for stem, (title, command) in PARTS.items():
        path = RESULTS / f"{stem}.md"
        if path.exists() and (RESULTS / f"{stem}.json").exists():
            markdown = path.read_text(encoding="utf-8")
            if stem == "savers":
                markdown = without_targets(markdown)
            out.append(demoted(markdown).strip())
        else:
            out.append(f"## {title}\n\nNot run: `{command}` writes it.")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--started", type=float, help="when `make bench` began (epoch seconds)")
    args = parser.parse_args()
    head = summary(args.started)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "report.md").write_text("\n\n".join([head, *parts()]) + "\n", encoding="utf-8")
    print(head)
    print(f"\nwrote {RESULTS / 'report.md'}")


if __name__ == "__main__":
    main()
