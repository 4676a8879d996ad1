"""The client process killed with SIGKILL at random points of a long multi-thread run.

A worker process (`reliability_worker.py sigkill`) runs graphs on several threads at once,
plus a thread that copies, prunes and deletes other threads; it logs every put and
put_writes before sending it and again once it returned. The test kills it after a
seeded random number of acknowledged calls, audits the keyspace, and starts the next
round on the same threads, so each round also resumes after a crash.

After every kill:

- every checkpoint that can be listed is complete (`assert_sound`: it reads back by id,
  every blob its ``channel_versions`` name exists and decodes, its writes decode);
- nothing acknowledged is lost, and what was written reads back exactly as sent:
  the logged calls replayed into `InMemorySaver` give the same tuples (a put sent but
  never acknowledged may or may not have landed; if it did, it is whole);
- `list` and `delete_thread` work, and no key is orphaned; the saver ran with a ttl, so
  every key but the registry carries a TTL.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from reliability_support import (
    WORKER,
    assert_parity,
    assert_sound,
    delete_everything,
    read_records,
    replay,
)

TTL = 3600  # long enough that nothing expires during the test: only crashes remove data

# Clusters have their own suite (packages/.../tests/test_cluster.py); these run on one server.
pytestmark = pytest.mark.standalone


def kill_at_random_point(
    url: str, prefix: str, log: Path, errors: Path, seed: int, writers: int, after: int
) -> None:
    """Runs one worker and SIGKILLs it once it has `after` acknowledged calls."""
    with open(errors, "ab") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), "sigkill", url, prefix, str(log), str(seed),
             str(writers), str(TTL)],
            stdout=subprocess.PIPE,
            stderr=stderr,
        )  # fmt: skip
    assert proc.stdout is not None
    acked = 0
    try:
        while acked < after:
            line = proc.stdout.readline()
            if not line:
                break
            acked += 1
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    text = errors.read_text(errors="replace")
    assert acked == after, f"the worker stopped after {acked} calls:\n{text[-3000:]}"
    assert proc.returncode == -signal.SIGKILL
    assert "Traceback" not in text, text[-3000:]


def audit_after_kill(client: redis.Redis, prefix: str, log: Path) -> set[str]:
    """The checks listed in the module docstring; returns every thread found or written to
    (one whose only landed call was a `put_writes`, cut before its first put, has no
    checkpoint to list, but keys to delete)."""
    records = read_records(str(log))
    acked = {r[1] for r in records if r[0] == "ack"}
    intents = [(r[1], r[2]) for r in records if r[0] == "intent"]
    sent = replay(rec for _, rec in intents)
    confirmed = replay(rec for seq, rec in intents if seq in acked)
    unconfirmed = {
        (rec[1]["configurable"]["thread_id"], rec[1]["configurable"]["checkpoint_ns"],
         rec[2]["id"])
        for seq, rec in intents
        if rec[0] == "put" and seq not in acked
    }  # fmt: skip
    writers = {rec[1]["configurable"]["thread_id"] for _, rec in intents}
    # A thread whose calls were all cut by the kill may never have reached the server.
    landed = {rec[1]["configurable"]["thread_id"] for seq, rec in intents if seq in acked}
    audit = assert_sound(client, prefix, ttl=True)
    assert landed <= audit.threads
    compared = assert_parity(
        audit.checkpoints, sent, threads=writers, maybe=unconfirmed, acked_writes=confirmed
    )
    assert compared >= sum(1 for seq, rec in intents if rec[0] == "put" and seq in acked)
    return audit.threads | writers


def run_rounds(
    redis_url: str, prefix: str, tmp_path: Path, rounds: int, writers: int, seed: int
) -> None:
    rng = random.Random(seed)
    log, errors = tmp_path / "calls.log", tmp_path / "stderr.txt"
    client = redis.Redis.from_url(redis_url, protocol=2)
    try:
        threads: set[str] = set()
        for n in range(rounds):
            after = rng.randint(10, 150)
            kill_at_random_point(redis_url, prefix, log, errors, seed * 1000 + n, writers, after)
            threads = audit_after_kill(client, prefix, log)
        delete_everything(client, prefix, threads)
    finally:
        client.close()


@pytest.mark.parametrize("redis_kind", ["redis-7"], scope="session")
def test_sigkill_at_random_points_loses_nothing_acknowledged(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    run_rounds(redis_url, prefix, tmp_path, rounds=2, writers=3, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3])
def test_sigkill_soak(redis_url: str, prefix: str, tmp_path: Path, seed: int) -> None:
    run_rounds(redis_url, prefix, tmp_path, rounds=10, writers=6, seed=seed)
