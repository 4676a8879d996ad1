"""`make bench` end to end, on small settings: every part runs and the report is whole.

The scripts write to a temporary folder (`BENCH_RESULTS`), never over `bench/results/`.
Timings are not checked (they are the benchmark's output, not a test's); what is checked is
that each part ran, the report holds every section and names each target, and the plots
are PNG images.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
QUICK_RUN = [
    ["bench_savers.py", "--quick"],
    ["bench_storage.py", "--turns", "12", "--every", "4"],
    ["bench_load.py", "--threads", "8", "--turns", "3", "--processes", "2"],
    ["bench_reducer.py"],
    ["report.py"],
]
PLOTS = ["chat.png", "ops.png", "scale.png", "storage.png"]


def stamps(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*")} if folder.is_dir() else {}


def bench(
    script: str, *args: str, results: Path | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    """Runs `bench/<script>` with `args`, writing to `results` (never to bench/results/)."""
    env = {**os.environ, "BENCH_RESULTS": str(results)} if results else None
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    before = stamps(BENCH / "results")
    out = tmp_path_factory.mktemp("bench-results")
    for script, *args in QUICK_RUN:
        done = bench(script, *args, results=out, timeout=900)
        assert done.returncode == 0, f"{script}: {done.stderr[-3000:]}"
    assert stamps(BENCH / "results") == before, "a test run must not touch bench/results/"
    return out


def test_the_report_has_every_part_and_target(results: Path) -> None:
    report = (results / "report.md").read_text(encoding="utf-8")
    for section in (
        "## Summary",
        "Chat turn",
        "Per-op latency",
        "Round trips",
        "Stored bytes",
        "Scale",
        "Reducer",
        "Throughput",
    ):
        assert section.lower() in report.lower(), section
    for target in (
        "chat turn ≤ 1.5× InMemorySaver",
        "every per-op latency < PostgresSaver's",
        "50-turn thread ≤ 0.75× 0.1.0 MEMORY USAGE",
        "≤ 1.2× beside 10",
        "InMemorySaver + PING",
    ):
        assert target in report, target
    assert "ReducingSaver" in report and "wrapped" in report


@pytest.mark.parametrize("plot", PLOTS)
def test_the_plots_are_png_images(results: Path, plot: str) -> None:
    assert (results / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"({plot})" in (results / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("style", ["async", "sync"])
def test_the_turn_timed_alone_reports_ours_and_the_floors(tmp_path: Path, style: str) -> None:
    """`bench/bench_turn.py`, which `make bench` does not run: ours, InMemorySaver and the
    floors, each with a median, a ratio and its CPU time; and our script calls per turn with
    the server's time per call."""
    done = bench(
        "bench_turn.py", "--style", style, "--turns", "4", "--work", "10", results=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "turn.md").read_text(encoding="utf-8")
    for row in ("| InMemorySaver |", "| ours |", "| floor |", "| floor + 10 µs a call |"):
        assert row in table, row
    baseline = next(line for line in table.splitlines() if line.startswith("| InMemorySaver |"))
    assert re.fullmatch(r"\| InMemorySaver \| [\d,]+ \| 1\.00× \| [\d,]+ \|", baseline), baseline
    # a chat turn is six script calls: one get_tuple, three puts, two put_writes
    assert "Ours made 6.0 script calls a turn, each taking the server" in table, table
    record = json.loads((tmp_path / "turn.json").read_text(encoding="utf-8"))
    assert record["script_calls_per_turn"] == 6.0 and record["server_us_per_script_call"] > 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--turns", "0"], "--turns 0: pass 1 or more"),
        (["--turns", "-3"], "--turns -3: pass 1 or more"),
        (["--work", "a,b"], "--work 'a,b': pass whole µs"),
        (["--work", "-5"], "--work '-5': µs of work cannot be negative"),
    ],
)
def test_the_turn_bench_refuses_bad_settings_naming_them(args: list[str], named: str) -> None:
    """A setting that cannot be timed fails before any server starts, naming it and the
    fix (``--turns 0`` divided by zero after the whole run)."""
    done = bench("bench_turn.py", *args, timeout=60)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr, done.stderr


def test_the_script_bytes_bench_reports_each_size_and_the_thread(tmp_path: Path) -> None:
    """`bench/bench_script_bytes.py`, which `make bench` does not run: a row per value size
    and a per-byte figure for the server, then our put and get_tuple at turn 10, unwrapped
    and wrapped, with the stored size of the messages value."""
    done = bench("bench_script_bytes.py", "--kinds", "redis-7", "--turns", "10", results=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    table = (tmp_path / "script_bytes.md").read_text(encoding="utf-8")
    for size in ("1 KiB", "16 KiB", "256 KiB"):
        assert re.search(rf"\| redis-7 [\d.]+ \| {size} \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", table)
    assert re.search(r"ns per byte through Lua: redis-7 -?[\d.]+\.", table), table
    for mode in ("unwrapped", "ReducingSaver"):
        assert re.search(rf"\| redis-7 \| {mode} \| 10 \| [\d,]+ \| \d+ \| \d+ \|", table), table
    record = json.loads((tmp_path / "script_bytes.json").read_text(encoding="utf-8"))
    assert [r["turn"] for r in record[0]["unwrapped"]] == [10]
    assert (
        record[0]["unwrapped"][0]["messages_bytes"]
        > record[0]["ReducingSaver"][0]["messages_bytes"]
    )


def test_the_script_bytes_bench_refuses_a_thread_too_short() -> None:
    done = bench("bench_script_bytes.py", "--turns", "3", timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--turns 3: pass 10 or more" in done.stderr, done.stderr
