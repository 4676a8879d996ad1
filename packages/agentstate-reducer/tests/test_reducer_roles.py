"""Roles a cut cannot place: a message with no role, a role the package does not know, and
LangChain's removal marker."""

# No `from __future__ import annotations`: LangGraph reads a State's annotations at runtime.
import hashlib
from types import SimpleNamespace
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
)
from reducer_helpers import Recorder, conversation, get

from agentstate_reducer import MessageReducer, ReducerConfig, message_identity
from agentstate_reducer._messages import role_of


def ids(messages: list[Any]) -> list[str]:
    return [get(m, "id") for m in messages]


# -- no role ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "first",
    [{"content": "hi", "id": "x"}, {"role": "", "content": "hi"}, {"role": 3, "content": "hi"}],
    ids=["no-key", "empty", "not-a-str"],
)
def test_a_dict_without_a_role_is_refused_naming_the_index_the_value_and_the_roles(
    first: dict[str, Any],
) -> None:
    """It was preserved at index 0 as if it were a system prompt."""
    messages = [first, *conversation(3, calls=0, system=False)]
    reducer = MessageReducer(min_messages=2, max_messages=3)
    with pytest.raises(ValueError) as raised:
        reducer.plan(messages)
    text = str(raised.value)
    assert text.startswith(f"message 0 has no role (dict {first!r})")
    assert "'role' or 'type' key" in text and "'user', 'assistant', 'system', 'tool'" in text
    with pytest.raises(ValueError, match=r"^message 4 has no role"):
        reducer.plan(conversation(2, calls=0, system=False), first)  # also within bounds


def test_a_long_roleless_value_is_shortened_in_the_error() -> None:
    roleless = {"content": "x" * 500}
    with pytest.raises(ValueError) as raised:
        MessageReducer(min_messages=2, max_messages=3).plan([roleless])
    assert "x" * 100 not in str(raised.value) and "...)" in str(raised.value)


def test_an_object_without_a_role_is_refused_like_a_dict() -> None:
    with pytest.raises(ValueError, match=r"message 1 has no role \(SimpleNamespace .*`type` or"):
        MessageReducer().plan([{"role": "system", "content": "s"}, SimpleNamespace(content="c")])


# -- a role the package does not know --------------------------------------------------


def test_a_chat_message_with_its_own_role_is_an_ordinary_prunable_message() -> None:
    """`ChatMessage(role="critic")` at index 0 was preserved as if it were a system prompt."""
    messages = [
        ChatMessage(role="critic", content="be harsh", id="c"),
        HumanMessage("q0", id="h0"),
        AIMessage("a0", id="a0"),
        ChatMessage(role="critic", content="too long", id="c1"),
        HumanMessage("q1", id="h1"),
        AIMessage("a1", id="a1"),
    ]
    result = MessageReducer(min_messages=2, max_messages=3).plan(messages)
    assert ids(result.surviving) == ["h1", "a1"]
    assert ids(result.pruned) == ["c", "h0", "a0", "c1"]
    # within a turn it is kept with the turn
    within = [SystemMessage("s", id="s"), *messages[1:3], HumanMessage("q1", id="h1")]
    within += [ChatMessage(role="critic", content="hmm", id="c1"), AIMessage("a1", id="a1")]
    result = MessageReducer(min_messages=4, max_messages=5).plan(within)
    assert ids(result.surviving) == ["s", "h1", "c1", "a1"]


def test_a_dict_with_an_unknown_role_is_read_like_the_chat_message() -> None:
    """The same list as dicts is cut the same way, and stays dicts."""
    messages: list[Any] = [
        {"role": "critic", "content": "be harsh", "id": "c"},
        {"role": "user", "content": "q0", "id": "h0"},
        {"role": "assistant", "content": "a0", "id": "a0"},
        {"role": "user", "content": "q1", "id": "h1"},
        {"role": "assistant", "content": "a1", "id": "a1"},
    ]
    result = MessageReducer(min_messages=2, max_messages=3).plan(messages)
    assert ids(result.surviving) == ["h1", "a1"] and ids(result.pruned) == ["c", "h0", "a0"]
    assert all(isinstance(m, dict) for m in result.surviving + result.pruned)
    as_objects = [ChatMessage(role="critic", content="be harsh", id="c")]
    as_objects += [HumanMessage("q0", id="h0"), AIMessage("a0", id="a0")]
    as_objects += [HumanMessage("q1", id="h1"), AIMessage("a1", id="a1")]
    same = MessageReducer(min_messages=2, max_messages=3).plan(as_objects)
    assert ids(same.surviving) == ids(result.surviving)


def test_an_object_whose_type_is_no_role_is_read_by_its_role_like_a_dict() -> None:
    """The OpenAI SDK's Responses-API items carry ``type="message"`` beside their role: as
    objects they were all an unknown role, "message", so the system prompt was pruned and no
    message counted as a human turn; the same fields as dicts were read by their role."""

    def item(role: str, text: str, id_: str) -> SimpleNamespace:
        return SimpleNamespace(type="message", role=role, content=text, id=id_)

    fields = [("system", "s", "s"), ("user", "q0", "h0"), ("assistant", "a0", "a0")]
    fields += [("user", "q1", "h1"), ("assistant", "a1", "a1"), ("user", "q2", "h2")]
    fields += [("assistant", "a2", "a2")]
    objects = [item(*f) for f in fields]
    dicts = [{"type": "message", "role": r, "content": t, "id": i} for r, t, i in fields]
    for messages in (objects, dicts):
        result = MessageReducer(min_messages=3, max_messages=4).plan(messages)
        assert ids(result.surviving) == ["s", "h2", "a2"]
    # an id-less one keeps the identity it had (a durable ledger stores identities)
    text = '["message","hi",[],null]'
    assert message_identity(SimpleNamespace(type="message", role="user", content="hi")) == (
        "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]
    )
    # a type that names a role still wins, as a LangChain message's does
    assert role_of(SimpleNamespace(type="human", role="critic", content="q")) == "human"
    assert role_of(SimpleNamespace(type="critic", role="", content="q")) == "critic"


# -- removal markers -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["langchain", "dict"])
def test_a_removal_marker_is_refused_naming_the_index_the_id_and_the_fix(kind: str) -> None:
    """A `RemoveMessage` was kept in the window as if it were a message."""
    if kind == "langchain":
        messages: list[Any] = [SystemMessage("s", id="s"), HumanMessage("q", id="h0")]
        messages += [RemoveMessage(id="h0"), AIMessage("a", id="a0")]
    else:
        messages = [{"role": "system", "content": "s", "id": "s"}]
        messages += [{"role": "user", "content": "q", "id": "h0"}]
        messages += [{"type": "remove", "id": "h0"}, {"role": "assistant", "content": "a"}]
    hook = Recorder()
    reducer = MessageReducer(config=ReducerConfig(min_messages=2, max_messages=3, on_prune=[hook]))
    for call in (reducer.plan, reducer.reduce):
        with pytest.raises(ValueError) as raised:
            call(messages)
        text = str(raised.value)
        assert text.startswith("message 2 is a removal marker (RemoveMessage, id 'h0')")
        assert "add_messages" in text and "stored list" in text
    assert hook.calls == [] and reducer.pending == 0


async def test_areduce_refuses_a_removal_marker_too() -> None:
    with pytest.raises(ValueError, match="message 1 is a removal marker"):
        await MessageReducer().areduce([HumanMessage("q", id="h0")], [RemoveMessage(id="h0")])


def test_a_graph_state_never_holds_a_removal_marker() -> None:
    """Through the bridge (and any `add_messages` channel) removals are applied first, so a
    graph removing old messages is cut as before."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph

    reducer = MessageReducer(min_messages=4, max_messages=6)

    class State(TypedDict):
        messages: Annotated[list[BaseMessage], reducer.as_langgraph_reducer()]

    def answer(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(f"a{len(state['messages'])}")]}

    def trim(state: Any) -> dict[str, Any]:
        return {"messages": [RemoveMessage(id=m.id) for m in state["messages"][1:-4]]}

    builder = StateGraph(State)
    builder.add_node("answer", answer)
    builder.add_node("trim", trim)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", "trim")
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "roles-remove"}}
    graph.invoke({"messages": [SystemMessage("s", id="s")]}, config)
    for n in range(6):
        state = graph.invoke({"messages": [HumanMessage(f"q{n}")]}, config)
    messages = state["messages"]
    assert not any(m.type == "remove" for m in messages) and len(messages) <= 6
    assert messages[0].id == "s"
