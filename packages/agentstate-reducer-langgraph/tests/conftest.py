"""Fixtures of the durable-delivery tests: a prefix per test, clients for real servers."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from redis.cluster import RedisCluster

from agentstate_testkit import ServerPool


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own: tests isolate by data, never by FLUSHALL."""
    return f"dd:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def any_client(redis_url: str, redis_kind: str) -> Iterator[Any]:
    """A blocking client on every selected kind: a `RedisCluster` on cluster kinds."""
    factory = RedisCluster if redis_kind.endswith("-cluster") else redis.Redis
    c = factory.from_url(redis_url, protocol=2)
    yield c
    c.close()


@pytest.fixture(scope="session")
def server_url(server_pool: ServerPool) -> str:
    """One plain server for the tests about behaviour, not server kinds: Redis 5, the
    baseline, which the lowest-versions run (`tests-integration/tests/matrix`) also has."""
    return server_pool.get("redis-5")


@pytest.fixture
def client(server_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(server_url, protocol=2)
    yield c
    c.close()


@pytest.fixture(params=["memory", "sqlite", "postgres", "plainredis"])
def inner(request: pytest.FixtureRequest) -> Iterator[BaseCheckpointSaver[Any]]:
    """An inner saver of each storage style: per channel version in process, whole
    checkpoints in SQLite, rows in the harness's PostgreSQL (each with its own history
    query), and per channel version on a real Redis (thread ``t``)."""
    if request.param == "memory":
        yield InMemorySaver()
    elif request.param == "sqlite":
        with sqlite3.connect(":memory:", check_same_thread=False) as conn:
            yield SqliteSaver(conn)
    elif request.param == "postgres":  # where the workspace has it, as plainredis
        postgres = pytest.importorskip("langgraph.checkpoint.postgres")
        with postgres.PostgresSaver.from_conn_string(
            request.getfixturevalue("postgres_url")
        ) as saver:
            saver.setup()
            saver.delete_thread("t")  # a test stopped before its clean-up
            yield saver
            saver.delete_thread("t")
    else:  # where the workspace has it (not a dependency of this package)
        plainredis = pytest.importorskip("langgraph_checkpoint_plainredis")
        url = request.getfixturevalue("server_url")
        with plainredis.RedisSaver(url, prefix=f"in:{uuid.uuid4().hex[:12]}") as saver:
            yield saver
            saver.delete_thread("t")


class CountingHook:
    """An on_prune hook counting each message id it was handed."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        for message in pruned:
            self.seen[message.id] = self.seen.get(message.id, 0) + 1


@pytest.fixture
def hook() -> CountingHook:
    return CountingHook()


def _scripted_loop(
    schema: Any, steps: int, edits: Any, checkpointer: Any, count: bool = False
) -> Any:
    """An agent loop of `steps` tool calls (ids ``ai-N``, ``t-cN``, then ``fin``); at agent
    step N, `edits(messages, N)` adds writes before the call; with `count`, a node writing
    another channel (``n``) only runs between the tools and the agent."""
    done = [0]

    def agent(state: Any) -> dict[str, Any]:
        step = done[0]
        done[0] += 1
        out: list[Any] = list(edits(state["messages"], step))
        if step < steps:
            call = {"name": "t", "args": {}, "id": f"c{step}"}
            out.append(AIMessage("", id=f"ai-{step}", tool_calls=[call]))
        else:
            out.append(AIMessage("final", id="fin"))
        return {"messages": out}

    def tools(state: Any) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage("r", tool_call_id=call["id"], id=f"t-{call['id']}")]}

    def route(state: Any) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    graph = StateGraph(schema).add_node("agent", agent).add_node("tools", tools)
    graph.add_edge(START, "agent").add_conditional_edges("agent", route, ["tools", END])
    if count:
        graph.add_node("count", lambda state: {"n": state.get("n", 0) + 1})
        graph.add_edge("tools", "count").add_edge("count", "agent")
    else:
        graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


@pytest.fixture(name="scripted_loop")
def scripted_loop_fixture() -> Any:
    """`_scripted_loop`, for the tests of long runs."""
    return _scripted_loop
