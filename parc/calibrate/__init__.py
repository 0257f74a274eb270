"""``parc calibrate``: fit a cluster's efficiency factors to measured runs.

:mod:`~parc.calibrate.logs` reads Megatron-LM and torchtitan logs and CSV files into runs,
:mod:`~parc.calibrate.runs` gives each run its plan (the spec with the run's settings),
:mod:`~parc.calibrate.fit` fits the :class:`~parc.model.plan.Profile`, and
:mod:`~parc.calibrate.render` writes the `profile` block, the text report and the JSON.
"""
from __future__ import annotations

from parc.calibrate.fit import FitError, FitReport, RunFit, fit, predict, profile_fields

__all__ = ["fit", "predict", "profile_fields", "FitError", "FitReport", "RunFit"]
