"""The `Outbox` protocol, its records, and the `Delivery` options of `ReducingSaver`."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "Delivery",
    "DeliveryMode",
    "DrainReport",
    "Outbox",
    "OutboxStats",
    "Settlement",
    "StagedBatch",
    "batch_id",
]

# The longest timing a `Delivery` takes, in seconds (about 31 years): infinity, or a value
# whose milliseconds overflow a float or a Redis score, failed every put that prunes.
MAX_SECONDS = 10**9
MIN_POLL = 0.01  # the shortest poll_interval: a worker polling more often only spins

DeliveryMode = Literal["inline", "background", "manual"]
_MODES = ("inline", "background", "manual")


def now_ms() -> int:
    """The deliverers' clock: milliseconds since the epoch (`time.time()`), the `now` they
    pass to `Outbox.stage` and `Outbox.claim`."""
    return int(time.time() * 1000)


def batch_id(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
    """The id of the batch a checkpoint prunes: the same for every retry of its `put`."""
    text = json.dumps([thread_id, checkpoint_ns, checkpoint_id], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class StagedBatch:
    """The messages one checkpoint pruned, waiting in an outbox until delivered.

    Attributes:
        id: `batch_id` of the checkpoint.
        thread_id: The checkpoint's thread.
        checkpoint_ns: The checkpoint's namespace.
        checkpoint_id: The checkpoint whose store commits the batch.
        payload: ``serde.dumps_typed({"namespace": ..., "messages": [...]})``.
        staged_at: Milliseconds since the epoch of the latest staging, by the outbox's clock
            (which tells one staging from the next: see `Settlement.staged_at`).
        failures: Deliveries in which a hook raised, or rested after raising.
        committed: Whether the checkpoint is known to be stored (its put returned, or a
            drain saw it); None when the outbox cannot tell and the saver must ask the
            inner saver, whose answer "absent" then means "not stored yet".
        age: Milliseconds since its latest staging by the outbox's own clock, when the
            outbox keeps one (a claim from `RedisOutbox` sets it); None: the deliverer
            takes its own clock's `now - staged_at`.
        lease: The token of the delivery that holds it: the claim that returned it, or the
            stager that delivers it itself (given to `Outbox.stage`; '' when no one does).
            The settlements of that delivery carry it (`Settlement.lease`), so one that
            arrives after someone else took the batch over changes nothing.
    """

    id: str
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    payload: tuple[str, bytes]
    staged_at: int = 0
    failures: int = 0
    committed: bool | None = None
    age: int | None = None
    lease: str = ""


@dataclass(frozen=True)
class Settlement:
    """What to do with a claimed batch.

    Attributes:
        batch_id: The batch.
        action: ``ack`` (delivered: remove it), ``retry`` (claim it again `delay` ms from
            now), ``discard`` (its checkpoint was not stored within the grace period: take
            it out of what is due, unless it was staged again after `staged_at` or is
            committed) or ``commit`` (its put returned: remember that its checkpoint was
            stored, whoever holds the batch, so that it is delivered even once the
            checkpoint is pruned or its thread deleted; a batch no longer in the outbox
            stays gone). An outbox should keep a discarded batch a while and make it due
            again on its ``commit``: its put was only slow (`RedisOutbox` keeps it a day).
        delay: ``retry``: milliseconds from when the outbox applies the settlement, by its
            own clock, until the batch may be claimed again: a wait, not a time of day, so
            neither the time the delivery took nor a step of the deliverer's clock moves it.
            ``commit``: the same wait for a batch discarded meanwhile, which it makes due
            again (a lease, when its stager delivers it from memory).
        staged_at: ``discard``: the staging this decision was about.
        failed: ``retry``: a hook raised; count it.
        committed: ``retry``: the checkpoint is stored; remember it.
        error: ``retry``: what the hook raised, kept with the batch.
        lease: ``retry`` and ``discard``: `StagedBatch.lease` of the delivery this decision
            is about. The outbox ignores them once another delivery took the batch over (a
            claim after the lease ran out, or a staging by a retried put): a deliverer that
            overran its lease must not cut short its successor's, nor drop a batch being
            delivered. An ``ack`` and a ``commit`` always apply.
    """

    batch_id: str
    action: Literal["ack", "retry", "discard", "commit"]
    delay: int = 0
    staged_at: int = 0
    failed: bool = False
    committed: bool = False
    error: str = ""
    lease: str = ""


@dataclass(frozen=True)
class OutboxStats:
    """Counters of one outbox, shared by every process using it.

    Attributes:
        backlog: Batches staged and not yet acknowledged (including those being delivered).
        staged: Batches ever staged.
        delivered: Batches acknowledged.
        failures: Deliveries in which a hook raised, or rested after raising.
        discarded: Batches dropped because their checkpoint was never stored.
    """

    backlog: int = 0
    staged: int = 0
    delivered: int = 0
    failures: int = 0
    discarded: int = 0


@dataclass(frozen=True)
class DrainReport:
    """What one `drain` did, in batches.

    Attributes:
        claimed: Batches claimed.
        delivered: Every hook got its messages; acknowledged.
        failed: A hook raised; the batch is retried later.
        waiting: Its checkpoint is not stored yet; checked again later.
        discarded: Its checkpoint was never stored within the grace period; dropped.
    """

    claimed: int = 0
    delivered: int = 0
    failed: int = 0
    waiting: int = 0
    discarded: int = 0


@runtime_checkable
class Outbox(Protocol):
    """Durable storage of pruned batches between the put that staged them and delivery.

    `stage` runs before the inner saver's put, in one round trip, and must be idempotent
    per batch id; it leaves a batch leased to a deliverer past `visible_at` leased, and
    otherwise holds it for the stager under `batch.lease`. A ``commit`` settlement after
    the put marks the batch committed for good, and a claim reports it
    (`StagedBatch.committed`): a committed batch is delivered even once its checkpoint is
    gone, and never discarded. `claim` leases due batches to
    one caller until `lease_until`, each under a token of that claim (`StagedBatch.lease`);
    a batch claimed again after its lease expired is delivered again, and the delivery
    ledger drops what already arrived. `settle` ignores a retry or discard whose token is
    no longer the batch's. Times are milliseconds since the epoch by the
    caller's clock (`now_ms`), `now` included; an outbox on a server may keep them by its
    own clock instead, moved by how far the caller's clock is from it, as `RedisOutbox`
    does, so that deliverers whose clocks disagree still agree on when a lease ends and how
    long a batch has waited. A retry's wait (`Settlement.delay`) starts when it is applied.
    """

    def stage(
        self,
        batch: StagedBatch,
        *,
        now: int,
        visible_at: int,
        settle: Sequence[Settlement] = (),
    ) -> int:
        """Store `batch` (claimable from `visible_at`) and apply `settle`, in one round trip.

        Returns:
            How many batches are due at `now`.
        """
        ...

    def claim(self, *, now: int, lease_until: int, limit: int) -> list[StagedBatch]:
        """Lease up to `limit` batches due at `now`, oldest first, until `lease_until`."""
        ...

    def settle(self, settlements: Sequence[Settlement]) -> None:
        """Apply the outcomes of claimed batches."""
        ...

    def stats(self) -> OutboxStats:
        """The shared counters."""
        ...

    async def astage(
        self,
        batch: StagedBatch,
        *,
        now: int,
        visible_at: int,
        settle: Sequence[Settlement] = (),
    ) -> int:
        """`stage`, for asyncio."""
        ...

    async def aclaim(self, *, now: int, lease_until: int, limit: int) -> list[StagedBatch]:
        """`claim`, for asyncio."""
        ...

    async def asettle(self, settlements: Sequence[Settlement]) -> None:
        """`settle`, for asyncio."""
        ...

    async def astats(self) -> OutboxStats:
        """`stats`, for asyncio."""
        ...


@dataclass(frozen=True)
class Delivery:
    """How `ReducingSaver` delivers staged batches.

    Attributes:
        mode: ``inline``: right after the put, in the caller; ``background``: a worker
            thread (sync `put`) or asyncio task (`aput`) of this process; ``manual``:
            only when `ReducingSaver.drain`/`adrain` is called (serverless handlers,
            cron jobs, a separate worker process).
        lease: Seconds a claimed batch belongs to one deliverer; after that another
            process may deliver it again (the ledger drops what already arrived). At least
            0.001: leases are kept in whole milliseconds.
        grace: Seconds a staged batch may wait for its checkpoint to be stored; after
            that a batch whose checkpoint is absent is discarded (its put failed).
        retry_after: Seconds before a failed batch is retried; doubles with each failure.
        max_retry_after: The longest wait between retries.
        poll_interval: Seconds between polls of the outbox by the background worker, at
            least `MIN_POLL` (0.01); batches this process staged are delivered at once.
        batch_size: Most batches one drain claims.

    Every timing is a finite number of seconds from 0 to `MAX_SECONDS` (10**9, about 31
    years); anything else raises `ValueError` naming it.
    """

    mode: DeliveryMode = "inline"
    lease: float = 30.0
    grace: float = 60.0
    retry_after: float = 1.0
    max_retry_after: float = 300.0
    poll_interval: float = 1.0
    batch_size: int = 100

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(
                f"Delivery(mode={self.mode!r}) must be one of {', '.join(map(repr, _MODES))}"
            )
        for name in ("lease", "grace", "retry_after", "max_retry_after", "poll_interval"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(
                    f"Delivery({name}={value!r}) must be a number of seconds (int or float), "
                    f"got {type(value).__name__}: pass e.g. {name}={getattr(Delivery, name)!r}"
                )
            # NaN passed `value < 0`; infinity failed every put that prunes when converted
            # to whole milliseconds.
            if not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"Delivery({name}={value!r}) must be a finite number of seconds >= 0: "
                    f"pass e.g. {name}={getattr(Delivery, name)!r}"
                )
            if value > MAX_SECONDS:
                raise ValueError(
                    f"Delivery({name}={value!r}) is more than {MAX_SECONDS:,} seconds (about "
                    f"31 years), the longest timing Delivery takes: pass e.g. "
                    f"{name}={getattr(Delivery, name)!r}"
                )
        if self.poll_interval < MIN_POLL:
            # The background worker polls again after it, also when there is nothing to
            # deliver: 0 made it call the server some 20,000 times a second.
            raise ValueError(
                f"Delivery(poll_interval={self.poll_interval!r}) must be at least {MIN_POLL} "
                "seconds: the background worker polls the outbox that often even when there "
                "is nothing to deliver (a batch it staged itself is delivered at once anyway); "
                "pass e.g. poll_interval=1.0"
            )
        if self.lease < 0.001:
            raise ValueError(
                f"Delivery(lease={self.lease!r}) must be at least 0.001 seconds (leases are "
                "kept in whole milliseconds)"
            )
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise ValueError(f"Delivery(batch_size={self.batch_size!r}) must be an int >= 1")

    @classmethod
    def of(cls, value: Delivery | str) -> Delivery:
        """`value` itself, or the options for the mode it names."""
        if isinstance(value, Delivery):
            return value
        if isinstance(value, str):
            return cls(mode=value)  # type: ignore[arg-type]  # checked in __post_init__
        raise TypeError(
            f"delivery={value!r} must be 'inline', 'background', 'manual' or a Delivery(...)"
        )

    def retry_delay_ms(self, failures: int) -> int:
        """Milliseconds to wait after the `failures`-th failure."""
        delay = self.retry_after * (2 ** max(0, min(failures, 32) - 1))
        return int(min(delay, self.max_retry_after) * 1000)


def encode_payload(serde: Any, namespace: Any, messages: list[Any]) -> tuple[str, bytes]:
    """The payload of a batch, with the inner saver's serializer.

    Raises:
        TypeError: The namespace (`memory_namespace`) holds a value the serializer cannot
            encode; raised before the batch is staged, so nothing is stored.
    """
    try:
        typed: tuple[str, bytes] = serde.dumps_typed({"namespace": namespace, "messages": messages})
    except Exception as exc:
        culprit = _unencodable(serde, namespace)
        if culprit is None:
            raise  # the messages: the inner put would fail on them too
        raise TypeError(
            f"memory_namespace {namespace!r} holds a {type(culprit).__module__}."
            f"{type(culprit).__qualname__}, which the saver's serializer cannot store with "
            f"the pruned batch ({exc}): build the namespace from str, int, float, bool, "
            "None, tuple, list or dict values (e.g. str(value))"
        ) from exc
    return typed


_PLAIN = (str, int, float, bool, type(None), bytes)


def _unencodable(serde: Any, value: Any) -> Any:
    """The part of `value` `serde` cannot encode (the innermost one found), or None when
    `value` encodes."""
    try:
        serde.dumps_typed(value)
    except Exception:
        pass
    else:
        return None
    if isinstance(value, dict):
        parts: list[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (tuple, list)):
        parts = list(value)
    else:
        return value
    for part in parts:
        if not isinstance(part, _PLAIN):
            found = _unencodable(serde, part)
            if found is not None:
                return found
    return value


def decode_payload(serde: Any, payload: tuple[str, bytes]) -> tuple[list[Any], Any]:
    """``(messages, namespace)`` of a payload.

    Serializers may return tuples as lists; a list namespace becomes a tuple again, as
    `memory_namespace` makes it.
    """
    value = serde.loads_typed(payload)
    if not isinstance(value, dict) or not isinstance(value.get("messages"), list):
        raise ValueError(f"a staged batch payload decoded to {type(value).__name__}, not a batch")
    namespace = value.get("namespace")
    return value["messages"], _tupled(namespace)


def _tupled(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tupled(v) for v in value)
    return value
