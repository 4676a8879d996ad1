"""A hook whose memory store is down, under `ReducingSaver`: it rests between calls.

Every put that wrote messages retried every conversation's waiting batch, one hook call
each: with 20 conversations down, each put made up to 20 calls (each paying the store's
timeout) and logged 20 tracebacks, and with an outbox a batch was retried long before its
own wait was over (a delivery of a new batch took the reducer's retries along): 3,079 hook
calls for 20 threads of 4 turns. The reducer's clock is set by each test: no test waits on the
wall clock.
"""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import Delivery, RedisDeliveryLedger, RedisOutbox, ReducingSaver

THREADS, TURNS = 20, 6


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


class Store:
    """An on_prune hook writing to a store that is down until told: it counts its calls."""

    def __init__(self) -> None:
        self.name = "store"
        self.down = True
        self.tried = 0
        self.got: dict[str, list[str]] = {}

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        self.tried += 1
        if self.down:
            raise ConnectionError("memory store is down")
        self.got.setdefault(namespace[-1], []).extend(m.id for m in pruned)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def resting(store: Store, ledger: Any = None) -> tuple[MessageReducer, Clock]:
    config = ReducerConfig(min_messages=4, max_messages=6, on_prune=[store])
    reducer = MessageReducer(config=config, ledger=ledger)
    clock = reducer._dispatcher.clock = Clock()
    return reducer, clock


def chat(saver: Any) -> Any:
    def reply(state: State) -> dict[str, Any]:
        asked = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {asked.content}", id=f"re-{asked.id}")]}

    return StateGraph(State).add_node("reply", reply).add_edge(START, "reply").compile(saver)


async def talk(graph: Any, turns: range, style: str) -> None:
    for turn in turns:
        for t in range(THREADS):
            config = {"configurable": {"thread_id": f"t{t}"}}
            ask = {"messages": [HumanMessage(f"q{turn}", id=f"t{t}-q{turn}")]}
            if style == "sync":
                graph.invoke(ask, config)
            else:
                await graph.ainvoke(ask, config)


def cut(graph: Any, thread: int, turns: int) -> list[str]:
    """What a thread's cuts handed over after `turns` turns, in order: what was said and
    its window no longer holds."""
    said = [i for n in range(turns) for i in (f"t{thread}-q{n}", f"re-t{thread}-q{n}")]
    window = graph.get_state({"configurable": {"thread_id": f"t{thread}"}}).values["messages"]
    kept = {m.id for m in window}
    assert 0 < len(kept) <= 6
    return [i for i in said if i not in kept]


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_a_store_that_is_down_is_called_once_per_rest_not_per_put(style: str) -> None:
    store = Store()
    reducer, clock = resting(store)
    graph = chat(ReducingSaver(InMemorySaver(), reducer))
    await talk(graph, range(TURNS), style)
    assert store.tried == 1  # 600 puts, 20 conversations with cuts waiting
    assert reducer.pending == sum(len(cut(graph, t, TURNS)) for t in range(THREADS))
    store.down = False
    clock.now += 1.0
    await talk(graph, range(TURNS, TURNS + 1), style)
    assert reducer.pending == 0
    assert store.got == {f"t{t}": cut(graph, t, TURNS + 1) for t in range(THREADS)}  # in order


def test_an_outboxs_batches_wait_for_the_hooks_rest(client: redis.Redis, prefix: str) -> None:
    """With an outbox a new batch's delivery also retried every batch that had failed before
    it, whatever their waits: the hook was called at nearly every put."""
    store = Store()
    reducer, clock = resting(store, RedisDeliveryLedger(client, prefix=prefix))
    saver = ReducingSaver(
        InMemorySaver(),
        reducer,
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("inline", retry_after=0),  # each drain retries what is staged
    )
    graph = chat(saver)
    for turn in range(4):
        for t in range(THREADS):
            ask = {"messages": [HumanMessage(f"q{turn}", id=f"t{t}-q{turn}")]}
            graph.invoke(ask, {"configurable": {"thread_id": f"t{t}"}})
    assert store.tried == 1
    staged = saver.delivery_stats().backlog
    assert staged >= THREADS
    store.down = False
    clock.now += 1.0
    while saver.drain().claimed:
        pass
    assert saver.delivery_stats().backlog == 0
    assert store.got == {f"t{t}": cut(graph, t, 4) for t in range(THREADS)}
