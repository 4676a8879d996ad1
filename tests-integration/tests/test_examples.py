"""The examples a newcomer runs first (`make demo`) keep working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


@pytest.mark.parametrize("args", [[], ["--sync"]], ids=["async-and-sync", "sync-only"])
def test_demo_runs_against_a_given_redis(redis_url: str, args: list[str]) -> None:
    env = {**os.environ, "REDIS_URL": redis_url}
    done = subprocess.run(
        [sys.executable, str(DEMO), *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "every key the demo wrote was deleted again" in out
    assert "19 memories" in out
    if not args:
        assert "Long-term memory" in out and "State history" in out
        assert "with ReducingSaver + prune(latest)" in out
        # The bot sees 7 messages of a window of 6, and the first question stays while its
        # answer went to memory: the output says why (it said "window of 6" only).
        assert "at most 6 stored" in out and "window of 6" not in out
        assert "seeing 7 messages" in out and "so the bot may see 7" in out
        assert "stays pinned: preserve_first=True" in out
        # Answers are numbered by turn: they were numbered by the human messages the bot
        # could see, so a pruned window showed "answer 3" after "answer 4".
        turns = [
            line.split("(turn ", 1)[1].split(",")[0]
            for line in out.splitlines()
            if "bot: (turn " in line
        ]
        assert turns == [str(n) for n in range(1, len(turns) + 1)] and len(turns) == 12


def test_demo_starts_its_own_redis_without_redis_url() -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    done = subprocess.run(
        [sys.executable, str(DEMO), "--sync"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "starting a private Redis" in done.stdout


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis://127.0.0.1:1/0", "does not answer"),
        ("redis://user:s3cret@127.0.0.1:1/0", "does not answer"),
        ("redis://127.0.0.1:1/0?password=s3cret", "does not answer"),
        # not a URL urllib can split, and one without a scheme: the URL is what to fix
        ("redis://[::1:6379/0?password=s3cret", "is not a Redis URL"),
        ("localhost:6379", "is not a Redis URL"),
    ],
)
def test_demo_names_the_fix_when_redis_url_does_not_answer(url: str, said: str) -> None:
    """An unreachable REDIS_URL printed a hundred lines of ConnectionError traceback, and
    a malformed one was said not to answer."""
    env = {**os.environ, "REDIS_URL": url}
    done = subprocess.run(
        [sys.executable, str(DEMO), "--sync"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr
    assert said in done.stderr and "unset REDIS_URL" in done.stderr, done.stderr
