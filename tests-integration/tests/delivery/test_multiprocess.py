"""Exactly-once delivery across real processes, forks and a SIGKILL mid-delivery.

Two worker processes (`delivery_worker.py`) share one Redis: plainredis checkpoints, a
`RedisOutbox` and a `RedisDeliveryLedger`. Worker A delivers inline, worker B in a
background thread. They alternate turns of the same threads; some turns fork from an
old checkpoint. Midway B's plain hook is told to stall; once it has recorded its batch
and stalls, B is killed with SIGKILL and started again. After both exit, this process
drains what is left with the same hooks.

Hooks run in the order: sink "before", plain hook, sink "after". When B dies inside the
plain hook, its batch is stored by "before", recorded by the plain hook and not yet
stored by "after". What the stored checkpoints no longer hold (`pruned_ids`) must have
reached:

- each transactional `CountingSink` exactly once per id, none missing, nothing else:
  "before" is not repeated by the redelivery, "after" is not lost;
- the plain `RecordingHook` at least once per id, and twice exactly for the ids of the
  batch B was killed in (at-least-once: it ran, its ledger mark did not).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import redis
from delivery_support import WORKER, build, pruned_ids

THREADS = ("t0", "t1", "t2")
ROUNDS = 8
KILL_ROUND = 4
FORK_EVERY = 5


class Worker:
    """One worker process and its command channel."""

    def __init__(self, url: str, prefix: str, name: str, mode: str, logs: Path) -> None:
        self.url, self.prefix, self.name, self.mode = url, prefix, name, mode
        # No socket timeout: BLPOP waits up to its own timeout (redis-py 8 defaults to 5 s).
        self.client = redis.Redis.from_url(url, protocol=2, socket_timeout=None)
        self.stderr = logs / f"{name}.stderr"
        self.seq = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), self.url, self.prefix, self.name, self.mode],
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=WORKER.parent,
            )
        ready = self.client.blpop([f"{self.prefix}:ready:{self.name}"], timeout=90)
        assert ready is not None, f"{self.name} did not start:\n{self.errors()}"

    def send(self, command: dict[str, Any]) -> None:
        self.seq += 1
        command["seq"] = self.seq
        self.client.rpush(f"{self.prefix}:ctl:{self.name}", json.dumps(command))
        done = self.client.blpop([f"{self.prefix}:done:{self.name}"], timeout=60)
        assert done is not None, f"{self.name} did not answer {command}:\n{self.errors()}"
        assert int(done[1]) == self.seq

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(timeout=30) == -signal.SIGKILL

    def exit(self) -> None:
        self.send({"op": "exit"})
        assert self.proc is not None and self.proc.wait(timeout=60) == 0, self.errors()

    def errors(self) -> str:
        return self.stderr.read_text(errors="replace")[-4000:] if self.stderr.exists() else ""


def old_checkpoint(stack: Any, thread: str) -> str | None:
    """A checkpoint from the first half of `thread`'s history, to fork from."""
    history = list(stack.inner.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}))
    if len(history) < 6:
        return None
    return str(history[len(history) * 2 // 3].config["configurable"]["checkpoint_id"])


def wait_for(client: redis.Redis, key: str, timeout: float) -> bytes | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = client.get(key)
        if value is not None:
            return value
        time.sleep(0.05)
    return None


def test_two_workers_forks_and_a_sigkill_deliver_every_pruned_id_exactly_once(
    redis7_url: str, prefix: str, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis7_url, protocol=2)
    local = build(redis7_url, prefix, "manual")  # this process: forks, audit, final drain
    a = Worker(redis7_url, prefix, "A", "inline", tmp_path)
    b = Worker(redis7_url, prefix, "B", "background", tmp_path)
    a.start()
    b.start()
    stalled: dict[str, Any] = {}
    forks = 0
    n = 0
    for round_ in range(ROUNDS):
        for thread in THREADS:
            n += 1
            worker = a if n % 2 else b
            fork = old_checkpoint(local, thread) if n % FORK_EVERY == 0 else None
            forks += fork is not None
            worker.send({"op": "turn", "thread": thread, "text": f"q{n}", "fork": fork})
        if round_ == KILL_ROUND:
            # B's plain hook stalls on its next batch, after recording it; B's turns
            # return (delivery is in B's background thread) until one has stalled.
            client.set(f"{prefix}:stall", "B")
            for thread in THREADS * 3:
                n += 1
                b.send({"op": "turn", "thread": thread, "text": f"q{n}", "fork": None})
                marker = wait_for(client, f"{prefix}:stalled", timeout=1.0)
                if marker is not None:
                    stalled = json.loads(marker)
                    break
            else:  # a busy machine: B's background thread may not have got to it yet
                marker = wait_for(client, f"{prefix}:stalled", timeout=30)
                stalled = json.loads(marker) if marker is not None else {}
            assert stalled, f"B never stalled mid-delivery:\n{b.errors()}"
            b.kill()
            # Killed between the two sinks: "before" has the batch, "after" does not.
            ns = next(("memories", t) for t in THREADS if stalled["ids"][0].startswith(t))
            before, after = (set(s.counts(ns)) for s in local.sinks)
            assert set(stalled["ids"]) <= before and not set(stalled["ids"]) & after
            client.delete(f"{prefix}:stall")
            b.start()
    assert forks >= 2
    a.exit()
    b.exit()

    # What B held when it died is leased for Delivery.lease seconds; then anyone drains it.
    deadline = time.monotonic() + 60
    while local.saver.delivery_stats().backlog and time.monotonic() < deadline:
        local.saver.drain()
        time.sleep(0.2)
    stats = local.saver.delivery_stats()
    assert stats.backlog == 0, stats

    expected = pruned_ids(local.inner, THREADS)
    assert all(expected.values())
    plain = Counter(local.hook.deliveries())
    for thread in THREADS:
        ns = ("memories", thread)
        for sink in local.sinks:  # exactly once, none missing, nothing else
            assert sink.counts(ns) == dict.fromkeys(expected[thread], 1), (sink, thread)
        got = {i: c for (n_, i), c in plain.items() if n_ == ns}
        assert set(got) == expected[thread], thread  # the plain hook: none missing
        repeated = {i for i, c in got.items() if c > 1}
        assert repeated <= set(stalled["ids"]), repeated  # only the interrupted batch
    assert stalled["ids"] and all(plain[k] == 2 for k in plain if k[1] in stalled["ids"])
    for worker in (a, b):
        assert "Traceback" not in worker.errors(), worker.errors()
    client.close()
