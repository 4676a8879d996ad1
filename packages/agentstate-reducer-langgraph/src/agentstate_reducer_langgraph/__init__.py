"""`ReducingSaver`: wrap any LangGraph checkpointer so every checkpoint holds a bounded
message window, handing pruned turns to long-term memory once each.

With an `Outbox` (`RedisOutbox`) and a durable ledger (`RedisDeliveryLedger`), pruned
turns reach each hook once per namespace across processes, restarts, retries and forks,
and are never lost once the checkpoint that dropped them is stored.

Also importable as ``agentstate_reducer.langgraph`` after
``pip install "agentstate-reducer[langgraph]"``; the Redis classes need
``pip install "agentstate-reducer-langgraph[redis]"``.
"""

from ._delivery import DeliveryRunner
from ._outbox import (
    Delivery,
    DeliveryMode,
    DrainReport,
    Outbox,
    OutboxStats,
    Settlement,
    StagedBatch,
)
from ._redis import RedisDeliveryLedger, RedisMemoryWriter, RedisOutbox, RedisSink
from ._saver import ReducingSaver, apply_reducer, memory_namespace

__version__ = "0.1.0"

__all__ = [
    "Delivery",
    "DeliveryMode",
    "DeliveryRunner",
    "DrainReport",
    "Outbox",
    "OutboxStats",
    "RedisDeliveryLedger",
    "RedisMemoryWriter",
    "RedisOutbox",
    "RedisSink",
    "ReducingSaver",
    "Settlement",
    "StagedBatch",
    "__version__",
    "apply_reducer",
    "memory_namespace",
]
