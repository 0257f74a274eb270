"""Deadlines for the tests that time a process: scaled to the machine's load.

A test that waits for a rank to start, a parent to exit or a run to stop asserts that it
happens within some seconds on a machine to itself. Where other processes share the cores the
same work takes longer, and a fixed deadline fails for the load, not for the code.
:func:`scaled` stretches a deadline by the run-queue length per core (the 1-minute load average
over the CPU count, at least 1 and at most :data:`MOST`), read when the deadline is set.
"""
from __future__ import annotations

import os

MOST = 8.0   # a stretch beyond which a slow run is a hang, whatever the load


def load_factor() -> float:
    """How many times over the machine's cores are asked for (1 when idle or unknown)."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):   # a platform without a load average
        return 1.0
    return min(MOST, max(1.0, load / (os.cpu_count() or 1)))


def scaled(seconds: float) -> float:
    """``seconds`` stretched by the machine's load (:func:`load_factor`)."""
    return seconds * load_factor()
