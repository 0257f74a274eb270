"""One progress line on a terminal's stderr, for the long commands (``parc plan``'s search,
``parc run``'s phases and steps). It draws nothing unless the stream is a terminal, and
nothing before ``after`` seconds have passed, so a quick command leaves no trace.

A foundation module: it imports nothing from parc, so the planner's command and the runtime
share it.
"""
from __future__ import annotations

import sys
import time


class Progress:
    """``phase("building")``, ``step(k)`` (also ``progress(k)``: ``step k/total``) and
    ``fraction(0.4, "costing")`` each redraw the line; ``close()`` wipes it."""

    def __init__(self, total: int = 0, label: str = "", stream=None, *, after: float = 0.0,
                 columns: int = 72):
        self.stream = stream or sys.stderr
        self.total, self.label = total, label
        self.after, self.columns = after, columns
        self.on = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.time()
        self.steps_on = bool(total)
        self.drawn = False

    def _elapsed(self) -> float:
        return time.time() - self.t0

    def _write(self, text: str) -> None:
        if not self.on or self._elapsed() < self.after:
            return
        self.stream.write(f"\r{text:<{self.columns}.{self.columns}}")
        self.stream.flush()
        self.drawn = True

    @staticmethod
    def bar(frac: float, width: int) -> str:
        done = int(width * max(0.0, min(1.0, frac)))
        return f"[{'#' * done}{'.' * (width - done)}]"

    def phase(self, what: str) -> None:
        self._write(f"{self.label}: {what}… {self._elapsed():5.1f}s")

    def step(self, done: int) -> None:
        if self.steps_on:
            self._write(f"{self.label} {self.bar(min(done, self.total) / self.total, 24)} "
                        f"step {done}/{self.total} {self._elapsed():5.1f}s")

    __call__ = step

    def fraction(self, frac: float, what: str) -> None:
        self._write(f"{self.bar(frac, 30)} {frac:4.0%} {what:<10}")

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * self.columns + "\r")
            self.stream.flush()
