"""What the `plainredis` command tests share: a chat graph that writes threads, and the
command run in-process."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from redis.cluster import RedisCluster

from langgraph_checkpoint_plainredis import RedisSaver
from langgraph_checkpoint_plainredis._cli import main


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def chat(url: str, prefix: str, threads: dict[str, int], ttl: float | None = None) -> None:
    """Runs `turns` chat turns on each thread, through a real graph."""
    with RedisSaver(url, prefix=prefix, ttl=ttl) as saver:
        app = StateGraph(State).add_node("reply", reply).add_edge(START, "reply")
        graph = app.compile(checkpointer=saver)
        for thread_id, turns in threads.items():
            for turn in range(turns):
                config = {"configurable": {"thread_id": thread_id}}
                graph.invoke({"messages": [HumanMessage(f"question {turn} 你好")]}, config)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def listed(url: str, prefix: str, thread_id: str) -> list[Any]:
    with RedisSaver(url, prefix=prefix) as saver:
        return list(saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}))


def memory_usage(client: Any, key: str | bytes) -> int | None:
    if isinstance(client, RedisCluster):  # redis-py cannot route MEMORY USAGE on Redis 5
        client = client.get_redis_connection(client.get_node_from_key(key))
    size: int | None = client.memory_usage(key, samples=0)
    return size
