"""The elementwise operations the cost kernels use, on plain numbers without numpy and on
arrays with it.

Every kernel in :mod:`parc.cost` runs over scalars (``parc check``, ``parc explain``: one plan)
and over numpy arrays (the planner: hundreds of thousands of plans at once). numpy takes longer
to import than the rest of ``parc check`` together, so scalar calls stay in Python's float
arithmetic — the same IEEE doubles numpy computes — and numpy is imported only when an array
comes in. The names and meanings are numpy's; a kernel writes ``from parc.cost import xp as np``.
"""
from __future__ import annotations

import math

inf = math.inf
_NUMBERS = (int, float)   # bool is an int; numpy's float64 is a float


def _numpy():
    import numpy

    return numpy


def _plain(*xs) -> bool:
    return all(isinstance(x, _NUMBERS) for x in xs)


def maximum(a, b):
    return max(a, b) if _plain(a, b) else _numpy().maximum(a, b)


def minimum(a, b):
    return min(a, b) if _plain(a, b) else _numpy().minimum(a, b)


def where(cond, a, b):
    return (a if cond else b) if _plain(cond, a, b) else _numpy().where(cond, a, b)


def ceil(x):
    return float(math.ceil(x)) if _plain(x) else _numpy().ceil(x)


def log2(x):
    return math.log2(x) if _plain(x) else _numpy().log2(x)


def fastest(times):
    """(the least, the index of the least) of alternative timings, elementwise over arrays."""
    if _plain(*times):
        best = min(range(len(times)), key=lambda i: times[i])
        return times[best], best
    np = _numpy()
    stacked = np.stack(np.broadcast_arrays(*times))
    return stacked.min(axis=0), stacked.argmin(axis=0)
