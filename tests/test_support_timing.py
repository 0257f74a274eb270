"""The runtime tests' deadlines stretch with the machine's load (tests/support/timing.py)."""
from __future__ import annotations

import os

from support import timing


def test_a_deadline_stretches_with_the_load_per_core(monkeypatch):
    cores = os.cpu_count() or 1
    monkeypatch.setattr(os, "getloadavg", lambda: (0.5 * cores, 0.0, 0.0))
    assert timing.scaled(30) == 30   # an idle machine: as written
    monkeypatch.setattr(os, "getloadavg", lambda: (4.0 * cores, 0.0, 0.0))
    assert timing.scaled(30) == 120  # four runnable processes per core: four times as long
    monkeypatch.setattr(os, "getloadavg", lambda: (100.0 * cores, 0.0, 0.0))
    assert timing.scaled(30) == 30 * timing.MOST   # bounded: past that a slow run is a hang

    def no_load():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", no_load)
    assert timing.scaled(30) == 30
