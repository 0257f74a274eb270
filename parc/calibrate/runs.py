"""The plan of each measured run: the spec's plan with the settings the log printed.

A run's settings are written as an overlay spec that ``use``\\ s the spec and sets those keys
(imported blocks come first and the overlay overrides them key by key), then resolved the way
``parc check`` resolves any spec: `auto` axes, derived microbatches and layer splits follow the
run's values. A run that names its world size sets the cluster's node count to match; a run
that names some mesh axes but not dp gets dp from its world size, or ``auto``.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from parc.calibrate.logs import Run
from parc.model.fields import ALIASES, BLOCKS

MESH_AXES = ("pp", "dp", "cp", "tp")


class RunError(Exception):
    """A run whose settings do not make a plan parc can estimate."""


def _value_text(block: str, key: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    f = BLOCKS.get(block, {}).get(key)
    if (f is not None and f.kind == "str") or not re.match(r"^[A-Za-z0-9_.+\-/()]+$", str(v)):
        return json.dumps(str(v))
    return str(v)


def _with_mesh(base, run: Run) -> dict[str, Any]:
    """The run's settings with its world size turned into mesh and cluster keys."""
    settings = {}
    for k, v in run.settings.items():
        block, _, key = k.partition(".")
        settings[f"{block}.{ALIASES.get(key, key)}"] = v
    world = run.world_size
    given = [a for a in MESH_AXES if f"mesh.{a}" in settings]
    if world is None and len(given) == len(MESH_AXES):
        world = 1
        for a in MESH_AXES:
            world *= int(settings[f"mesh.{a}"])
    if given and "mesh.dp" not in settings:
        for a in MESH_AXES:
            if a != "dp" and f"mesh.{a}" not in settings:
                settings[f"mesh.{a}"] = base.mesh.size(a)
        rest = 1
        for a in ("pp", "cp", "tp"):
            rest *= int(settings[f"mesh.{a}"])
        settings["mesh.dp"] = world // rest if world else "auto"
    if world and world != base.cluster.world and "cluster.nodes" not in settings:
        g = base.cluster.gpus_per_node
        if world % g == 0:
            settings["cluster.nodes"] = world // g
        elif world < g:
            settings["cluster.nodes"], settings["cluster.gpus_per_node"] = 1, world
        else:
            raise RunError(f"{run.label}: {world} GPUs are not a whole number of nodes of {g}")
    return settings


def overlay_text(spec_name: str, base, run: Run) -> str:
    """The spec text of ``run``: ``use`` the spec, then the run's settings block by block."""
    by_block: dict[str, list[tuple[str, Any]]] = {}
    for k, v in _with_mesh(base, run).items():
        block, _, key = k.partition(".")
        by_block.setdefault(block, []).append((key, v))
    out = [f"use {json.dumps(spec_name)}"]
    for block, items in by_block.items():
        out.append(f"\n{block} {{")   # unlabelled: it merges into the spec's block of that kind
        out += [f"  {key} = {_value_text(block, key, v)}" for key, v in items]
        out.append("}")
    return "\n".join(out) + "\n"


class TextReader:
    """The working tree, with one spec that is not on disk (read from standard input) served
    under a name of its own, so that each run's settings can `use` it."""

    def __init__(self, path: Path, text: str):
        from parc.resolve.loader import DiskReader

        self.disk = DiskReader()
        self.path, self.text = self.disk.real(path), text

    def real(self, path: Path) -> Path:
        return self.disk.real(path)

    def exists(self, path: Path) -> bool:
        return self.real(path) == self.path or self.disk.exists(path)

    def par_names(self, folder: Path) -> tuple[str, ...]:
        return self.disk.par_names(folder)

    def read(self, path: Path, within: Path | None) -> str:
        return self.text if self.real(path) == self.path else self.disk.read(path, within)


def plan_of_run(spec: str, base, run: Run, root=None, reader=None):
    """The resolved plan of ``run`` on the spec (the spec's own plan when the run sets nothing).
    RunError when the settings do not resolve (naming the run and the first error). ``reader``
    reads the spec and its imports (:class:`TextReader` for a spec read from standard input)."""
    if not run.settings and run.world_size in (None, base.world_size):
        return base
    from parc.language.diagnostics import ERROR
    from parc.resolve import load

    p = Path(spec)
    text = overlay_text(p.name, base, run)
    res = load(p.with_name(f".{p.stem}.calibrate.par"), root=root, text=text, shown=f"{run.label} (settings)",
               reader=reader)
    errors = [d for d in res.diagnostics if d.severity == ERROR]
    if errors or res.plan is None:
        first = errors[0].message if errors else "it does not resolve"
        shown = ", ".join(f"{k} = {v}" for k, v in _with_mesh(base, run).items())
        raise RunError(f"{run.label}: the run's settings ({shown}) do not make a plan of {spec}: {first}")
    mesh, world = res.plan.mesh, res.plan.cluster.world
    if min(mesh.pp, mesh.dp, mesh.cp, mesh.tp) < 1 or mesh.product != world:
        raise RunError(f"{run.label}: the run's mesh (pp {mesh.pp} × dp {mesh.dp} × cp {mesh.cp} × tp {mesh.tp}) "
                       f"does not span the cluster's {world} GPUs")
    if run.world_size and res.plan.world_size != run.world_size:
        raise RunError(f"{run.label}: the log ran on {run.world_size} GPUs but its mesh spans "
                       f"{res.plan.world_size}")
    return res.plan


def measured_step_time(plan, measured: dict) -> float | None:
    """Seconds per step the run measured: its step time, else the time its throughput implies
    for the plan's tokens per step (``mfu`` and ``tflops_per_gpu`` through parc's model FLOPs,
    so they carry the difference between the framework's FLOP count and parc's)."""
    if measured.get("step_time"):
        return measured["step_time"]
    m, world = plan.model, plan.world_size
    tokens = plan.schedule.global_batch * m.seq_len
    if measured.get("tokens_per_second"):
        return tokens / measured["tokens_per_second"]
    if measured.get("tokens_per_second_per_gpu"):
        return tokens / (measured["tokens_per_second_per_gpu"] * world)
    from parc.cost.estimate import model_flops

    flops = model_flops(m, tokens)
    if measured.get("mfu"):
        return flops / (measured["mfu"] * world * plan.cluster.gpu.flops)
    if measured.get("tflops_per_gpu"):
        return flops / (measured["tflops_per_gpu"] * 1e12 * world)
    return None
