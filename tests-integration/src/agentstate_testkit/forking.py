"""Forking a process while another of its threads holds a lock (POSIX only)."""

from __future__ import annotations

import os
import signal
import threading
import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["child_passes_while_held"]


def child_passes_while_held(lock: Any, check: Callable[[], bool], seconds: int = 5) -> int:
    """Forks while another thread holds `lock` and runs `check` in the child.

    Returns the child's wait status: exit 0 when `check()` returned True, 1 when it returned
    False or raised, killed by SIGALRM after `seconds` (a hang on the lock the child
    inherited held)."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads, 3.12+
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports by its exit status only
            signal.alarm(seconds)
            try:
                ok = check()
            except BaseException:
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        holder.join()
    return status
