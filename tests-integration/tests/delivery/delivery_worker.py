"""A worker of the durable-delivery test: ``python delivery_worker.py URL PREFIX NAME MODE``.

Builds the shared stack (`delivery_support.build`) with delivery MODE, pushes ``ready`` to
``PREFIX:ready:NAME``, then runs the commands the test pushes to ``PREFIX:ctl:NAME``:

- ``{"op": "turn", "seq": n, "thread": t, "text": x, "fork": checkpoint_id | null}``:
  one `graph.invoke` with a human message of id ``t-x`` (from `fork` when given);
- ``{"op": "exit", "seq": n}``: delivers what the background worker holds, then exits.

Each command is acknowledged with its ``seq`` on ``PREFIX:done:NAME``.
"""

from __future__ import annotations

import json
import sys

import redis
from delivery_support import build
from langchain_core.messages import HumanMessage


def main(url: str, prefix: str, name: str, mode: str) -> None:
    stack = build(url, prefix, mode, worker=name)
    # redis-py 8 times sockets out after 5 s by default; BLPOP waits longer on purpose.
    control = redis.Redis.from_url(url, protocol=2, socket_timeout=None)
    control.rpush(f"{prefix}:ready:{name}", "1")
    while True:
        popped = control.blpop([f"{prefix}:ctl:{name}"], timeout=120)
        if popped is None:
            raise SystemExit(f"{name}: no command for 120 s; the test must have died")
        command = json.loads(popped[1])
        if command["op"] == "exit":
            assert stack.saver.delivery is not None
            stack.saver.delivery.close()
            control.rpush(f"{prefix}:done:{name}", command["seq"])
            return
        thread = command["thread"]
        config: dict[str, dict[str, str]] = {"configurable": {"thread_id": thread}}
        if command.get("fork"):
            config["configurable"]["checkpoint_id"] = command["fork"]
        message = HumanMessage(command["text"], id=f"{thread}-{command['text']}")
        stack.graph.invoke({"messages": [message]}, config)
        control.rpush(f"{prefix}:done:{name}", command["seq"])


if __name__ == "__main__":
    main(*sys.argv[1:])
