"""Numbers in the user's units: the one place that turns bytes, seconds, rates, counts and
shares into text. Every renderer (``parc.report``) and every rule message uses it, so a
number reads the same wherever parc prints it.

Decimal units throughout (1 GB = 1e9 bytes), as GPU datasheets print them. This module is a
foundation: it imports nothing from parc, so rules (which sit above the renderers in the
pipeline) and the runtime may use it too.

Two families of styles:

* the prose style (``nbytes``, ``rate``, ``seconds``, ``number``, ``flops``, ``percent``):
  three significant digits and the unit that fits, as ``parc explain`` (text and HTML) and
  ``parc draw`` print them;
* the table style (``gb_value``, ``seconds_short``, ``number_short``): compact cells for the
  planner's ranked table, whose header carries the unit;
* the comparison style (``si``, ``si_count``, ``seconds_fixed``, ``percent_fixed``): fixed
  decimals, so that ``parc diff``'s old and new columns line up;

and ``gb`` for rule messages, which always speak in GB so that two numbers in one message
compare at a glance.
"""
from __future__ import annotations

_BYTES = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"))
_COUNT = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
_FLOPS = ((1e18, " EFLOP"), (1e15, " PFLOP"), (1e12, " TFLOP"), (1e9, " GFLOP"))
_RATE = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def _scaled(n: float, steps, spec: str, below: str, sep: str = ""):
    """``n`` divided by the first step it reaches, formatted with ``spec`` and the step's
    suffix; ``below`` formats it unscaled when it reaches none."""
    for div, suffix in steps:
        if abs(n) >= div:
            return f"{format(n / div, spec)}{sep}{suffix}"
    return format(n, below)


# --- the prose style ------------------------------------------------------------------------------

def nbytes(n: float) -> str:
    """``"80 GB"``, ``"1.23 TB"``, ``"512 B"``: three significant digits, whole above 100."""
    n = float(n)
    for div, unit in _BYTES:
        if abs(n) >= div:
            v = n / div
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


def nbytes_binary(n: float) -> str:
    """Bytes in binary units, as a node's own tools print them (nvidia-smi's MiB, df -h, ulimit):
    ``"64 MiB"``, ``"79.6 GiB"``, ``"512 B"``: three significant digits, whole above 100."""
    n = float(n)
    for div, unit in ((2.0 ** 40, "TiB"), (2.0 ** 30, "GiB"), (2.0 ** 20, "MiB"), (2.0 ** 10, "KiB")):
        if abs(n) >= div:
            v = n / div
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


def rate(n: float) -> str:
    """Bytes per second: ``"450 GB/s"``."""
    return nbytes(n) + "/s"


def seconds(t: float) -> str:
    """``"0"``, ``"850 ns"``, ``"12.3 µs"``, ``"4.5 ms"``, ``"1.2 s"``, ``"15 min"``."""
    if t <= 0:
        return "0"
    if t < 1e-6:
        return f"{t * 1e9:.3g} ns"
    if t < 1e-3:
        return f"{t * 1e6:.3g} µs"
    if t < 1:
        return f"{t * 1e3:.3g} ms"
    if t < 600:
        return f"{t:.3g} s"
    return f"{t / 60:.3g} min"


def number(n: float) -> str:
    """A large count: ``"70.6B"``, ``"8.03B"``, ``"512"``."""
    return _scaled(n, _COUNT, ".3g", "g")


def flops(n: float) -> str:
    """Floating-point operations: ``"1.23 PFLOP"``."""
    return _scaled(n, _FLOPS, ".3g", ".3g") if n >= 1e9 else f"{n:.3g} FLOP"


def percent(x: float) -> str:
    """A share as a percentage with three significant digits: ``"43.2%"``, ``"0.29%"``; from
    1000% on, whole percents (``"1,713%"``: a plan far over its memory), never an exponent."""
    if abs(x) >= 10:
        return f"{100 * x:,.0f}%"
    return f"{100 * x:.3g}%"


# --- rule messages --------------------------------------------------------------------------------

def gb(n: float) -> str:
    """Bytes as GB (1e9) with enough digits to read: ``"141 GB"``, ``"80.0 GB"``, ``"0.50 GB"``."""
    v = n / 1e9
    if v >= 100:
        return f"{v:.0f} GB"
    if v >= 10:
        return f"{v:.1f} GB"
    return f"{v:.2f} GB"


# --- the table style ------------------------------------------------------------------------------

def gb_value(x: float) -> str:
    """Bytes as a bare number of GB with one decimal (the column header says GB)."""
    return f"{x / 1e9:.1f}"


def seconds_short(x: float) -> str:
    """``"0"``, ``"120s"``, ``"1.23s"``, ``"45.6ms"``, ``"12us"``."""
    if x == 0:
        return "0"
    if x >= 100:
        return f"{x:.0f}s"
    if x >= 1:
        return f"{x:.2f}s"
    if x >= 1e-3:
        return f"{x * 1e3:.1f}ms"
    return f"{x * 1e6:.0f}us"


def number_short(x: float) -> str:
    """A per-second count with two decimals: ``"1.23M"``, ``"950"``."""
    return _scaled(x, _RATE, ".2f", ".0f")


# --- the comparison style -------------------------------------------------------------------------

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _si_digits(x: float) -> str:
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 100 else f"{x:.0f}"


def si(v: float, unit: str) -> str:
    """Decimal prefixes with fixed decimals: ``"60.1 GB"``, ``"2.27 TB"``, ``"512 B"``."""
    for f, p in _SI:
        if abs(v) >= f:
            return f"{_si_digits(v / f)} {p}{unit}"
    return f"{v:.0f} {unit}"


def si_count(v: float) -> str:
    """A count with fixed decimals, B for billions as model sizes say: ``"2.27B"``, ``"512"``."""
    for f, p in _SI:
        if abs(v) >= f:
            return f"{_si_digits(v / f)}{'B' if p == 'G' else p}"
    return f"{v:.3g}" if not float(v).is_integer() else f"{int(v)}"


def seconds_fixed(v: float) -> str:
    """``"0 s"``, ``"12.3 µs"``, ``"4.5 ms"``, ``"1.23 s"``, ``"1,234 s"``."""
    if v == 0:
        return "0 s"
    if abs(v) < 1e-3:
        return f"{v * 1e6:.1f} µs"
    if abs(v) < 1:
        return f"{v * 1e3:.1f} ms"
    return f"{v:.3g} s" if abs(v) < 100 else f"{v:,.0f} s"


def percent_fixed(x: float) -> str:
    """A share with two decimals: ``"43.21%"``."""
    return f"{x * 100:.2f}%"
