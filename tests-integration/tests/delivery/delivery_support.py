"""What the durable-delivery tests and their worker processes share.

Imported by the tests (the folder's conftest puts it on `sys.path`) and by
`delivery_worker.py`, which runs as a script from this folder.

- `CountingSink`: a transactional hook (`RedisSink`) counting each message it stores, so
  "exactly once" is a count of 1, written in the same script as its ledger entry. The
  stack runs one before and one after the plain hook, so a kill inside the plain hook
  leaves a batch one sink has stored and the other has not.
- `RecordingHook`: a plain hook appending every id it gets to a Redis list; it can stall
  mid-delivery (after recording) when the test sets a flag, so the test can SIGKILL it.
- `build`: the chat graph over plainredis with an outbox and a Redis ledger.
- `pruned_ids`: what the stored checkpoints say was pruned: per checkpoint, the message
  ids its parent held that it no longer holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import redis
from langchain_core.messages import AIMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import (
    Delivery,
    RedisDeliveryLedger,
    RedisOutbox,
    RedisSink,
    ReducingSaver,
)
from langgraph_checkpoint_plainredis import RedisSaver

WORKER = Path(__file__).resolve().parent / "delivery_worker.py"
WINDOW, KEEP = 6, 4


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def _reply(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    return {"messages": [AIMessage(f"echo: {last.content}", id=f"{last.id}-ai")]}


def chat_graph(checkpointer: Any) -> Any:
    builder = StateGraph(State).add_node("reply", _reply).add_edge(START, "reply")
    return builder.compile(checkpointer=checkpointer)


class CountingSink(RedisSink):
    """Counts each stored message: `HINCRBY <prefix>:<name>:{ns} <id> 1`, with its ledger entry."""

    def commands(self, message: Any, message_id: str, namespace: Any) -> list[tuple[Any, ...]]:
        return [("HINCRBY", self.key(self.name, namespace), message_id, 1)]

    def counts(self, namespace: Any) -> dict[str, int]:
        raw = self.ledger.client.hgetall(self.key(self.name, namespace))
        return {k.decode(): int(v) for k, v in raw.items()}


class RecordingHook:
    """A plain hook: RPUSHes ``[namespace, id]`` per message; stalls when told to."""

    name = "recording"

    def __init__(self, client: redis.Redis, prefix: str, worker: str = "") -> None:
        self.client = client
        self.log = f"{prefix}:plain"
        self.stall_flag = f"{prefix}:stall"
        self.stalled = f"{prefix}:stalled"
        self.worker = worker

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        ids = [m.id for m in pruned]
        self.client.rpush(self.log, *(json.dumps([list(namespace), i]) for i in ids))
        if self.worker and self.client.get(self.stall_flag) == self.worker.encode():
            self.client.set(self.stalled, json.dumps({"worker": self.worker, "ids": ids}))
            time.sleep(600)  # the test kills this process here, mid-delivery

    def deliveries(self) -> list[tuple[tuple[str, ...], str]]:
        rows = [json.loads(r) for r in self.client.lrange(self.log, 0, -1)]
        return [(tuple(ns), i) for ns, i in rows]


@dataclass
class Stack:
    inner: RedisSaver
    saver: ReducingSaver
    sinks: tuple[CountingSink, CountingSink]  # before and after `hook`
    hook: RecordingHook
    graph: Any


def build(url: str, prefix: str, mode: str, worker: str = "") -> Stack:
    """The saver every process uses: plainredis, a Redis outbox and ledger, two hooks."""
    client = redis.Redis.from_url(url, protocol=2)
    inner = RedisSaver(url, prefix=f"{prefix}:cp")
    ledger = RedisDeliveryLedger(client, prefix=f"{prefix}:d")
    before, after = CountingSink(ledger, name="before"), CountingSink(ledger, name="after")
    hook = RecordingHook(client, prefix, worker)
    hooks = [before, hook, after]
    reducer = MessageReducer(
        config=ReducerConfig(min_messages=KEEP, max_messages=WINDOW, on_prune=hooks),
        ledger=ledger,
    )
    # Exactly once holds only while no delivery outlasts its lease (another process may
    # then deliver it again): 10 s, room for a busy machine. B's stalled batch waits as long
    # after its kill, which the test's last drain allows for.
    options = Delivery(mode, lease=10.0, grace=30.0, retry_after=0.2, poll_interval=0.2)  # type: ignore[arg-type]
    saver = ReducingSaver(
        inner, reducer, outbox=RedisOutbox.for_saver(inner, prefix=f"{prefix}:d"), delivery=options
    )
    return Stack(inner, saver, (before, after), hook, chat_graph(saver))


def pruned_ids(inner: RedisSaver, threads: Iterable[str]) -> dict[str, set[str]]:
    """Per thread, the ids some stored checkpoint dropped from its parent's messages."""
    out: dict[str, set[str]] = {}
    for thread in threads:
        held: dict[str, set[str]] = {}
        parent: dict[str, str | None] = {}
        for t in inner.list({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}):
            cid = t.config["configurable"]["checkpoint_id"]
            messages = t.checkpoint["channel_values"].get("messages", [])
            held[cid] = {m.id for m in messages}
            parent[cid] = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        dropped: set[str] = set()
        for cid, pid in parent.items():
            if pid is not None and pid in held:
                dropped |= held[pid] - held[cid]
        out[thread] = dropped
    return out
