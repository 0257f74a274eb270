"""KServe's own rules: its known defects (parc/targets/kserve/known_defects.py). What its presets
cannot start is P620 (parc/targets/kserve/__init__.py, inexpressible); its name and a training
spec are P646 and P647 (parc/targets/rules.py)."""
from __future__ import annotations

from parc.targets.kserve import known_defects  # noqa: F401  (registers P710)
