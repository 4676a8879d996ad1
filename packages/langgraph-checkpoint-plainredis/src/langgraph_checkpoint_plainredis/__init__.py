"""LangGraph checkpointers on plain Redis 5.0+: strings, hashes and sorted sets only.

`AsyncRedisSaver` serves `ainvoke`/`astream`/`aget_state*`, `RedisSaver` serves
`invoke`/`stream`/`get_state*`; both share one key layout, so one thread can be
written by one and read by the other.
"""

from ._aio import AsyncRedisSaver
from ._errors import CorruptDataError, LegacyKeyspaceError, PlainRedisError, WrongTypeError
from ._migrate import MigrationReport, migrate_v010
from ._sync import RedisSaver

__version__ = "0.2.0"

__all__ = [
    "AsyncRedisSaver",
    "CorruptDataError",
    "LegacyKeyspaceError",
    "MigrationReport",
    "PlainRedisError",
    "RedisSaver",
    "WrongTypeError",
    "__version__",
    "migrate_v010",
]
