"""Columns of training candidates as the bulk search builds them.

Hundreds of thousands to millions of candidates fit; most of their columns are settings that
repeat (every candidate of one layout option has the same mesh, pipeline and split). So a
:class:`Columns` keeps, per candidate, the index of its layout option, batch option and train
option, and reads each setting from the option's table when the column is first asked for: the
same arrays, built only where a caller reads them. :class:`Rows` gathers the chunks the search
costs one at a time into columns.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Union

import numpy as np


class Rows:
    """Columns filled chunk by chunk, each allocated once for the ``most`` rows the chunks can
    give, written while a chunk's arrays are still in cache, and cut to the rows written at the
    end (``ndarray.resize``: the untouched tail was never backed by memory). The same arrays as
    concatenating the chunks, without a second copy of each."""

    def __init__(self, most: int):
        self.most, self.n, self.cols, self.empty = most, 0, {}, {}

    def add(self, got: dict) -> None:
        k0 = len(next(iter(got.values()))) if got else 0
        if not k0:                  # no rows: only the names (and kinds) of the columns
            self.empty = self.empty or got
            return
        for k, a in got.items():
            buf = self.cols.get(k)
            if buf is None:
                buf = self.cols[k] = np.empty(self.most, dtype=a.dtype)
            buf[self.n:self.n + k0] = a
        self.n += k0

    def done(self) -> dict:
        if not self.cols:
            return self.empty
        for a in self.cols.values():
            a.resize(self.n, refcheck=False)
        return self.cols


class Columns(Mapping):
    """A read-only mapping of column name to numpy array, one element per candidate. ``stored``
    holds the arrays kept as they are, among them index columns; ``derived`` maps a column to
    (index column, table): its array is ``table[stored[index column]]``, built on first use.
    ``names`` are the columns shown, in order (index columns not among them)."""

    def __init__(self, stored: dict, derived: dict, names: list):
        self._stored, self._derived, self._names = stored, derived, list(names)
        self._built: dict = {}

    def __getitem__(self, k: str) -> np.ndarray:
        a = self._built.get(k)
        if a is None:
            if k in self._derived:
                idx, table = self._derived[k]
                a = table[self._stored[idx]]
            elif k in self._stored and k in self._names:
                a = self._stored[k]
            else:
                raise KeyError(k)
            self._built[k] = a
        return a

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, k) -> bool:
        return k in self._names

    def take(self, rows: np.ndarray) -> "Columns":
        """The candidates ``rows`` (indices), in that order."""
        return Columns({k: a[rows] for k, a in self._stored.items()}, self._derived, self._names)

    def row(self, i: int) -> dict:
        """Candidate ``i``'s value of every column, as Python numbers."""
        out = {}
        for k in self._names:
            if k in self._derived:
                idx, table = self._derived[k]
                out[k] = table[self._stored[idx][i]].item()
            else:
                out[k] = self._stored[k][i].item()
        return out


Cols = Union[Columns, dict]


def take(cols: Cols, rows: np.ndarray) -> Cols:
    """Rows ``rows`` of every column of ``cols`` (a :class:`Columns` or a dict of arrays)."""
    if isinstance(cols, Columns):
        return cols.take(rows)
    return {k: a[rows] for k, a in cols.items()}


def row(cols: Cols, i: int) -> dict:
    """Candidate ``i`` of ``cols``, each value a Python number."""
    if isinstance(cols, Columns):
        return cols.row(i)
    return {k: (a[i].item() if hasattr(a[i], "item") else a[i]) for k, a in cols.items()}
