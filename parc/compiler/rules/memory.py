"""P4xx: does the plan fit in GPU memory."""
from __future__ import annotations

from . import WARNING, rule
from .util import gb
