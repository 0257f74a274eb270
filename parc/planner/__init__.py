"""The planner: search every valid plan for a model on a cluster and rank them by the cost model.

    >>> from parc.planner import search
    >>> res = search("llama3_70b", "examples/clusters/dgx-h100-8node.par", "train", global_batch=512)
    >>> res.best.mesh, res.best.step_time          # doctest: +SKIP
    >>> rows = res.records()                        # every candidate that fits, ranked

``parc plan`` is the command line over :func:`search`.
"""
from __future__ import annotations

from parc.planner.inputs import InputError, Problem, load_spec, problem
from parc.planner.plans import Candidate, build_plan
from parc.planner.search import SearchResult, breakdown, search, search_problem

__all__ = ["search", "search_problem", "SearchResult", "Candidate", "Problem", "problem", "load_spec",
           "build_plan", "breakdown", "InputError"]
