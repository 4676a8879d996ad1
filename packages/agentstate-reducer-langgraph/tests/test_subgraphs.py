"""A subgraph that shares the wrapper (the checkpointer its parent graph inherits).

It checkpoints under a namespace of its own, new at each call, and is handed its caller's
list as that run holds it in memory: its first put cut that whole list. So each call of a
subgraph summarized again what the caller's run had cut (46 summaries of up to 92 messages
in a 50-step loop whose tool node was a subgraph, against 7 of 14 without it), handed it
over again (1,612 repeats with a ledger that forgets, `InMemoryLedger(12)`), and after an
interrupt inside it the subgraph's own summary came back into the caller's window as a
second summary block mid-window (found by review).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt

from agentstate_reducer import InMemoryLedger, MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver

STEPS = 50


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


class Slow(InMemorySaver):
    """An InMemorySaver whose puts take a while, as a database's do: LangGraph saves in the
    background, so a subgraph's first put may come before its caller's is recorded."""

    def put(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.001)
        return super().put(*args, **kwargs)


class Watched:
    """A reducer of window 10-20 with a summary, what it summarized and handed over."""

    def __init__(self, inner: InMemorySaver | None = None) -> None:
        self.summaries: list[list[str]] = []
        self.handed: Counter[str] = Counter()
        self._lock = threading.Lock()  # hooks run on LangGraph's background threads too
        config = ReducerConfig(
            min_messages=10,
            max_messages=20,
            summarize_fn=self.summarize,
            inject_summary=True,
            on_prune=[self.remember],
        )
        self.inner = inner if inner is not None else InMemorySaver()
        reducer = MessageReducer(config=config, ledger=InMemoryLedger(12))  # forgets
        self.saver = ReducingSaver(self.inner, reducer)

    def summarize(self, pruned: list[Any]) -> str:
        self.summaries.append([m.id for m in pruned])
        return f"{len(pruned)} earlier"

    def remember(self, pruned: list[Any], namespace: Any) -> None:
        with self._lock:
            self.handed.update(m.id for m in pruned)

    def check(self, made: set[str], window: list[str], summaries: bool = False) -> None:
        """Each message handed over once, none lost, windows and summaries bounded.

        A cut the subgraph's own put makes is made again by its caller's next put (the
        caller's run goes on from its own window): those messages are summarized twice,
        at most a window's worth (20) in these runs; see docs/reducing-saver.md."""
        assert len(self.summaries) <= len(made) // (20 - 10 - 2) + 1
        assert max(len(s) for s in self.summaries) <= 20
        summarized = [i for s in self.summaries for i in s if not i.startswith("summary")]
        assert len(summarized) - len(set(summarized)) <= 20
        again = [i for i, n in self.handed.items() if n > 1]
        # after an interrupt, an injected summary may reach the hooks twice once the
        # ledger forgot it (`InMemoryLedger(12)` here): a summary, never a message said
        assert [i for i in again if not (summaries and i.startswith("summary-"))] == []
        assert made <= set(self.handed) | set(window)
        stored = [t.checkpoint["channel_values"].get("messages") for t in self.inner.list(None)]
        assert max(len(m) for m in stored if isinstance(m, list)) <= 20


def loop(saver: Any, where: str, interrupt_at: int = -1) -> Any:
    """An agent loop of STEPS tool calls; `where` is the node that runs as a subgraph:
    ``tools``, ``agent``, or ``nested`` (tools, as a subgraph in a subgraph)."""
    done = [0]

    def agent(state: State) -> dict[str, Any]:
        step, done[0] = done[0], done[0] + 1
        if step < STEPS:
            call = {"name": "t", "args": {}, "id": f"c{step}"}
            return {"messages": [AIMessage("", id=f"ai-{step}", tool_calls=[call])]}
        return {"messages": [AIMessage("final", id="fin")]}

    def prepare(state: State) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [AIMessage("on it", id=f"pre-{call['id']}")]}

    def tools(state: State) -> dict[str, Any]:
        asked = next(m for m in reversed(state["messages"]) if getattr(m, "tool_calls", None))
        call = asked.tool_calls[0]
        if call["id"] == f"c{interrupt_at}":
            interrupt("approve?")
        return {"messages": [ToolMessage("r", tool_call_id=call["id"], id=f"t-{call['id']}")]}

    def route(state: State) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    def sub(*nodes: Any) -> Any:  # no checkpointer: it inherits its caller's
        graph = StateGraph(State)
        for (name, node), after in zip(nodes, [START, *(n for n, _ in nodes)], strict=False):
            graph.add_node(name, node).add_edge(after, name)
        return graph.compile()

    agent_node: Any = sub(("think", agent)) if where == "agent" else agent
    tools_node: Any = tools if where == "agent" else sub(("pre", prepare), ("run", tools))
    if where == "nested":
        tools_node = sub(("inner", tools_node))
    graph = StateGraph(State).add_node("agent", agent_node).add_node("tools", tools_node)
    graph.add_edge(START, "agent").add_conditional_edges("agent", route, ["tools", END])
    return graph.add_edge("tools", "agent").compile(checkpointer=saver)


def made(where: str) -> set[str]:
    steps = [f"ai-{n}" for n in range(STEPS)] + [f"t-c{n}" for n in range(STEPS)]
    pre = [] if where == "agent" else [f"pre-c{n}" for n in range(STEPS)]
    return {"h", "fin", *steps, *pre}


@pytest.mark.parametrize("where", ["tools", "agent", "nested"])
@pytest.mark.parametrize("style", ["sync", "async"])
async def test_a_subgraph_goes_on_from_its_callers_window(where: str, style: str) -> None:
    watched = Watched()
    graph = loop(watched.saver, where)
    thread = {"configurable": {"thread_id": "t"}, "recursion_limit": 2000}
    task = {"messages": [HumanMessage("task", id="h")]}
    if style == "sync":
        graph.invoke(task, thread)
    else:
        await graph.ainvoke(task, thread)
    window = [m.id for m in graph.get_state(thread).values["messages"]]
    watched.check(made(where), window)
    assert window[0] == "h" and window[-1] == "fin"


def test_a_nested_subgraph_goes_on_while_its_callers_puts_are_saved() -> None:
    """The inner subgraph's first put often came before the middle one's had been recorded
    (a saver that releases the GIL, as SqliteSaver does): it found no caller run and cut the
    root's whole list, 20 summaries of up to 129 messages (found by review). Every caller up
    the namespace counts now; the root's window is in the list too."""
    watched = Watched(Slow())
    graph = loop(watched.saver, "nested")
    thread = {"configurable": {"thread_id": "slow"}, "recursion_limit": 2000}
    graph.invoke({"messages": [HumanMessage("task", id="h")]}, thread)
    assert len(watched.summaries) <= 13 and max(len(s) for s in watched.summaries) <= 20
    window = {m.id for m in graph.get_state(thread).values["messages"]}
    assert made("nested") <= set(watched.handed) | window


def test_a_chat_whose_reply_is_a_subgraph_hands_each_message_over_once() -> None:
    watched = Watched()

    def reply(state: State) -> dict[str, Any]:
        asked = state["messages"][-1]
        return {"messages": [AIMessage(f"re: {asked.content}", id=f"re-{asked.id}")]}

    bot = StateGraph(State).add_node("reply", reply).add_edge(START, "reply").compile()
    graph = (
        StateGraph(State)
        .add_node("bot", bot)
        .add_edge(START, "bot")
        .compile(checkpointer=watched.saver)
    )
    thread = {"configurable": {"thread_id": "chat"}}
    for n in range(40):
        graph.invoke({"messages": [HumanMessage(f"q{n}", id=f"q{n}")]}, thread)
    window = [m.id for m in graph.get_state(thread).values["messages"]]
    watched.check({i for n in range(40) for i in (f"q{n}", f"re-q{n}")}, window)


def test_an_interrupt_inside_a_subgraph_resumes_without_a_second_summary_block() -> None:
    watched = Watched()
    graph = loop(watched.saver, "tools", interrupt_at=30)
    thread = {"configurable": {"thread_id": "i"}, "recursion_limit": 2000}
    graph.invoke({"messages": [HumanMessage("task", id="h")]}, thread)
    waiting = graph.get_state(thread, subgraphs=True)
    (inside,) = [t.state for t in waiting.tasks if t.state is not None]
    ids = [m.id for m in inside.values["messages"]]
    assert ids[0] == "h" and len(ids) <= 20 and ids[-1] == "pre-c30"
    graph.invoke(Command(resume="yes"), thread)
    for state in graph.get_state_history(thread):
        ids = [m.id for m in state.values.get("messages", [])]
        at = [k for k, i in enumerate(ids) if i.startswith("summary")]
        assert at in ([], [1, 2]), ids  # the summary block stays at the head
    final = [m.id for m in graph.get_state(thread).values["messages"]]
    watched.check(made("tools"), final, summaries=True)
