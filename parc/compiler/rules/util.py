"""Small helpers the rules share: divisors, nearest valid values, plain-number formatting."""
from __future__ import annotations


def divisors(n: int) -> list[int]:
    if n <= 0:
        return []
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return small + large[::-1]


def common_divisors(*ns: int) -> list[int]:
    from math import gcd

    g = 0
    for n in ns:
        g = gcd(g, n)
    return divisors(g)


def nearest_multiples(value: int, step: int) -> list[int]:
    """The multiples of ``step`` just below and above ``value`` (positive only)."""
    lo = (value // step) * step
    hi = lo + step
    return [x for x in (lo, hi) if x > 0]


def join(xs, last="or") -> str:
    xs = [str(x) for x in xs]
    if len(xs) <= 1:
        return "".join(xs)
    return ", ".join(xs[:-1]) + f" {last} " + xs[-1]


def gb(n: float) -> str:
    """Bytes as GB (1e9) with enough digits to read."""
    v = n / 1e9
    if v >= 100:
        return f"{v:.0f} GB"
    if v >= 10:
        return f"{v:.1f} GB"
    return f"{v:.2f} GB"
