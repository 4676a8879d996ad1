"""A one-line progress bar on stderr for the benchmarks' long phases.

On a terminal the bar redraws in place at most ten times a second; elsewhere (a log,
a pipe) it prints one line when the phase ends, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Bar"]

_WIDTH = 30
_REDRAW_SECONDS = 0.1


class Bar:
    """Counts `total` steps of one phase: `with Bar("fill", n) as bar: ... bar.advance()`."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty()
        self.started = time.perf_counter()
        self.drawn = 0.0

    def __enter__(self) -> Bar:
        if self.live:
            self._draw()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._draw()
        self.stream.write("\n")
        self.stream.flush()

    def advance(self, steps: int = 1) -> None:
        self.done += steps
        if self.live and time.perf_counter() - self.drawn >= _REDRAW_SECONDS:
            self._draw()

    def _draw(self) -> None:
        self.drawn = time.perf_counter()
        elapsed = self.drawn - self.started
        done = min(self.done, self.total)
        filled = _WIDTH * done // self.total
        bar = "#" * filled + "-" * (_WIDTH - filled)
        eta = f", {elapsed * (self.total - done) / done:.0f}s left" if 0 < done < self.total else ""
        line = f"  {self.label:<40} [{bar}] {done:,}/{self.total:,} {elapsed:.1f}s{eta}"
        self.stream.write(("\r" + line + "\x1b[K") if self.live else line)
        self.stream.flush()
