"""Deserialisation checks, in a process of their own (see the test that runs it).

LangGraph reads ``LANGGRAPH_STRICT_MSGPACK`` once, at import, so the parent starts this
script with or without it. The script prints one JSON object (its last line) with what it
observed; the test asserts on it. Planted payloads would create files in DIR if they were
executed.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import traceback
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde import _msgpack
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver
from langgraph_checkpoint_plainredis._codec import (
    decode_checkpoint,
    encode_blob,
    encode_checkpoint,
    encode_write,
)
from langgraph_checkpoint_plainredis._keys import KeySpace, write_field

EXT_CONSTRUCTOR_SINGLE_ARG = 0  # LangGraph's msgpack ext code: (module, name, arg) -> call


class Mood(Enum):
    CALM = "calm"
    GLAD = "glad"


@dataclass
class Note:
    text: str
    count: int


class TypedState(TypedDict):
    messages: Annotated[list[Any], add_messages]
    mood: Mood
    note: Note


def respond(state: TypedState) -> dict[str, Any]:
    last = state["messages"][-1]
    return {
        "messages": [AIMessage(f"echo: {last.content}", id=f"{last.id}-echo")],
        "mood": Mood.GLAD,
        "note": Note(last.content, len(state["messages"])),
    }


def build(checkpointer: Any) -> Any:
    graph = StateGraph(TypedState).add_node("respond", respond).add_edge(START, "respond")
    return graph.compile(checkpointer=checkpointer)


def said(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id=text.replace(" ", "-"))]}


def types_of(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "mood": type(values["mood"]).__name__,
        "note": type(values["note"]).__name__,
        "messages": sorted({type(m).__name__ for m in values["messages"]}),
        "count": len(values["messages"]),
    }


class Planted:
    """Unpickling this runs `touch PATH`."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.path}",))


def os_system_payload(path: str) -> tuple[str, bytes]:
    """A msgpack value that, if honoured, calls ``os.system("touch PATH")``."""
    inner = ormsgpack.packb(["os", "system", f"touch {path}"])
    return "msgpack", ormsgpack.packb(ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, inner))


def error_of(call: Any) -> dict[str, Any]:
    try:
        value = call()
    except Exception as exc:  # reported to the parent, which asserts on it
        return {"error": type(exc).__name__, "key": getattr(exc, "key", None), "text": str(exc)}
    return {"error": None, "value": repr(value)}


def main(url: str, prefix: str, folder: str) -> dict[str, Any]:
    out: dict[str, Any] = {"strict": _msgpack.STRICT_MSGPACK_ENABLED}
    client = redis.Redis.from_url(url, protocol=2)
    ks = KeySpace(prefix)
    marker = {name: str(Path(folder) / name) for name in ("blob", "ext", "write", "meta")}

    # 1. Graphs with custom types in their state, on each saver, read back by a fresh graph.
    config = {"configurable": {"thread_id": "typed"}}
    with RedisSaver(url, prefix=prefix) as saver:
        graph = build(saver)
        graph.invoke(said("one"), config)
        graph.invoke(said("two"), config)
    with RedisSaver(url, prefix=prefix) as fresh:
        out["sync"] = types_of(build(fresh).get_state(config).values)
        # Without the graph's allowlist the same value is not rebuilt: strict is on.
        raw = fresh.get_tuple(config)
        out["without_allowlist"] = type(raw.checkpoint["channel_values"]["note"]).__name__

    async def run_async() -> dict[str, Any]:
        aconfig = {"configurable": {"thread_id": "typed-async"}}
        async with AsyncRedisSaver(url, prefix=prefix) as asaver:
            agraph = build(asaver)
            await agraph.ainvoke(said("one"), aconfig)
            await agraph.ainvoke(said("two"), aconfig)
        async with AsyncRedisSaver(url, prefix=prefix) as afresh:
            return types_of((await build(afresh).aget_state(aconfig)).values)

    out["async"] = asyncio.run(run_async())

    rconfig = {"configurable": {"thread_id": "reduced"}}
    reducer = MessageReducer(config=ReducerConfig(min_messages=2, max_messages=4))
    with RedisSaver(url, prefix=prefix) as inner:
        rgraph = build(ReducingSaver(inner, reducer))
        for n in range(4):
            rgraph.invoke(said(f"turn {n}"), rconfig)
        out["reducing"] = types_of(rgraph.get_state(rconfig).values)

    # 2. Payloads planted in Redis, read through the graph and the savers.
    with RedisSaver(url, prefix=prefix) as saver:
        graph = build(saver)
        latest = saver.get_tuple(config)
        cid = latest.config["configurable"]["checkpoint_id"]
        tk = ks.thread("typed")
        blob_key = tk.blob("", "note", latest.checkpoint["channel_versions"]["note"])
        original = client.get(blob_key)

        client.set(blob_key, encode_blob(("pickle", pickle.dumps(Planted(marker["blob"])))))
        out["pickle_blob"] = error_of(lambda: graph.get_state(config))
        out["pickle_blob_reducing"] = error_of(
            lambda: ReducingSaver(saver, MessageReducer(max_messages=20)).get_tuple(config)
        )
        out["pickle_blob"]["expected_key"] = blob_key

        client.set(blob_key, encode_blob(os_system_payload(marker["ext"])))
        out["ext_blob"] = error_of(lambda: graph.get_state(config).values["note"])
        client.set(blob_key, original)

        wr_key = tk.wr("", cid)
        planted_write = encode_write(
            "planted", 0, "", "note", ("pickle", pickle.dumps(Planted(marker["write"])))
        )
        client.hset(wr_key, write_field("planted", 0), planted_write)
        out["pickle_write"] = error_of(lambda: saver.get_tuple(config))
        out["pickle_write"]["expected_key"] = wr_key
        client.hdel(wr_key, write_field("planted", 0))

        cp_key = tk.cp("", cid)
        stored = decode_checkpoint(client.get(cp_key), cp_key)
        meta = ("pickle", pickle.dumps(Planted(marker["meta"])))
        payload = encode_checkpoint(
            stored.parent_id, stored.run, stored.refs, stored.checkpoint, meta
        )
        client.set(cp_key, payload)
        out["pickle_metadata"] = error_of(lambda: saver.get_tuple(config))
        out["pickle_metadata"]["expected_key"] = cp_key

    out["executed"] = sorted(name for name, path in marker.items() if os.path.exists(path))
    client.close()
    return out


if __name__ == "__main__":
    try:
        result = main(*sys.argv[1:])
    except Exception:
        result = {"crash": traceback.format_exc()}
    print(json.dumps(result))
