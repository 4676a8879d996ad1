"""`ReducingSaver`: wrap any LangGraph checkpointer so every checkpoint holds a bounded
message window, handing pruned turns to long-term memory once each.

Also importable as ``agentstate_reducer.langgraph`` after
``pip install "agentstate-reducer[langgraph]"``.
"""

from ._saver import ReducingSaver, apply_reducer, memory_namespace

__version__ = "0.1.0"

__all__ = ["ReducingSaver", "__version__", "apply_reducer", "memory_namespace"]
