"""What a delivery did, per hook."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HookReport:
    """What one `on_prune` hook got from one `deliver` call.

    Each field holds message identities (see `message_identity`), in delivery order.

    Attributes:
        hook: The hook's ledger key: its `name` attribute, else its qualified name.
        delivered: Sent, and the hook returned; marked delivered in the ledger.
        queued: Handed to a `Background`, an `AsyncBackground` or an event-loop task; marked
            delivered when that work succeeds, kept for retry when it fails.
        failed: The hook raised, or its backlog dropped the batch; not marked, kept for retry.
        skipped: Not sent: already delivered to this hook in this namespace, in flight, or
            repeated within the batch.
        in_flight: Of `skipped`, those an unfinished delivery in this process held: not yet
            recorded, they may still fail and then wait for a retry in this process only, so
            a durable caller (an outbox) should keep its copy of them.
    """

    hook: str
    delivered: tuple[str, ...] = ()
    queued: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    in_flight: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeliveryReport:
    """What one `deliver` or `adeliver` call did, one `HookReport` per hook, in hook order."""

    hooks: tuple[HookReport, ...] = ()

    @property
    def ok(self) -> bool:
        """True when no hook failed."""
        return not any(report.failed for report in self.hooks)

    def __getitem__(self, hook: str) -> HookReport:
        """Return the report of the hook whose ledger key is `hook`."""
        for report in self.hooks:
            if report.hook == hook:
                return report
        known = ", ".join(repr(r.hook) for r in self.hooks) or "none"
        raise KeyError(f"no hook named {hook!r} in this report; hooks: {known}")
