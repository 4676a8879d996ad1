"""Parity with `InMemorySaver`: the same random operations give the same results.

A hypothesis state machine drives LangGraph's `InMemorySaver` (the reference) and one of
our savers with the same sequence of put / put_writes / get_tuple / list /
delete_thread / copy_thread / prune / delete_for_runs, and compares every read field by
field: config, checkpoint (with channel_values), metadata, parent_config and
pending_writes. Where the two differ, ours is wrong. `InMemorySaver` has no
copy_thread, prune or delete_for_runs; `ReferenceSaver` adds them over its own dicts.

Each example works on a few threads, namespaces and checkpoint ids, so operations
collide; thread ids and namespaces include the key separator, glob, brace and escape
characters, non-ASCII text and the empty string.

Order of listings: for one (thread, namespace) both savers list newest first and the
sequences must be equal. `list(None)` and a thread across namespaces walk several
(thread, namespace) groups: our saver walks them in its own key order (the registry
zset; on a cluster, the sorted namespace keys it scans), InMemorySaver in dict
insertion order. There the tuples are compared as a set plus the order inside each
group, and a `limit` must cut our own unlimited listing.

The disagreements the state machine found are pinned as plain tests at the end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    multiple,
    rule,
    run_state_machine_as_test,
)
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
)
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver, _core

# -- alphabets -----------------------------------------------------------------------------

THREADS = ("a", "a:b", "x*?[]{}\\", "用户:1", "")
NAMESPACES = ("", "b:c", "c", "sub:1|inner:2")
# uuid6-like ids sort by time; "c10" < "c2" checks that order is lexicographic, not numeric.
CHECKPOINT_IDS = (
    "1ef4f797-8335-6428-8001-8a1503f9b875",
    "1ef4f797-8335-6429-8002-8a1503f9b875",
    "1ef4f797-9aaa-6000-8003-8a1503f9b875",
    "c1",
    "c10",
    "c2",
)
CHANNELS = ("a", "x:y", "messages", "b*{}")
TASK_IDS = ("t1", "t:2", "t*3")
TASK_PATHS = ("", "~__pregel_pull, a", "~__pregel_push, 0", "z")
# __error__, __scheduled__, __interrupt__, __resume__: overwritten, where others keep the first.
SPECIAL_CHANNELS = tuple(WRITES_IDX_MAP)
RUN_IDS = ("r1", "r:2", "run*3")
SOURCES = ("input", "loop", "update", "fork")
# Fixed versions next to the saver's own: ints, a numeric string, a string that starts
# with "#" (our version tag escapes it) and one holding the key separator.
Version = str | int | float
FIXED_VERSIONS: tuple[Version, ...] = (1, 2, 3, "1", "#1", "v:2")

values = st.one_of(
    st.none(),
    st.integers(-(2**31), 2**31),
    st.text(max_size=4),
    st.lists(st.integers(0, 3), max_size=3),
)
# run_id is drawn by `put`: into the metadata, or into the config for get_checkpoint_metadata.
metadata_strategy = st.fixed_dictionaries(
    {"source": st.sampled_from(SOURCES), "step": st.integers(-1, 3)},
    optional={
        "score": st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["x", "y:z"])),
    },
)
filters = st.one_of(
    st.none(),
    st.fixed_dictionaries({"source": st.sampled_from(SOURCES)}),
    st.fixed_dictionaries({"step": st.integers(-1, 3)}),
    st.fixed_dictionaries({"run_id": st.sampled_from(RUN_IDS)}),
    st.fixed_dictionaries({"score": st.one_of(st.none(), st.integers(0, 2))}),
    st.fixed_dictionaries({"source": st.sampled_from(SOURCES), "step": st.integers(-1, 3)}),
)
limits = st.one_of(st.none(), st.integers(0, 4))
# (run id or None, whether it travels in the config rather than in the metadata)
runs = st.tuples(st.one_of(st.none(), st.sampled_from(RUN_IDS)), st.booleans())

# Sized so that the file runs in about 15 s per standalone Redis kind, 30 s per cluster.
PARITY_SETTINGS = settings(
    max_examples=80,
    stateful_step_count=40,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the tree
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


def make_checkpoint(
    cid: str,
    channel_values: dict[str, Any] | None = None,
    channel_versions: dict[str, Any] | None = None,
    updated_channels: list[str] | None = None,
) -> Checkpoint:
    versions = dict(channel_versions or {})
    return {
        "v": 4,
        "id": cid,
        "ts": "2024-07-31T20:14:19.804150+00:00",
        "channel_values": dict(channel_values or {}),
        "channel_versions": versions,
        "versions_seen": {"node": dict(list(versions.items())[:1])},
        "updated_channels": updated_channels,
    }


def cfg(thread_id: str, ns: str | None = None, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


# -- the reference ---------------------------------------------------------------------------


class ReferenceSaver(InMemorySaver):
    """`InMemorySaver` plus copy_thread, prune and delete_for_runs over its own dicts.

    `storage[thread][ns][cid] = (checkpoint, metadata, parent_id)`,
    `writes[(thread, ns, cid)][(task_id, idx)] = (task_id, channel, typed, task_path)`,
    `blobs[(thread, ns, channel, version)] = typed`.

    prune and delete_for_runs also drop the blobs of a (thread, namespace) that no
    remaining checkpoint of it references, as `PostgresSaver.prune` documents and our
    saver does. That is visible only to a later checkpoint that names such a version
    without writing it, which LangGraph never does (a checkpoint inherits versions from
    its parent, which is kept); InMemorySaver would still return the old value.
    """

    def _collect_garbage(self, thread_id: str, ns: str) -> None:
        live = {
            (channel, version)
            for checkpoint, _, _ in self.storage.get(thread_id, {}).get(ns, {}).values()
            for channel, version in self.serde.loads_typed(checkpoint)["channel_versions"].items()
        }
        for key in list(self.blobs):
            if key[:2] == (thread_id, ns) and key[2:] not in live:
                del self.blobs[key]

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        if source_thread_id == target_thread_id:
            return
        for ns, checkpoints in list(self.storage.get(source_thread_id, {}).items()):
            for cid, entry in checkpoints.items():
                self.storage[target_thread_id][ns][cid] = entry
        for (thread, ns, cid), writes in list(self.writes.items()):
            if thread == source_thread_id:
                # Same (task, idx) keys are overwritten, others of the target kept.
                self.writes[(target_thread_id, ns, cid)].update(writes)
        for (thread, ns, channel, version), typed in list(self.blobs.items()):
            if thread == source_thread_id:
                self.blobs[(target_thread_id, ns, channel, version)] = typed

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            namespaces = set(self.storage.get(thread_id, {}))
            namespaces |= {ns for (t, ns, _) in self.writes if t == thread_id}
            for ns in namespaces:
                checkpoints = self.storage.get(thread_id, {}).get(ns, {})
                keep = max(checkpoints, default=None)
                doomed = {c for c in checkpoints if c != keep}
                for cid in doomed:
                    del checkpoints[cid]
                # Writes of no checkpoint go when older than the one kept: a newer one's may
                # be of a checkpoint a running graph is still putting.
                for key in [
                    k
                    for k in self.writes
                    if k[:2] == (thread_id, ns)
                    and k[2] != keep
                    and (k[2] in doomed or keep is None or k[2] < keep)
                ]:
                    del self.writes[key]
                self._collect_garbage(thread_id, ns)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        for thread_id, ns, cid in self.run_checkpoints(run_ids):
            del self.storage[thread_id][ns][cid]
            self.writes.pop((thread_id, ns, cid), None)
            self._collect_garbage(thread_id, ns)

    def run_checkpoints(self, run_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        """(thread, namespace, checkpoint id) of every checkpoint the runs wrote."""
        runs = set(run_ids)
        return [
            (thread_id, ns, cid)
            for thread_id, namespaces in self.storage.items()
            for ns, checkpoints in namespaces.items()
            for cid, (_, metadata, _) in checkpoints.items()
            if self.serde.loads_typed(metadata).get("run_id") in runs
        ]


# -- drivers: one blocking interface over the reference, RedisSaver and AsyncRedisSaver ---


class Driver:
    """Blocking calls on a saver; `list` returns a list."""

    def __init__(self, saver: Any) -> None:
        self.saver = saver

    def put(self, *args: Any) -> RunnableConfig:
        return self.saver.put(*args)  # type: ignore[no-any-return]

    def put_writes(self, *args: Any) -> None:
        self.saver.put_writes(*args)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)  # type: ignore[no-any-return]

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple]:
        return list(self.saver.list(config, **kwargs))

    def delete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)

    def copy_thread(self, source: str, target: str) -> None:
        self.saver.copy_thread(source, target)

    def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        self.saver.prune(thread_ids, strategy=strategy)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.saver.delete_for_runs(run_ids)

    def close(self) -> None:
        self.saver.close()


class AsyncDriver(Driver):
    """Runs `AsyncRedisSaver`'s `a*` methods on a loop of its own."""

    def __init__(self, saver: AsyncRedisSaver) -> None:
        super().__init__(saver)
        self.loop = asyncio.new_event_loop()

    def put(self, *args: Any) -> RunnableConfig:
        return self.loop.run_until_complete(self.saver.aput(*args))  # type: ignore[no-any-return]

    def put_writes(self, *args: Any) -> None:
        self.loop.run_until_complete(self.saver.aput_writes(*args))

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.loop.run_until_complete(self.saver.aget_tuple(config))  # type: ignore[no-any-return]

    def list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.saver.alist(config, **kwargs)]

        return self.loop.run_until_complete(collect())

    def delete_thread(self, thread_id: str) -> None:
        self.loop.run_until_complete(self.saver.adelete_thread(thread_id))

    def copy_thread(self, source: str, target: str) -> None:
        self.loop.run_until_complete(self.saver.acopy_thread(source, target))

    def prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        self.loop.run_until_complete(self.saver.aprune(thread_ids, strategy=strategy))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.loop.run_until_complete(self.saver.adelete_for_runs(run_ids))

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.saver.aclose())
        finally:
            self.loop.close()


def make_driver(kind: str, redis_url: str, prefix: str) -> Driver:
    if kind == "sync":
        return Driver(RedisSaver(redis_url, prefix=prefix))
    return AsyncDriver(AsyncRedisSaver(redis_url, prefix=prefix))


# -- comparison ------------------------------------------------------------------------------


def view(t: CheckpointTuple | None) -> dict[str, Any] | None:
    """Every field of a tuple, as plain data."""
    if t is None:
        return None
    return {
        "config": t.config,
        "checkpoint": t.checkpoint,
        "metadata": t.metadata,
        "parent_config": t.parent_config,
        "pending_writes": [tuple(w) for w in t.pending_writes or ()],
    }


def ident(t: CheckpointTuple) -> tuple[str, str, str]:
    conf = t.config["configurable"]
    return conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"]


def assert_same_sequence(ours: list[CheckpointTuple], ref: list[CheckpointTuple]) -> None:
    assert [ident(t) for t in ours] == [ident(t) for t in ref]
    for mine, theirs in zip(ours, ref, strict=True):
        assert view(mine) == view(theirs), ident(theirs)


def groups(tuples: list[CheckpointTuple]) -> dict[tuple[str, str], list[str]]:
    """Checkpoint ids per (thread, namespace), in listing order."""
    out: dict[tuple[str, str], list[str]] = {}
    for t in tuples:
        thread, ns, cid = ident(t)
        out.setdefault((thread, ns), []).append(cid)
    return out


def assert_same_groups(ours: list[CheckpointTuple], ref: list[CheckpointTuple]) -> None:
    """Same tuples; within each (thread, namespace) the same order, newest first.

    Across groups our saver walks (thread, namespace) in key order, InMemorySaver in
    dict insertion order: that order is not part of the contract.
    """
    mine = {ident(t): view(t) for t in ours}
    theirs = {ident(t): view(t) for t in ref}
    assert len(mine) == len(ours), "our listing repeats a checkpoint"
    assert sorted(mine) == sorted(theirs)
    assert mine == theirs
    assert groups(ours) == groups(ref)
    # Our walk is group by group: each (thread, namespace) is one contiguous run.
    runs = [(ident(t)[0], ident(t)[1]) for t in ours]
    starts = [k for i, k in enumerate(runs) if i == 0 or runs[i - 1] != k]
    assert len(starts) == len(set(starts)), f"groups interleave: {runs}"


# -- the state machine -------------------------------------------------------------------------


class ParityMachine(RuleBasedStateMachine):
    """Drives `ReferenceSaver` and one of our savers with the same operations.

    Each example first picks a few threads, namespaces and checkpoint ids from the
    alphabets above and then works on those only, so that operations collide.
    """

    kind = "sync"
    redis_url = ""
    client: Any = None  # for the cleanup only

    threads = Bundle("threads")
    namespaces = Bundle("namespaces")
    checkpoint_ids = Bundle("checkpoint_ids")

    def __init__(self) -> None:
        super().__init__()
        self.prefix = f"parity:{uuid.uuid4().hex[:12]}"
        self.ref = Driver(ReferenceSaver())
        self.ours = make_driver(self.kind, self.redis_url, self.prefix)
        # Versions the saver's get_next_version accepts as `current`.
        self.numeric_versions: list[Version] = [1, 2, 3]
        self.used_versions: list[Version] = []

    def teardown(self) -> None:
        try:
            self.ours.close()
        finally:
            # The conftest `client`: a RedisCluster on cluster kinds, which scans every
            # node and splits the DEL by slot.
            keys = list(self.client.scan_iter(match=f"{self.prefix}:*", count=1000))
            if keys:
                self.client.delete(*keys)

    @initialize(
        target=threads,
        chosen=st.lists(st.sampled_from(THREADS), min_size=1, max_size=3, unique=True),
    )
    def choose_threads(self, chosen: list[str]) -> Any:
        return multiple(*chosen)

    @initialize(
        target=namespaces,
        chosen=st.lists(st.sampled_from(NAMESPACES), min_size=1, max_size=2, unique=True),
    )
    def choose_namespaces(self, chosen: list[str]) -> Any:
        return multiple(*chosen)

    @initialize(
        target=checkpoint_ids,
        chosen=st.lists(st.sampled_from(CHECKPOINT_IDS), min_size=2, max_size=4, unique=True),
    )
    def choose_checkpoint_ids(self, chosen: list[str]) -> Any:
        return multiple(*chosen)

    # -- writes --------------------------------------------------------------------------

    def _next_version(self, current: Version | None) -> str:
        """The saver's next version; a fixed version that is not numeric counts as none."""
        if isinstance(current, str) and not current.split(".", 1)[0].isdigit():
            current = None
        version: str = self.ours.saver.get_next_version(current, None)
        self.numeric_versions.append(version)
        return version

    def _version(self, data: st.DataObject) -> Version:
        how = data.draw(st.sampled_from(["next", "fixed", "reuse"]), label="version kind")
        if how == "reuse" and self.used_versions:
            return data.draw(st.sampled_from(self.used_versions), label="reused version")
        if how == "next":
            current = data.draw(st.sampled_from([None, *self.numeric_versions]), label="next of")
            return self._next_version(current)
        return data.draw(st.sampled_from(FIXED_VERSIONS), label="fixed version")

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: dict[str, Any],
        run: tuple[str | None, bool],
    ) -> None:
        """Puts on both savers; the run id goes into the metadata or the config.

        The same checkpoint id may be put again under another run (or none).
        """
        self.used_versions.extend(checkpoint["channel_versions"].values())
        run_id, run_in_config = run
        if run_id is not None and run_in_config:
            # get_checkpoint_metadata copies it from the config into the metadata.
            config = {"configurable": {**config["configurable"], "run_id": run_id}}
        elif run_id is not None:
            metadata = {**metadata, "run_id": run_id}
        expected = self.ref.put(config, dict(checkpoint), dict(metadata), dict(new_versions))
        got = self.ours.put(config, dict(checkpoint), dict(metadata), dict(new_versions))
        assert got == expected

    def _values(self, data: st.DataObject, new: set[str]) -> dict[str, Any]:
        # Most new channels carry a value; one without a value must read back as absent.
        # Values of channels outside new_versions are not stored by either saver.
        valued = data.draw(st.sets(st.sampled_from(CHANNELS)), label="valued channels")
        if new:
            valued |= data.draw(st.sets(st.sampled_from(sorted(new))), label="valued new")
        return {ch: data.draw(values, label=f"value of {ch}") for ch in sorted(valued)}

    @rule(
        thread=threads,
        ns=namespaces,
        cid=checkpoint_ids,
        parent=st.one_of(st.none(), checkpoint_ids),
        metadata=metadata_strategy,
        run=runs,
        data=st.data(),
    )
    def put(
        self,
        thread: str,
        ns: str,
        cid: str,
        parent: str | None,
        metadata: CheckpointMetadata,
        run: tuple[str | None, bool],
        data: st.DataObject,
    ) -> None:
        """Any checkpoint: versions from get_next_version, fixed, or reused from others."""
        versioned = data.draw(
            st.lists(st.sampled_from(CHANNELS), unique=True, max_size=4), label="channels"
        )
        channel_versions = {ch: self._version(data) for ch in versioned}
        new = data.draw(st.sets(st.sampled_from(versioned)), label="new") if versioned else set()
        new_versions = {ch: v for ch, v in channel_versions.items() if ch in new}
        checkpoint = make_checkpoint(
            cid, self._values(data, new), channel_versions, sorted(new_versions) or None
        )
        self._put(cfg(thread, ns, parent), checkpoint, metadata, new_versions, run)

    @rule(
        thread=threads,
        ns=namespaces,
        cid=checkpoint_ids,
        metadata=metadata_strategy,
        run=runs,
        data=st.data(),
    )
    def put_child(
        self,
        thread: str,
        ns: str,
        cid: str,
        metadata: CheckpointMetadata,
        run: tuple[str | None, bool],
        data: st.DataObject,
    ) -> None:
        """A child of the latest checkpoint, as a graph step writes it: it inherits the
        parent's versions and bumps some with get_next_version."""
        parent = self.ref.get_tuple(cfg(thread, ns))
        inherited = dict(parent.checkpoint["channel_versions"]) if parent else {}
        new = data.draw(st.sets(st.sampled_from(CHANNELS), min_size=1), label="new")
        new_versions = {ch: self._next_version(inherited.get(ch)) for ch in sorted(new)}
        checkpoint = make_checkpoint(
            cid, self._values(data, new), {**inherited, **new_versions}, sorted(new_versions)
        )
        config = cfg(thread, ns, get_checkpoint_id(parent.config) if parent else None)
        self._put(config, checkpoint, metadata, new_versions, run)

    @rule(
        thread=threads,
        ns=namespaces,
        cid=checkpoint_ids,
        writes=st.lists(
            st.tuples(st.sampled_from(CHANNELS + SPECIAL_CHANNELS), values), max_size=4
        ),
        task_id=st.sampled_from(TASK_IDS),
        task_path=st.sampled_from(TASK_PATHS),
    )
    def put_writes(
        self,
        thread: str,
        ns: str,
        cid: str,
        writes: list[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> None:
        # Writes may target a checkpoint that does not exist (yet): both savers keep them.
        self.ref.put_writes(cfg(thread, ns, cid), writes, task_id, task_path)
        self.ours.put_writes(cfg(thread, ns, cid), writes, task_id, task_path)

    def _check_everything(self) -> None:
        """After a bulk operation: every checkpoint of every thread, every field."""
        assert_same_groups(self.ours.list(None), self.ref.list(None))

    @rule(source=threads, to=st.one_of(threads, st.sampled_from(THREADS)))
    def copy_thread(self, source: str, to: str) -> None:
        self.ref.copy_thread(source, to)
        self.ours.copy_thread(source, to)
        self._check_everything()

    @rule(
        how=st.sampled_from(["delete_thread", "keep_latest", "delete", "delete_for_runs"]),
        thread_ids=st.lists(threads, min_size=1, max_size=3),
        run_ids=st.lists(st.sampled_from(RUN_IDS), min_size=1, max_size=2),
    )
    def remove(self, how: str, thread_ids: list[str], run_ids: list[str]) -> None:
        """delete_thread, prune (both strategies) or delete_for_runs: one rule, so that
        removals do not outnumber puts."""
        if how == "delete_thread":
            self.ref.delete_thread(thread_ids[0])
            self.ours.delete_thread(thread_ids[0])
        elif how == "delete_for_runs":
            self.ref.delete_for_runs(run_ids)
            self.ours.delete_for_runs(run_ids)
        else:
            self.ref.prune(thread_ids, how)
            self.ours.prune(thread_ids, how)
        self._check_everything()

    # -- reads ---------------------------------------------------------------------------

    @rule(thread=threads, ns=namespaces, omit_ns=st.booleans())
    def get_latest(self, thread: str, ns: str, omit_ns: bool) -> None:
        config = cfg(thread, None if omit_ns and ns == "" else ns)
        assert view(self.ours.get_tuple(config)) == view(self.ref.get_tuple(config))

    @rule(
        thread=threads,
        ns=namespaces,
        cid=st.one_of(checkpoint_ids, st.just("c0")),
        omit_ns=st.booleans(),
        extra=st.booleans(),
    )
    def get_by_id(self, thread: str, ns: str, cid: str, omit_ns: bool, extra: bool) -> None:
        # InMemorySaver echoes the config it was given for a lookup by id, whatever it holds.
        config = cfg(thread, None if omit_ns and ns == "" else ns, cid)
        if extra:
            config["configurable"]["user_id"] = "u-1"
        assert view(self.ours.get_tuple(config)) == view(self.ref.get_tuple(config))

    @rule(
        thread=threads,
        ns=namespaces,
        cid=st.one_of(st.none(), checkpoint_ids),
        before=st.one_of(st.none(), checkpoint_ids),
        filter=filters,
        limit=limits,
    )
    def list_one_timeline(
        self,
        thread: str,
        ns: str,
        cid: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> None:
        """One (thread, namespace): the exact sequence, newest first."""
        kwargs = {
            "filter": filter,
            "before": None if before is None else cfg(thread, ns, before),
            "limit": limit,
        }
        config = cfg(thread, ns, cid)
        assert_same_sequence(self.ours.list(config, **kwargs), self.ref.list(config, **kwargs))

    @rule(
        thread=st.one_of(st.none(), threads),
        cid=st.one_of(st.none(), checkpoint_ids),
        before=st.one_of(st.none(), checkpoint_ids),
        filter=filters,
        limit=limits,
    )
    def list_many_timelines(
        self,
        thread: str | None,
        cid: str | None,
        before: str | None,
        filter: dict[str, Any] | None,
        limit: int | None,
    ) -> None:
        """`config=None` or a thread across namespaces: several (thread, namespace) groups.

        Our saver walks groups in key order, InMemorySaver in insertion order, so
        the unlimited listings are compared as sets plus the order inside each group; a
        `limit` result must be the first `limit` tuples of our own unlimited listing,
        because which groups a limit cuts off depends on the group order.
        """
        config = None if thread is None else cfg(thread, None, cid)
        before_config = None if before is None else cfg(thread or "", "", before)
        ours_all = self.ours.list(config, filter=filter, before=before_config)
        ref_all = self.ref.list(config, filter=filter, before=before_config)
        assert_same_groups(ours_all, ref_all)
        if limit is not None:
            ours = self.ours.list(config, filter=filter, before=before_config, limit=limit)
            assert [view(t) for t in ours] == [view(t) for t in ours_all[:limit]]


def run_parity(
    kind: str, redis_url: str, client: Any, max_examples: int = PARITY_SETTINGS.max_examples
) -> None:
    attrs = {"kind": kind, "redis_url": redis_url, "client": client}
    machine = type(f"ParityMachine_{kind}", (ParityMachine,), attrs)
    run_state_machine_as_test(
        machine, settings=settings(PARITY_SETTINGS, max_examples=max_examples)
    )


def test_sync_saver_matches_in_memory_saver(redis_url: str, client: Any) -> None:
    run_parity("sync", redis_url, client)


def test_async_saver_matches_in_memory_saver(redis_url: str, client: Any) -> None:
    # A plain (sync) test: the driver runs AsyncRedisSaver on an event loop of its own.
    run_parity("async", redis_url, client)


def test_paged_listing_matches_in_memory_saver(
    redis_url: str, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with one entry per LIST script call, so that every listing pages on
    (resuming inside a namespace and across namespaces), which the default page of 128
    never does on a few checkpoints."""
    monkeypatch.setattr(_core, "_LIST_PAGE", 1)
    run_parity("sync", redis_url, client, max_examples=50)


# -- fork safety -------------------------------------------------------------------------------


async def test_fork_keeps_the_branch_it_forked_from(saver: Any) -> None:
    """A fork from an older checkpoint gets new versions, so it never overwrites a branch.

    A, then B child of A; then the fork B' child of A with versions from
    `get_next_version` of the newest of A's versions: B still reads back its own values.
    """
    base = cfg(f"fork-{uuid.uuid4().hex[:8]}", "")
    a_versions = {ch: saver.get_next_version(None, None) for ch in ("x", "y")}
    a_cfg = await saver.aput(
        base, make_checkpoint("c1", {"x": "x-A", "y": "y-A"}, a_versions), {"step": 0}, a_versions
    )
    b_new = {"x": saver.get_next_version(a_versions["x"], None)}
    b_cfg = await saver.aput(
        a_cfg,
        make_checkpoint("c2", {"x": "x-B", "y": "y-A"}, {**a_versions, **b_new}),
        {"step": 1},
        b_new,
    )
    top = max(a_versions.values())
    fork_new = {ch: saver.get_next_version(top, None) for ch in ("x", "y")}
    assert fork_new["x"] != b_new["x"]
    fork_cfg = await saver.aput(
        a_cfg,
        make_checkpoint("c3", {"x": "x-fork", "y": "y-fork"}, {**a_versions, **fork_new}),
        {"step": 1, "source": "fork"},
        fork_new,
    )

    b = await saver.aget_tuple(b_cfg)
    assert b is not None and b.parent_config == a_cfg
    assert b.checkpoint["channel_values"] == {"x": "x-B", "y": "y-A"}
    fork = await saver.aget_tuple(fork_cfg)
    assert fork is not None and fork.parent_config == a_cfg
    assert fork.checkpoint["channel_values"] == {"x": "x-fork", "y": "y-fork"}
    a = await saver.aget_tuple(a_cfg)
    assert a is not None
    assert a.checkpoint["channel_values"] == {"x": "x-A", "y": "y-A"}


# -- disagreements the state machine found, as plain regression tests ------------------------------


def on_both(sync_saver: RedisSaver, ops: Callable[[Any], None]) -> tuple[Any, Any]:
    """Runs the same operations on a fresh reference and on our saver."""
    ref = ReferenceSaver()
    ops(ref)
    ops(sync_saver)
    return ref, sync_saver


def _reput_under_another_run(s: Any) -> None:
    s.put(cfg("t", ""), make_checkpoint("c1"), {"run_id": "r1"}, {})
    s.put(cfg("t", ""), make_checkpoint("c1"), {"run_id": "r2"}, {})


def _reput_without_run(s: Any) -> None:
    s.put(cfg("t", ""), make_checkpoint("c1"), {"run_id": "r1"}, {})
    s.put(cfg("t", ""), make_checkpoint("c1"), {}, {})


def _copy_over_checkpoint_of_run(s: Any) -> None:
    s.put(cfg("t", ""), make_checkpoint("c1"), {"run_id": "r1"}, {})
    s.put(cfg("src", ""), make_checkpoint("c1"), {"run_id": "r2"}, {})
    s.copy_thread("src", "t")


@pytest.mark.parametrize(
    "overwrite",
    [_reput_under_another_run, _reput_without_run, _copy_over_checkpoint_of_run],
    ids=["put-under-another-run", "put-without-run", "copy_thread-over-it"],
)
def test_delete_for_runs_follows_the_last_put(
    sync_saver: RedisSaver, overwrite: Callable[[Any], None]
) -> None:
    """c1 is written by run r1, then overwritten by another run (or none): deleting r1
    must leave c1, whose metadata no longer names r1.

    Found by the state machine: put and copy_thread left c1 in r1's run set.
    """

    def ops(s: Any) -> None:
        overwrite(s)
        s.delete_for_runs(["r1"])

    ref, ours = on_both(sync_saver, ops)
    expected = ref.get_tuple(cfg("t", "", "c1"))
    assert expected is not None and expected.metadata.get("run_id") != "r1"
    assert view(ours.get_tuple(cfg("t", "", "c1"))) == view(expected)


def test_delete_for_runs_keeps_writes_of_other_checkpoints(sync_saver: RedisSaver) -> None:
    """Writes for c2 arrive before c2 itself (put_writes does not need the checkpoint);
    deleting the run of c1, the only checkpoint of the timeline, must keep them.

    Found by the state machine: the emptied timeline was deleted whole.
    """

    def ops(s: Any) -> None:
        s.put_writes(cfg("t", "", "c2"), [("a", 1)], "task-1")
        s.put(cfg("t", ""), make_checkpoint("c1"), {"run_id": "r1"}, {})
        s.delete_for_runs(["r1"])
        s.put(cfg("t", "", "c1"), make_checkpoint("c2"), {"run_id": "r2"}, {})

    ref, ours = on_both(sync_saver, ops)
    expected = ref.get_tuple(cfg("t", "", "c2"))
    assert expected is not None and expected.pending_writes == [("task-1", "a", 1)]
    assert view(ours.get_tuple(cfg("t", "", "c2"))) == view(expected)


def test_list_by_checkpoint_id_sees_every_namespace(sync_saver: RedisSaver) -> None:
    """130 namespaces hold checkpoint c1: listing c1 of the thread yields all 130.

    Found by the paged state machine: the listing stopped after the first page of 128.
    """

    def ops(s: Any) -> None:
        for i in range(130):
            s.put(cfg("t", f"ns{i:03}"), make_checkpoint("c1"), {"step": i}, {})

    ref, ours = on_both(sync_saver, ops)
    config = {"configurable": {"thread_id": "t", "checkpoint_id": "c1"}}
    assert len(list(ref.list(config))) == 130
    assert_same_groups(list(ours.list(config)), list(ref.list(config)))
    only_last = {"step": 129}
    assert_same_groups(
        list(ours.list(config, filter=only_last)), list(ref.list(config, filter=only_last))
    )
