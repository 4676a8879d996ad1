"""The examples a newcomer runs first (`make demo`) keep working."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from agentstate_testkit.servers import ServerPool

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo.py"
FIX = "unset REDIS_URL"


def run_demo(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": url}
    return subprocess.run(
        [sys.executable, str(DEMO), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


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
        # ~100 KB, ~85 KB, ~5 KB were shown without a word on why the reducer saves so little.
        assert "bounds each checkpoint's message list" in out
        assert "keeps every checkpoint" in out and "keep_latest" in out
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


def test_demo_says_how_to_go_on_when_it_cannot_start_its_own_redis(tmp_path: Path) -> None:
    """With no REDIS_URL and no way to fetch Redis (an empty cache, an index that refuses
    connections), it printed pip's output twice, a two-part traceback, and a fix naming
    AGENTSTATE_REDIS5_URL, which the demo does not read."""
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL" and not k.startswith("PIP_")}
    refused = "http://127.0.0.1:9/simple"
    env.update(
        AGENTSTATE_CACHE_DIR=str(tmp_path / "cache"),
        PIP_CONFIG_FILE=os.devnull,
        PIP_INDEX_URL=refused,
        PIP_RETRIES="0",
        UV_INDEX_URL=refused,
        UV_DEFAULT_INDEX=refused,
        UV_OFFLINE="1",
    )
    done = subprocess.run(
        [sys.executable, str(DEMO), "--sync"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "AGENTSTATE_REDIS5_URL" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("demo: could not start a private Redis (")
    assert lines[0].endswith("set REDIS_URL=redis://host:port/db to use your own server")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("localhost:6391", "'localhost:6391' is not a Redis URL: it does not start with redis://"),
        ("http://x", "'http://x' is not a Redis URL: it does not start with redis://"),
        ("redis://h:notaport/0", "'redis://h:notaport/0' is not a Redis URL: its port 'notaport'"),
        ("redis://u:s3cret@h:70000/0", "'redis://u:***@h:70000/0' is not a Redis URL: its port"),
        ("redis://[::1:6379/0?password=s3cret", "'redis://[::1:6379/0?password=***' is not"),
        ("redis://u:s3cret@127.0.0.1:1/0", "'redis://u:***@127.0.0.1:1/0' does not answer"),
    ],
)
def test_demo_echoes_a_bad_redis_url_with_its_password_masked(url: str, said: str) -> None:
    """Every unparseable URL got the same words, "REDIS_URL is not a Redis URL redis-py can
    parse", without the URL or what is wrong with it."""
    done = run_demo(url, "--sync")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr
    assert f"demo: REDIS_URL {said}" in done.stderr and FIX in done.stderr, done.stderr


@pytest.fixture(scope="module")
def redis5(server_pool: ServerPool) -> str:
    """One plain Redis 5, for URLs that only go wrong against a live server."""
    return server_pool.get("redis-5")


def test_demo_passes_on_the_savers_words_for_a_database_that_is_not_a_number(
    redis5: str,
) -> None:
    """redis://host:port/abc answers PING (redis-py reads /abc as no database), then
    AsyncRedisSaver refused it with a traceback."""
    done = run_demo(urlsplit(redis5)._replace(path="/abc", query="").geturl())
    assert done.returncode == 2
    assert "Traceback" not in done.stderr, done.stderr
    assert "names database 'abc', which is not a number" in done.stderr, done.stderr
    assert done.stderr.startswith("demo: REDIS_URL '") and FIX in done.stderr


def test_demo_names_a_database_the_server_does_not_have(redis5: str) -> None:
    """It said only "does not answer (ResponseError: DB index is out of range)"."""
    done = run_demo(urlsplit(redis5)._replace(path="/99999", query="").geturl(), "--sync")
    assert done.returncode == 2
    assert "/99999' names database 99999, which the server" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and FIX in done.stderr


def test_demo_says_rediss_needs_a_tls_server(redis5: str) -> None:
    """rediss:// against a plain-text server timed out with only "TimeoutError"."""
    done = run_demo(urlsplit(redis5)._replace(scheme="rediss").geturl(), "--sync")
    assert done.returncode == 2
    said = done.stderr
    assert "does not answer" in said and "rediss:// needs a server that speaks TLS" in said, said


def test_demo_says_how_it_runs_and_make_passes_its_arguments() -> None:
    """`python examples/demo.py` fails with the system Python (no redis), and `--sync` could
    not be reached through `make demo`."""
    doc = DEMO.read_text().split('"""', 2)[1]
    assert ".venv/bin/python examples/demo.py" in doc and "make demo ARGS=--sync" in doc
    assert doc.count("python examples/demo.py") == doc.count(".venv/bin/python examples/demo.py")
    readme = (ROOT / "README.md").read_text()
    assert "make demo ARGS=--sync" in readme
    if shutil.which("make") is None:
        pytest.skip("no make on PATH")
    done = subprocess.run(
        ["make", "-n", "-s", "demo", "ARGS=--sync"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "examples/demo.py --sync" in done.stdout, done.stdout
