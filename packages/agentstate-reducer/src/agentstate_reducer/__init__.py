"""Keep an agent's message list inside a window; hand what leaves it to long-term memory.

Dependency-free. Messages may be dicts, LangChain messages, or look-alike objects.
"""

from ._background import AsyncBackground, Background
from ._config import (
    DEFAULT_NAMESPACE_KEY,
    ReducerConfig,
    ReducerResult,
    RememberFn,
    Summarizer,
    SummaryMessageFactory,
    TokenCounter,
)
from ._ledger import AsyncDeliveryLedger, DeliveryLedger, InMemoryLedger, namespace_json
from ._messages import message_identity
from ._reducer import MessageReducer
from ._report import DeliveryReport, HookReport
from ._summary import default_summary_messages_factory
from ._tokens import resolve_token_counter

__all__ = [
    "DEFAULT_NAMESPACE_KEY",
    "AsyncBackground",
    "AsyncDeliveryLedger",
    "Background",
    "DeliveryLedger",
    "DeliveryReport",
    "HookReport",
    "InMemoryLedger",
    "MessageReducer",
    "ReducerConfig",
    "ReducerResult",
    "RememberFn",
    "Summarizer",
    "SummaryMessageFactory",
    "TokenCounter",
    "default_summary_messages_factory",
    "message_identity",
    "namespace_json",
    "resolve_token_counter",
]

__version__ = "0.6.0"
