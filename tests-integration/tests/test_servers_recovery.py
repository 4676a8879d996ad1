"""The harness recovers from what goes wrong around it: killed owners, broken caches, ports."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentstate_testkit import servers
from agentstate_testkit._runstate import process_start
from agentstate_testkit.servers import ServerError, ServerPool, start, start_cluster

_OWNER = """
import sys, threading, time
from agentstate_testkit.servers import ServerPool, start
redis = start("redis-5")
pool = ServerPool()
# The pool starts PostgreSQL (as `postgres` when root) from a worker thread that then ends.
worker = threading.Thread(target=pool.get, args=("postgres-18",))
worker.start()
worker.join()
postgres = pool._servers["postgres-18"]
for server in (redis, postgres):
    print(server._process.pid, server.directory, flush=True)
time.sleep(600)
"""


def _alive(pid: int, started: int | None) -> bool:
    return started is not None and process_start(pid) == started


def test_servers_of_a_killed_owner_are_stopped_by_the_next_start() -> None:
    """SIGKILL leaves no time for cleanup; the next harness start stops what it left."""
    # Servers of its own, not the ones the environment may name.
    env = {k: v for k, v in os.environ.items() if k not in servers._ENV_URLS.values()}
    with subprocess.Popen(
        [sys.executable, "-c", _OWNER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    ) as owner:  # fmt: skip
        assert owner.stdout is not None and owner.stderr is not None
        lines = [owner.stdout.readline().split() for _ in range(2)]
        assert all(len(line) == 2 for line in lines), owner.stderr.read()
        owner.kill()
        owner.wait()
    left = [(int(pid), process_start(int(pid)), Path(folder)) for pid, folder in lines]
    try:
        # Still there with the owner gone: only a later run can clean up.
        assert all(_alive(pid, started) for pid, started, _ in left)
        with start("redis-5") as server:
            assert server.running
        assert not [pid for pid, started, _ in left if _alive(pid, started)]
        assert not [folder for _, _, folder in left if folder.exists()]
    finally:
        for pid, started, folder in left:
            if _alive(pid, started):
                os.kill(pid, signal.SIGKILL)
            shutil.rmtree(folder, ignore_errors=True)


def test_a_live_owner_keeps_its_servers_when_another_process_sweeps() -> None:
    with start("redis-5") as mine:
        code = "from agentstate_testkit.servers import start\nstart('redis-5').stop()\n"
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
        assert mine.running and mine.directory.exists()


@pytest.fixture
def cache_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private cache holding a copy of the redis-5 entry, to break without harm."""
    entry = servers.provision("redis-5").parent
    copy = tmp_path / "cache"
    shutil.copytree(entry, copy / entry.name, symlinks=True)
    monkeypatch.setenv("AGENTSTATE_CACHE_DIR", str(copy))
    monkeypatch.setattr(servers, "_CHECKED_ENTRIES", set(), raising=False)
    servers._binary_version.cache_clear()
    yield copy / entry.name
    servers._binary_version.cache_clear()


def _provision_cli(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "agentstate_testkit", "provision", "redis-5"]
    return subprocess.run(
        argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=600
    )


def test_provision_fetches_a_cut_short_binary_again(cache_copy: Path) -> None:
    binary = cache_copy / "redis-server"
    size = binary.stat().st_size
    os.truncate(binary, size // 2)
    # Without a registry it cannot: it fails, naming the entry.
    offline = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple"}
    offline |= {"PIP_RETRIES": "0", "UV_OFFLINE": "1"}
    done = _provision_cli(offline)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"the cached entry {cache_copy} is broken (redis-server has" in done.stderr
    # With one it fetches the entry again.
    done = _provision_cli({})
    assert done.returncode == 0, done.stdout + done.stderr
    assert binary.stat().st_size == size
    with start("redis-5") as server:
        assert server.version.startswith("5.0.")


def test_provision_checks_each_file_against_its_checksum(cache_copy: Path) -> None:
    cli = cache_copy / "redis-cli"
    data = bytearray(cli.read_bytes())
    data[-100] ^= 0xFF  # same size, other bytes
    cli.write_bytes(bytes(data))
    assert servers._entry_problem(
        "redis-5", servers._RECIPES["redis-5"], cache_copy, checksums=True
    ) == "redis-cli is not the file fetched (sha256 differs)"  # fmt: skip


def _fake_provision(monkeypatch: pytest.MonkeyPatch, binary: Path) -> None:
    monkeypatch.setattr(servers, "provision", lambda kind, **_: binary)


def test_a_binary_that_cannot_run_is_a_server_error_the_pool_remembers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "redis-server"
    empty.write_bytes(b"")
    empty.chmod(0o755)
    _fake_provision(monkeypatch, empty)
    monkeypatch.delenv("AGENTSTATE_REDIS5_URL", raising=False)
    with ServerPool() as pool:
        with pytest.raises(ServerError, match="cannot run .*Exec format error") as first:
            pool.get("redis-5")
        assert "provision redis-5" in str(first.value)
        with pytest.raises(ServerError) as second:
            pool.get("redis-5")
    assert second.value is first.value


def test_a_crash_at_start_shows_the_log_and_blames_the_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashing = tmp_path / "redis-server"
    crashing.write_text("#!/bin/sh\necho 'loaded half of it'\nkill -SEGV $$\n")
    crashing.chmod(0o755)
    _fake_provision(monkeypatch, crashing)
    with pytest.raises(ServerError) as error:
        start("redis-5")
    message = str(error.value)
    assert "killed by SIGSEGV while starting; its log said:\n    loaded half of it" in message
    assert "python -m agentstate_testkit provision redis-5" in message
    assert "extra_args" not in message


def test_a_cluster_node_whose_port_is_taken_moves_to_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        first = [taken]
        pick = servers._cluster_ports
        monkeypatch.setattr(
            servers, "_cluster_ports", lambda base: first.pop() if first else pick(base)
        )
        with start_cluster("redis-7-cluster") as cluster:
            assert cluster.running
            assert taken not in [node.port for node in cluster.nodes]


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A sticky, world-writable temporary folder like /tmp, private to this test."""
    folder = Path(tempfile.mkdtemp(prefix="agentstate-test-tmp-", dir="/tmp"))
    folder.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    shutil.rmtree(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root hands PostgreSQL to another user")
def test_postgres_copies_trust_no_folder_another_user_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_tmp: Path
) -> None:
    user = servers._run_as()
    assert user is not None
    other = pwd.getpwnam("nobody")
    private = tmp_path / "private"
    entry = private / "servers" / "pg-entry"
    (entry / "bin").mkdir(parents=True)
    binary = entry / "bin" / "initdb"
    binary.write_text("#!/bin/sh\necho real\n")
    binary.chmod(0o755)
    private.chmod(0o700)
    monkeypatch.setenv("AGENTSTATE_CACHE_DIR", str(private / "servers"))
    # Another local user got there first and planted a binary where the copy goes.
    planted = shared_tmp / "agentstate-servers" / "pg-entry" / "bin" / "initdb"
    planted.parent.mkdir(parents=True)
    planted.write_text("#!/bin/sh\necho planted\n")
    planted.chmod(0o755)
    for path in (planted, *planted.parents):
        if path == shared_tmp:
            break
        os.chown(path, other.pw_uid, other.pw_gid)

    def run(path: Path) -> str:
        done = subprocess.run(
            [str(path)], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout

    copied = servers._for_user(binary, user)
    assert copied == planted and run(copied) == "real\n"
    mirrors = shared_tmp / "agentstate-servers"
    for path in (mirrors, *mirrors.rglob("*")):
        info = path.lstat()
        assert info.st_uid == 0 and not info.st_mode & 0o022, path
    # A newer cache entry is copied again.
    binary.write_text("#!/bin/sh\necho newer\n")
    assert run(servers._for_user(binary, user)) == "newer\n"
    # So is a copy whose files someone made writable.
    copied.chmod(0o777)
    assert servers._for_user(binary, user) == copied
    assert not copied.stat().st_mode & 0o022


def test_a_record_deleted_while_the_sweep_reads_it_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that stops deletes its record without the run-state lock; one that vanished
    between the sweep's listing and its read made `start()` fail ("cannot sweep the
    run-state folder ... No such file or directory")."""
    from agentstate_testkit import _runstate

    run_dir = tmp_path / ".run"
    run_dir.mkdir()
    gone = run_dir / "agentstate-redis-5-gone.json"
    gone.write_text("{}")
    stale = run_dir / ".record-staged"  # a save whose process died before the rename
    stale.write_text("")
    os.utime(stale, (0, 0))
    real = _runstate._load

    def stopped_meanwhile(path: Path) -> _runstate.Record | None:
        path.unlink()  # what Server.stop() does, between the glob and the read
        return real(path)

    monkeypatch.setattr(_runstate, "_load", stopped_meanwhile)
    assert _runstate.sweep(run_dir) == []
    assert not stale.exists()
