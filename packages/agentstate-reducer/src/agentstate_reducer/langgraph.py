"""`ReducingSaver` and its helpers, from the `agentstate-reducer-langgraph` package.

Install with `pip install "agentstate-reducer[langgraph]"`.
"""

try:
    from agentstate_reducer_langgraph import (  # type: ignore[attr-defined, import-not-found, unused-ignore]
        ReducingSaver,
        apply_reducer,
        memory_namespace,
    )
except ImportError as exc:
    raise ImportError(
        "agentstate_reducer.langgraph needs the agentstate-reducer-langgraph package "
        f'({exc}); install it with: pip install "agentstate-reducer[langgraph]"'
    ) from exc

__all__ = ["ReducingSaver", "apply_reducer", "memory_namespace"]
