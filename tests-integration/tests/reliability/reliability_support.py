"""Helpers shared by the reliability tests and the worker processes they start.

Imported by the tests (the folder's conftest puts it on `sys.path`) and by
`reliability_worker.py`, which runs as a script from this folder.

- `assert_sound`: the keyspace audit used after every fault: every checkpoint that
  lists is complete, nothing is orphaned, every key has a TTL when a ttl was set.
- `Recorder` / `replay` / `assert_parity`: the parity check under load. Every call
  that reached our saver is recorded; replayed into LangGraph's `InMemorySaver`
  (the reference of the parity suite) it must give the same tuples, field by field.
- `CuttingProxy`: a TCP proxy in front of a real server that cuts one connection
  mid-request or drops one reply, for "the server goes away mid-call".
- `build_graph`: the small graph (a node and a subgraph) the load and fault tests run.
"""

from __future__ import annotations

import os
import pickle
import random
import socket
import struct
import threading
import uuid
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

import redis
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_checkpoint_plainredis import RedisSaver
from langgraph_checkpoint_plainredis._codec import decode_blob, decode_checkpoint
from langgraph_checkpoint_plainredis._keys import KeySpace, blob_suffix, unescape

WORKER = Path(__file__).resolve().parent / "reliability_worker.py"
"""The script the multi-process and SIGKILL tests run (`python WORKER <command> ...`)."""

# -- configs ---------------------------------------------------------------------------------


def cfg(thread: str, ns: str = "", cid: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


def ident(t: CheckpointTuple) -> tuple[str, str, str]:
    conf = t.config["configurable"]
    return conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"]


# -- the graph -------------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]
    turns: int


# Every message carries an id: `add_messages` sets a missing id in place, which races
# LangGraph's background write of the same object, so what is stored would vary.


def _agent(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    reply = AIMessage(f"echo: {last.content}", id=f"{last.id}-echo")
    return {"messages": [reply], "turns": state.get("turns", 0) + 1}


def _note(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    return {"messages": [AIMessage(f"note after {len(state['messages'])}", id=f"{last.id}-note")]}


def build_graph(checkpointer: Any, *, subgraph: bool = True) -> Any:
    """START -> agent [-> notes, a subgraph that writes under namespace ``notes:<task>``]."""
    graph = StateGraph(State).add_node("agent", _agent).add_edge(START, "agent")
    if subgraph:
        notes = StateGraph(State).add_node("note", _note).add_edge(START, "note").compile()
        graph = graph.add_node("notes", notes).add_edge("agent", "notes")
    return graph.compile(checkpointer=checkpointer)


def turn_input(text: str) -> dict[str, Any]:
    """One user message, with an id derived from its text (see `_agent`)."""
    return {"messages": [HumanMessage(text, id=str(uuid.uuid5(uuid.NAMESPACE_URL, text)))]}


# -- the keyspace audit ----------------------------------------------------------------------


def _batched(client: redis.Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Runs `commands` in pipelines of 500; returns the replies in order."""
    out: list[Any] = []
    for part in chunks(commands, 500):
        pipe = client.pipeline(transaction=False)
        for cmd in part:
            pipe.execute_command(*cmd)
        out += pipe.execute()
    return out


def reachable_keys(client: redis.Redis, prefix: str) -> set[bytes]:
    """Every key the registry leads to (the idea of `reachable_keys` in test_saver.py)."""
    ks = KeySpace(prefix)
    tks = [ks.thread_from_component(c.decode()) for c in client.zrange(ks.threads, 0, -1)]
    found: set[bytes] = {tk.ns.encode() for tk in tks}
    nss = _batched(client, [("ZRANGE", tk.ns, 0, -1) for tk in tks])
    timelines = [(tk, n.decode()) for tk, names in zip(tks, nss, strict=True) for n in names]
    members = _batched(client, [("ZRANGE", tk.keys_prefix + n, 0, -1) for tk, n in timelines])
    for (tk, ns_e), listed in zip(timelines, members, strict=True):
        found |= {(tk.idx_prefix + ns_e).encode(), (tk.keys_prefix + ns_e).encode()}
        for member in listed:
            key = tk.indexed_key(unescape(ns_e), member.decode())
            assert key or member.startswith(b"r"), f"unknown index member {member!r}"
            if key:
                found.add(key.encode())
    ordered = sorted(found)
    exists = _batched(client, [("EXISTS", k) for k in ordered])
    return {k for k, e in zip(ordered, exists, strict=True) if e} | {ks.threads.encode()}


def keys_under(client: redis.Redis, prefix: str) -> set[bytes]:
    return set(client.scan_iter(match=f"{prefix}:*", count=1000))


@dataclass
class Audit:
    """What `assert_sound` found."""

    threads: set[str] = field(default_factory=set)
    checkpoints: dict[tuple[str, str, str], CheckpointTuple] = field(default_factory=dict)
    keys: int = 0


def assert_sound(
    client: redis.Redis, prefix: str, *, ttl: bool = False, sample: int | None = None
) -> Audit:
    """Audits a keyspace after a fault or a load run; fails on the first broken invariant.

    A checkpoint is *complete* when it reads back without error (in `list(None)`, and by
    id with `get_tuple`) and, for every channel in its ``channel_versions``, the blob of
    that version exists and its value reads back: the channel is in ``channel_values``
    exactly when the blob is not the saver's "absent" marker. Its pending writes decode
    too. Every checkpoint `list(None)` yields must be complete; `list` of each thread must
    agree with `list(None)`, newest first per namespace.

    Also: no key under the prefix is orphaned (unreachable from the registry, or a run
    set member naming no checkpoint), and with `ttl` every key but the registry expires.

    Args:
        sample: Re-read only this many checkpoints by id and list only this many
            threads one by one (a fixed random choice); None checks all of them.
    """
    audit = Audit()
    ks = KeySpace(prefix)
    saver = RedisSaver(client=client, prefix=prefix)
    everything = list(saver.list(None))
    audit.checkpoints = {ident(t): t for t in everything}
    assert len(audit.checkpoints) == len(everything), "list(None) repeats a checkpoint"
    audit.threads = {i[0] for i in audit.checkpoints}
    pick = random.Random(0)
    threads = sorted(audit.threads)
    if sample is not None and len(threads) > sample:
        threads = pick.sample(threads, sample)
    for thread in threads:
        own = [ident(t) for t in saver.list({"configurable": {"thread_id": thread}})]
        assert set(own) == {i for i in audit.checkpoints if i[0] == thread}, thread
        for ns in {i[1] for i in own}:
            ids = [i[2] for i in own if i[1] == ns]
            assert ids == sorted(ids, reverse=True), f"{thread!r}/{ns!r} is not newest first"
    idents = sorted(audit.checkpoints)
    if sample is not None and len(idents) > sample:
        idents = pick.sample(idents, sample)
    for i in idents:
        got = saver.get_tuple(cfg(*i))
        assert got is not None, f"listed checkpoint {i} does not read back by id"
        assert view(got) == view(audit.checkpoints[i]), i
    # Completeness from the raw keys, for every checkpoint.
    items = sorted(audit.checkpoints.items())
    cp_keys = [ks.thread(t).cp(ns, c) for (t, ns, c), _ in items]
    payloads = _batched(client, [("GET", k) for k in cp_keys])
    blob_of: dict[tuple[str, str, str, str], str] = {}
    for ((thread, ns, _), tup), key, raw in zip(items, cp_keys, payloads, strict=True):
        assert raw is not None, key
        refs = decode_checkpoint(raw, key).refs
        versions = tup.checkpoint["channel_versions"]
        assert sorted(refs) == sorted(blob_suffix(c, v) for c, v in versions.items()), key
        for channel, version in versions.items():
            blob_of[(thread, ns, channel, str(version))] = ks.thread(thread).blob(
                ns, channel, version
            )
    blob_keys = sorted(set(blob_of.values()))
    absent: dict[str, bool] = {}
    for key, blob in zip(blob_keys, _batched(client, [("GET", k) for k in blob_keys]), strict=True):
        # No key is an absent channel (what the savers and `migrate` store for one); an
        # "empty" blob is how data written by earlier 0.2.0 development builds spells it.
        absent[key] = blob is None or decode_blob(blob, key)[0] == "empty"
    for (thread, ns, cid), tup in items:
        for channel, version in tup.checkpoint["channel_versions"].items():
            key = blob_of[(thread, ns, channel, str(version))]
            has = channel in tup.checkpoint["channel_values"]
            assert not (has and absent[key]), f"a checkpoint lost its blob {key!r}"
            assert has is not absent[key], (thread, ns, cid, channel)
    keys = sorted(keys_under(client, prefix))
    audit.keys = len(keys)
    run_sets = [k for k in keys if k.startswith(ks.run_prefix.encode())]
    orphans = set(keys) - set(run_sets) - reachable_keys(client, prefix)
    assert not orphans, f"keys no thread leads to: {sorted(orphans)[:10]}"
    named = []
    for run_key, members in zip(
        run_sets, _batched(client, [("SMEMBERS", k) for k in run_sets]), strict=True
    ):
        for member in members:
            # "T:N:C": T and N are escaped, so the first two ':' separate.
            component, ns_e, cid = member.decode().split(":", 2)
            named.append((run_key, f"{ks.thread_from_component(component).cp_prefix}{ns_e}:{cid}"))
    found = _batched(client, [("EXISTS", cp) for _, cp in named])
    dangling = [n for n, e in zip(named, found, strict=True) if not e]
    assert not dangling, f"run sets name missing checkpoints: {dangling[:5]}"
    if ttl:
        pttls = _batched(client, [("PTTL", k) for k in keys])
        forever = {k for k, p in zip(keys, pttls, strict=True) if p == -1}
        assert forever <= {ks.threads.encode()}, f"keys without TTL: {sorted(forever)[:10]}"
    return audit


def delete_everything(client: redis.Redis, prefix: str, threads: Iterable[str]) -> None:
    """Deletes `threads` through the saver and checks that nothing is left under `prefix`."""
    saver = RedisSaver(client=client, prefix=prefix)
    for thread in threads:
        saver.delete_thread(thread)
    left = keys_under(client, prefix)
    assert not left, f"delete_thread left {sorted(left)[:10]}"


# -- parity: record what reached the saver, replay it into InMemorySaver ----------------------


def _plain_config(config: RunnableConfig) -> RunnableConfig:
    conf = config["configurable"]
    keep = ("thread_id", "checkpoint_ns", "checkpoint_id")
    return {"configurable": {k: conf[k] for k in keep if conf.get(k) is not None}}


def put_record(config: RunnableConfig, checkpoint: Any, metadata: Any, versions: Any) -> tuple:
    """A put as plain, picklable data: the metadata as the saver stores it."""
    return (
        "put",
        _plain_config(config),
        checkpoint,
        get_checkpoint_metadata(config, metadata),
        dict(versions),
    )


def writes_record(config: RunnableConfig, writes: Sequence[Any], task_id: str, path: str) -> tuple:
    return ("put_writes", _plain_config(config), list(writes), task_id, path)


class Recorder:
    """Appends records to a file as length-prefixed pickles, one `os.write` each.

    A process killed mid-write leaves at most one truncated record at the end, which
    `read_records` drops. Each record is written whole before the next one starts.
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write(self, record: Any) -> None:
        data = pickle.dumps(record)
        with self._lock:
            os.write(self._fd, struct.pack(">I", len(data)) + data)

    def close(self) -> None:
        os.close(self._fd)


def read_records(path: str) -> list[Any]:
    with open(path, "rb") as f:
        data = f.read()
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        if pos + 4 + size > len(data):
            break  # cut by SIGKILL
        out.append(pickle.loads(data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    return out


def replay(records: Iterable[tuple]) -> InMemorySaver:
    """The reference: the same puts and writes applied to LangGraph's `InMemorySaver`."""
    ref = InMemorySaver()
    for rec in records:
        if rec[0] == "put":
            ref.put(rec[1], rec[2], rec[3], rec[4])
        else:
            ref.put_writes(rec[1], rec[2], rec[3], rec[4])
    return ref


def _writes_key(w: Any) -> tuple[str, str, str]:
    return (w[0], w[1], repr(w[2]))


def view(t: CheckpointTuple, *, writes: bool = True) -> dict[str, Any]:
    """Every field of a tuple as plain data (pending writes as a sorted list)."""
    out = {
        "config": t.config,
        "checkpoint": t.checkpoint,
        "metadata": t.metadata,
        "parent_config": t.parent_config,
    }
    if writes:
        out["pending_writes"] = sorted((tuple(w) for w in t.pending_writes or ()), key=_writes_key)
    return out


def assert_parity(
    ours: dict[tuple[str, str, str], CheckpointTuple],
    ref: InMemorySaver,
    *,
    threads: Iterable[str],
    maybe: Collection[tuple[str, str, str]] = (),
    acked_writes: InMemorySaver | None = None,
) -> int:
    """Our checkpoints of `threads` equal the reference's, field by field.

    Args:
        ours: Our checkpoints by (thread, ns, id), e.g. `Audit.checkpoints`.
        ref: The replayed reference.
        threads: The threads to compare.
        maybe: Checkpoints whose put was sent but never acknowledged (a killed writer):
            ours may or may not hold them; if it does, they must equal the reference.
        acked_writes: When writes may be missing (killed writer), a reference of the
            acknowledged calls only: ours holds at least its writes, at most `ref`'s.

    Returns:
        How many checkpoints were compared.
    """
    wanted = set(threads)

    def listed(saver: InMemorySaver) -> dict[tuple[str, str, str], CheckpointTuple]:
        return {
            ident(t): t
            for thread in wanted
            for t in saver.list({"configurable": {"thread_id": thread}})
        }

    theirs = listed(ref)
    mine = {i: t for i, t in ours.items() if i[0] in wanted}
    missing = set(theirs) - set(mine) - set(maybe)
    assert not missing, f"acknowledged checkpoints lost: {sorted(missing)[:5]}"
    extra = set(mine) - set(theirs)
    assert not extra, f"checkpoints nobody wrote: {sorted(extra)[:5]}"
    floor = listed(acked_writes) if acked_writes is not None else {}
    for i, t in mine.items():
        if acked_writes is None:
            assert view(t) == view(theirs[i]), i
            continue
        assert view(t, writes=False) == view(theirs[i], writes=False), i
        got = {_writes_key(w) for w in t.pending_writes or ()}
        most = {_writes_key(w) for w in theirs[i].pending_writes or ()}
        least = {_writes_key(w) for w in floor[i].pending_writes or ()} if i in floor else set()
        assert least <= got <= most, i
    return len(mine)


# -- a proxy that cuts connections ------------------------------------------------------------


class CuttingProxy:
    """A TCP proxy to a real server that cuts one connection at a chosen point.

    After `arm("request", after=n)` the next client bytes are forwarded up to `n` bytes,
    then both sides are reset: the server sees a partial command and discards it.
    After `arm("reply")` the next request is forwarded whole and the server's reply is
    dropped with a reset: the command ran, the client never hears so. With
    `go_away=True` the proxy then refuses every new connection, like a dead server.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._mode: str | None = None
        self._left = 0
        self._go_away = False
        self.cuts = 0
        self.accepted = 0  # client connections so far
        self._conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def arm(self, mode: str, *, after: int = 0, go_away: bool = True) -> None:
        assert mode in ("request", "reply")
        with self._lock:
            self._mode, self._left, self._go_away = mode, after, go_away

    def close(self) -> None:
        _reset(self._listener)
        for conn in self._conns:
            _reset(conn)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self.accepted += 1
            upstream = socket.create_connection(self.target)
            self._conns += [client, upstream]
            pair = (client, upstream)
            threading.Thread(
                target=self._pump, args=(client, upstream, "request", pair), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(upstream, client, "reply", pair), daemon=True
            ).start()

    def _pump(self, src: socket.socket, dst: socket.socket, side: str, pair: Any) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                _reset(dst)
                return
            cut = False
            with self._lock:
                if self._mode == side:
                    if side == "request":
                        data, self._left = data[: self._left], self._left - len(data)
                        cut = self._left <= 0
                    else:
                        data, cut = b"", True
                    if cut:
                        self._mode = None
                        self.cuts += 1
            try:
                if data:
                    dst.sendall(data)
            except OSError:
                _reset(src)
                return
            if cut:
                if self._go_away:
                    _reset(self._listener)  # shutdown() makes accept() give up at once
                for s in pair:
                    _reset(s)
                return


def _reset(sock: socket.socket) -> None:
    # shutdown() wakes the other pump blocked in recv() on this socket; close() alone
    # would not.
    for step in (lambda: sock.shutdown(socket.SHUT_RDWR), sock.close):
        try:
            step()
        except OSError:
            pass


def dump_keyspace(client: redis.Redis, prefix: str) -> dict[bytes, bytes]:
    """Every key under `prefix` with its DUMP, to compare a keyspace before and after."""
    return {k: client.dump(k) for k in sorted(keys_under(client, prefix))}


def chunks(items: Sequence[Any], n: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]
