"""Worker processes for the reliability tests: ``python reliability_worker.py COMMAND ...``.

- ``shared URL PREFIX LOG INDEX THREADS TURNS``: runs TURNS turns on each of the threads
  ``shared-0 .. shared-(THREADS-1)`` (the same threads in every process), recording each
  completed put and put_writes to LOG; exits 0.
- ``sigkill URL PREFIX LOG SEED WRITERS TTL``: WRITERS threads run turns forever on their
  own LangGraph threads while one more copies, prunes and deletes ``copy-*`` threads. Each
  put and put_writes is recorded before it is sent ("intent") and after it returned
  ("ack"); each ack also writes a line ``A`` to stdout, so the parent can kill the process
  after a chosen number of acknowledged calls. Runs until killed.
"""

from __future__ import annotations

import itertools
import os
import pickle
import random
import sys
import threading
from typing import Any

from reliability_support import (
    Recorder,
    build_graph,
    put_record,
    turn_input,
    writes_record,
)

from langgraph_checkpoint_plainredis import RedisSaver


class RecordingSaver(RedisSaver):
    """`RedisSaver` that logs every put and put_writes to a `Recorder`."""

    def __init__(self, *args: Any, recorder: Recorder, intents: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder
        self.intents = intents
        self._seq = itertools.count()
        self._tag = os.getpid()

    def _logged(self, record: tuple, call: Any) -> Any:
        seq = (self._tag, next(self._seq))
        if self.intents:
            self.recorder.write(("intent", seq, record))
        result = call()
        if self.intents:
            self.recorder.write(("ack", seq))
            os.write(1, b"A\n")
        else:
            self.recorder.write(record)
        return result

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        record = put_record(config, checkpoint, metadata, new_versions)
        # Snapshot now: the graph may reuse the objects after the call.
        record = pickle.loads(pickle.dumps(record))
        return self._logged(
            record,
            lambda: super(RecordingSaver, self).put(config, checkpoint, metadata, new_versions),
        )

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        record = pickle.loads(pickle.dumps(writes_record(config, writes, task_id, task_path)))
        self._logged(
            record,
            lambda: super(RecordingSaver, self).put_writes(config, writes, task_id, task_path),
        )


def shared(url: str, prefix: str, log: str, index: str, threads: str, turns: str) -> None:
    recorder = Recorder(log)
    saver = RecordingSaver(url, prefix=prefix, recorder=recorder, intents=False)
    graph = build_graph(saver)
    ids = [f"shared-{i}" for i in range(int(threads))]
    rng = random.Random(int(index))
    for turn in range(int(turns)):
        rng.shuffle(ids)
        for thread in ids:
            config = {"configurable": {"thread_id": thread}}
            graph.invoke(turn_input(f"p{index} {thread} turn {turn}"), config)
    saver.close()
    recorder.close()


def sigkill(url: str, prefix: str, log: str, seed: str, writers: str, ttl: str) -> None:
    recorder = Recorder(log)
    saver = RecordingSaver(url, prefix=prefix, ttl=float(ttl), recorder=recorder, intents=True)
    graph = build_graph(saver)
    n = int(writers)
    # Each writer owns two LangGraph threads; later rounds continue the same threads.
    owned = [[f"w{w}-{j}" for j in range(2)] for w in range(n)]

    def writer(w: int) -> None:
        rng = random.Random(f"{seed}-{w}")
        for turn in itertools.count():
            thread = rng.choice(owned[w])
            graph.invoke(
                turn_input(f"{thread} seed {seed} turn {turn}"),
                {"configurable": {"thread_id": thread}},
            )

    def maintenance() -> None:
        rng = random.Random(f"{seed}-m")
        plain = RedisSaver(url, prefix=prefix, ttl=float(ttl))
        for step in itertools.count():
            target = f"copy-{step % 3}"
            plain.copy_thread(rng.choice(rng.choice(owned)), target)
            plain.prune([target], strategy="keep_latest")
            if step % 4 == 3:
                plain.delete_thread(target)

    workers = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(n)]
    workers.append(threading.Thread(target=maintenance, daemon=True))
    for t in workers:
        t.start()
    for t in workers:
        t.join()  # forever: the parent kills this process


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"shared": shared, "sigkill": sigkill}[command](*args)
