"""P5xx: advice — plans that work but that an expert would not write."""
from __future__ import annotations

from . import WARNING, rule
