"""P1xx: the mesh against the cluster and the model's shapes."""
from __future__ import annotations

from . import rule
from .util import common_divisors, divisors, join


@rule("P101", "mesh-product-matches-world")
def mesh_product(plan, c):
    m, cl = plan.mesh, plan.cluster
    world = cl.world
    axes = [ax for ax in m.order]
    if m.auto:
        if m.size(m.auto) == 0:
            others = 1
            for ax in axes:
                if ax != m.auto:
                    others *= m.size(ax)
            fits = [d for d in divisors(world)]
            shown = " · ".join(f"{ax}={m.size(ax)}" for ax in axes if ax != m.auto and m.size(ax) > 1) or "1"
            c.report(c.at(f"mesh.{m.auto}"),
                     f"`{m.auto} = auto` has no whole value: the cluster's {world} GPUs are not divisible by "
                     f"{shown} = {others}",
                     help=f"make the other axes multiply to a divisor of {world} ({join(fits[:12])})")
        return
    if m.product == world:
        return
    shown = " · ".join(f"{ax}={m.size(ax)}" for ax in axes if m.size(ax) > 1) or "all axes 1"
    need = m.product
    span = c.at(*(f"mesh.{ax}" for ax in axes if m.size(ax) > 1)) if need > 1 else c.at("mesh")
    if need > world:
        msg = (f"the mesh needs {need} GPUs ({shown}) but cluster \"{cl.name}\" has {world} "
               f"({cl.nodes} node{'s' if cl.nodes != 1 else ''} × {cl.gpus_per_node})")
    else:
        msg = (f"the mesh uses {need} of the cluster's {world} GPUs ({shown}); "
               f"{world - need} would sit idle")
    helps = []
    if world % (need // m.dp if m.dp else need) == 0:
        rest = need // m.dp
        helps.append(f"set `dp = {world // rest}` (or `dp = auto`)")
    if need > world and need % world == 0:
        helps.append(f"use {need // cl.gpus_per_node} nodes" if need % cl.gpus_per_node == 0 else "")
    helps = [h for h in helps if h]
    c.report(span, msg, help=("; or ".join(helps)) if helps else
             f"the product of pp, dp, cp and tp must be {world}")


@rule("P102", "heads-divisible-by-tp")
def heads_tp(plan, c):
    m, md = plan.mesh, plan.model
    if m.tp > 1 and md.heads % m.tp:
        ok = [d for d in divisors(md.heads) if d <= max(m.tp * 2, 8) and plan.cluster.world % d == 0]
        c.report(c.at("mesh.tp"),
                 f"tp = {m.tp} does not divide the model's {md.heads} attention heads "
                 f"({md.heads} / {m.tp} = {md.heads / m.tp:.2f} heads per GPU)",
                 help=f"tensor-parallel degrees that divide {md.heads} heads: {join(ok)}",
                 related=[(c.at("model.heads"), f"heads = {md.heads}")])


@rule("P104", "layers-divisible-by-stages")
def layers_stages(plan, c):
    m, md, s, pl = plan.mesh, plan.model, plan.schedule, plan.placement
    stages = m.pp * s.virtual_stages
    if pl.layers_mode != "even" or stages <= 1 or md.layers % stages == 0:
        return
    from ..costmodel import balanced_split

    v = s.virtual_stages
    what = f"pp = {m.pp}" + (f" × virtual_stages = {v} = {stages} stages" if v > 1 else " stages")
    ok = [d for d in divisors(md.layers) if d % v == 0 and d // v > 1 and d <= 4 * stages][:8]
    split = balanced_split(md, stages)
    helps = []
    if ok:
        helps.append(f"pipeline sizes that divide {md.layers} layers: {join(sorted({d // v for d in ok}))}")
    if split:
        helps.append(f"or keep {stages} stages with an uneven split: `layers = {split}` "
                     f"(or `layers = balanced`)")
    c.report(c.at("placement.layers", "mesh.pp"),
             f"{md.layers} layers cannot be split evenly over {what} ({md.layers / stages:.2f} per stage)",
             help="; ".join(helps) or None)


@rule("P109", "experts-divisible-by-ep")
def experts_ep(plan, c):
    m, md = plan.mesh, plan.model
    if m.ep <= 1:
        return
    if not md.is_moe:
        c.report(c.at("mesh.ep"), f"ep = {m.ep} but the model has no experts",
                 help="remove `ep`, or set `experts` in the model")
        return
    if md.experts % m.ep:
        ok = [d for d in common_divisors(md.experts, m.dp * m.cp * m.tp)]
        c.report(c.at("mesh.ep"),
                 f"ep = {m.ep} does not divide the model's {md.experts} experts "
                 f"({md.experts / m.ep:.2f} experts per GPU)",
                 help=f"expert-parallel degrees that divide {md.experts} experts and fit in "
                      f"dp·cp·tp = {m.dp * m.cp * m.tp}: {join(ok)}",
                 related=[(c.at("model.experts"), f"experts = {md.experts}")])
