"""Merged, evaluated blocks → the typed plan: presets expanded then overridden, defaults and
derived fields (kv_heads, ffn_hidden, the global batch, microbatches, the layer split, the size
of an `auto` axis) filled. A part whose values failed is left out (its errors are reported) and
the plan is not built, but the other parts are still checked, so one run reports them all."""
from __future__ import annotations

from typing import Any

from parc.language import syntax as S
from parc.language.diagnostics import ParcError, Related, Span
from parc.model import fields as SC
from parc.model.checkpoints import precisions
from parc.model.dims import AXES, ParallelDims, auto_degree
from parc.model.params import param_count, resolve_split
from parc.model.plan import (Cluster, Link, Mesh, Model, ModulePlacement, Placement, Plan, Pool, Profile,
                             Schedule, Serve, Target, Train)
from parc.resolve import topology as T
from parc.resolve.catalog import target_keys
from parc.resolve.evaluate import Evaluator, Poison, check_range, describe, did_you_mean, rename
from parc.resolve.option_keys import (attention_backend_conflict, force_balance_fault, fsdp_buffer_conflict,
                                      repeated_options)
from parc.resolve.router import dispatcher_fault, router_faults
from parc.resolve.gpu import _group_gpu, build_gpu
from parc.resolve.merge import PARTIAL_BLOCKS, Block
from parc.resolve.parts import _FAILED, _Incomplete, _get, _head

MAX_WORLD = 2**21  # GPUs; the rank map and the planner are sized for this


def build_model(r: Evaluator, top: Span) -> Model:
    if "model" not in r.blocks:
        if not r.doc.import_failed:
            r.err("P018", "the spec has no `model` block", top,
                  help="add `model \"name\" { from = llama3_8b }` (see `parc presets`)")
        raise _Incomplete()
    head = _head(r, "model", top)
    try:
        pre = r.check_preset("models", "model")
    except Poison:
        raise _Incomplete()
    pre = dict(pre or {})
    from_span = r.spans.get("model.from", head)
    vals: dict[str, Any] = {}
    failed = False
    for key in SC.BLOCKS["model"]:
        if key == "from":
            continue
        v = _get(r, "model", key)
        if v is _FAILED:
            failed = True
            continue
        if v is None and key in pre:
            v = pre[key]
            r.spans[f"model.{key}"] = from_span
        vals[key] = v
    if failed:
        raise _Incomplete()
    missing = [k for k in ("layers", "hidden", "heads", "vocab") if vals.get(k) is None]
    if missing:
        r.err("P018", "model needs " + ", ".join(f"`{k}`" for k in missing) +
              (" (or a preset with `from = ...`)" if not pre else ""), head,
              help="set them, or start from a preset: `from = llama3_8b` (`parc presets` lists them)")
        raise _Incomplete()
    h, a = vals["hidden"], vals["heads"]
    mlp = vals.get("mlp") or "swiglu"
    if vals.get("kv_heads") is None:
        vals["kv_heads"] = a
        r.spans["model.kv_heads"] = r.spans.get("model.heads", head)
    if vals.get("ffn_hidden") is None:
        vals["ffn_hidden"] = 4 * h if mlp == "gelu" else 256 * -(-(8 * h // 3) // 256)
        r.spans["model.ffn_hidden"] = r.spans.get("model.hidden", head)
    if vals.get("head_dim") is None and h % a == 0:
        vals["head_dim"] = h // a
        r.spans["model.head_dim"] = r.spans.get("model.hidden", head)
    if vals.get("kv_lora_rank"):
        need = [k for k in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim") if not vals.get(k)]
        if need:
            r.err("P018", "multi-head latent attention (`kv_lora_rank`) needs " + ", ".join(f"`{k}`" for k in need),
                  r.spans.get("model.kv_lora_rank", head),
                  help="DeepSeek-V3 has qk_rope_head_dim = 64, qk_nope_head_dim = 128, v_head_dim = 128")
            raise _Incomplete()
    experts = vals.get("experts") or 0
    if experts:
        if vals.get("top_k") is None:
            vals["top_k"] = min(2, experts)
        if vals.get("moe_ffn_hidden") is None:
            vals["moe_ffn_hidden"] = vals["ffn_hidden"]
    label = r.blocks["model"].label
    m = Model(
        name=label or pre.get("name") or (r.values.get("model.from") or "model"),
        layers=vals["layers"], hidden=h, ffn_hidden=vals["ffn_hidden"], heads=a,
        kv_heads=vals["kv_heads"], head_dim=vals.get("head_dim"), vocab=vals["vocab"], params=0,
        seq_len=vals.get("seq_len") or 4096, **precisions(vals.get("dtype"), vals.get("checkpoint_format")),
        mlp=mlp, norm=vals.get("norm") or "rmsnorm", position=vals.get("position") or "rope",
        local_attention=vals.get("local_attention") or "sliding",
        bias=bool(vals.get("bias")), experts=experts, top_k=vals.get("top_k") or 0,
        moe_ffn_hidden=vals.get("moe_ffn_hidden") or 0, shared_experts=vals.get("shared_experts") or 0,
        moe_every=vals.get("moe_every") or 1, rope_theta=vals.get("rope_theta") or 10000,
        max_positions=vals.get("max_positions"), preset=r.values.get("model.from"),
        rope_scaling=vals.get("rope_scaling") or "none", rope_factor=float(vals.get("rope_factor") or 1.0),
        rope_original_positions=vals.get("rope_original_positions"), router_score=vals.get("router_score") or "softmax",
        **{k: _frac(vals.get(k)) for k in _MODEL_FRACS}, **{k: vals.get(k) or 0 for k in _MODEL_COUNTS},
        **{k: bool(vals.get(k)) for k in _MODEL_SWITCHES})
    if vals.get("seq_len") is None:
        r.spans["model.seq_len"] = head
    m.params = vals["params"] if vals.get("params") is not None else param_count(m)
    if vals.get("params") is None:
        r.spans["model.params"] = from_span
    return m


# Model keys that default to 0 (absent): the first dense layers, MLA widths, MTP modules.
def _frac(v) -> float | None:
    """An optional number of the model block as a float (None where the spec leaves it out)."""
    return None if v is None else float(v)


_MODEL_FRACS = ("rope_mscale", "rope_mscale_all_dim", "norm_eps", "router_scale")   # None where not stated
_MODEL_COUNTS = ("first_k_dense", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                 "v_head_dim", "mtp_layers", "attention_window", "global_every", "router_groups",
                 "router_group_topk")
_MODEL_SWITCHES = ("tied_embeddings", "qkv_bias", "qk_norm", "attention_sinks", "hybrid", "router_expert_bias",
                   "router_pre_softmax")   # switches, default false


def build_cluster(r: Evaluator, top: Span) -> Cluster:
    if "cluster" not in r.blocks:
        if not r.doc.import_failed:
            r.err("P018", "the spec has no `cluster` block", top,
                  help="add `cluster \"name\" { nodes = 1; gpus_per_node = 8; gpu = h100_sxm }`, "
                       "or `use` a shared cluster file")
        raise _Incomplete()
    head = _head(r, "cluster", top)
    nodes = _get(r, "cluster", "nodes", 1)
    gpn = _get(r, "cluster", "gpus_per_node")
    intra = _get(r, "cluster", "intra_node")
    inter = _get(r, "cluster", "inter_node")
    ifname = _get(r, "cluster", "socket_ifname")
    domain = _get(r, "cluster", "nvlink_domain")
    overheads = {k: _get(r, "cluster", k) for k in ("cuda_context", "nccl_buffers", "fragmentation")}
    try:
        groups = T.build_groups(r, lambda name, span: _group_gpu(r, name, span))
    except T.Failed:
        raise _Incomplete()
    slow_gpu, slow_link = T.slowest(groups) if groups else (None, None)
    try:
        gpu = build_gpu(r, top) if not groups or r.blocks["cluster"].children.get("gpu") or \
            r.assign("cluster", "gpu") else slow_gpu
    except _Incomplete:
        gpu = None
    if groups:
        nodes, gpn, intra = _from_groups(r, groups, nodes, gpn, intra, slow_link, head)
    if gpn is None:
        r.err("P018", "the cluster needs `gpus_per_node`", head, help="for example `gpus_per_node = 8`")
        raise _Incomplete()
    if _FAILED in (nodes, gpn, intra, inter, ifname, domain, *overheads.values()) or gpu is None:
        raise _Incomplete()
    if domain is not None and domain % gpn:
        r.err("P017", f"nvlink_domain = {domain} is not a multiple of gpus_per_node = {gpn}: an NVLink domain "
                      "holds whole nodes", r.spans.get("cluster.nvlink_domain", head),
              help=f"a GB200 NVL72 rack is `nvlink_domain = 72` with `gpus_per_node = 4`; "
                   f"try `nvlink_domain = {max(gpn, domain // gpn * gpn)}`")
        raise _Incomplete()
    r.spans.setdefault("cluster.nodes", head)

    def mk(v, which):
        if v is None:
            return None
        kind, bw, _ = v
        if bw is None:
            bw = gpu.nvlink_bandwidth if kind in ("nvlink", "xgmi") else gpu.pcie_bandwidth
            if not bw:
                r.err("P018", f"`{kind}` needs a bandwidth here: {gpu.name} has no {kind} figure",
                      r.spans.get(f"cluster.{which}", head), help=f"write `{kind}(...GB/s)`")
                raise _Incomplete()
        return Link(kind, float(bw))

    intra_l = mk(intra, "intra_node")
    inter_l = mk(inter, "inter_node")
    if intra_l is None and gpn > 1:
        intra_l = Link("nvlink", gpu.nvlink_bandwidth) if gpu.nvlink_bandwidth else \
            Link("pcie", gpu.pcie_bandwidth or 32e9)
        r.spans["cluster.intra_node"] = r.spans.get("cluster.gpu", head)
    label = r.blocks["cluster"].label or "cluster"
    if nodes * gpn > MAX_WORLD:
        r.err("P017", f"a cluster of {nodes * gpn:,} GPUs is larger than parc plans for ({MAX_WORLD:,})",
              r.spans.get("cluster.nodes", head))
        raise _Incomplete()
    try:
        topology = T.build_topology(r, gpn)
    except T.Failed:
        raise _Incomplete()
    return Cluster(label, nodes, gpn, gpu, intra_l, inter_l, ifname, **overheads, nvlink_domain=domain,
                   topology=topology, groups=groups)


def _from_groups(r: Evaluator, groups, nodes, gpn, intra, slow_link, head: Span):
    """The node count, GPUs per node and intra-node link of a cluster of node groups: the sum, the
    groups' common count, the slowest link (parc.resolve.topology); a cluster key that disagrees
    with its groups is an error."""
    total = sum(g.nodes for g in groups)
    if r.assign("cluster", "nodes") is not None and nodes not in (_FAILED, total):
        r.err("P018", f"the cluster says nodes = {nodes} but its groups hold {total}",
              r.spans.get("cluster.nodes", head), help="drop `nodes` (the groups' sum is the count) or correct it")
        raise _Incomplete()
    per = groups[0].gpus_per_node
    if gpn not in (None, _FAILED, per):
        r.err("P018", f"the cluster says gpus_per_node = {gpn} but its groups have {per}",
              r.spans.get("cluster.gpus_per_node", head), help="drop `gpus_per_node` from the cluster")
        raise _Incomplete()
    r.spans.setdefault("cluster.gpus_per_node", r.spans.get(f"cluster.group.{groups[0].name}.gpus_per_node", head))
    if intra is None and slow_link is not None:
        intra = (slow_link.kind, slow_link.bandwidth, None)
    return total, per, intra


def build_mesh(r: Evaluator, cluster: Cluster | None, top: Span, kind: str = "mesh") -> Mesh:
    """The mesh of the `mesh` block, or of a pool (``kind`` `prefill` or `decode`: the pool's keys
    over the `mesh` block's)."""
    blk = r.blocks.get(kind)
    vals = {}
    failed = False
    for ax in _MESH_KEYS:
        v = _get(r, kind, ax)
        if v is _FAILED:
            failed = True
        vals[ax] = v
    given = [k for k in (blk.order if blk else []) if k in SC.MESH_AXES]
    order = _merge_order(given)
    autos = [ax for ax in SC.MESH_AXES if vals[ax] == "auto"]
    if len(autos) > 1:
        for ax in autos[1:]:
            r.err("P023", f"only one mesh axis can be `auto`; `{autos[0]}` already is", r.spans[f"{kind}.{ax}"],
                  help=f"give `{ax}` a number")
        raise _Incomplete()
    mesh_span = _head(r, kind, top)
    for ax in _MESH_KEYS:
        r.spans.setdefault(f"{kind}.{ax}", mesh_span)
    if failed:
        raise _Incomplete()
    m = Mesh(order=order, **{ax: (1 if vals[ax] in (None, "auto") else vals[ax]) for ax in _MESH_KEYS})
    if autos:
        ax = autos[0]
        m.auto = ax
        if cluster is not None:   # 0 when the others do not divide the world: P101 reports it
            d = ParallelDims(**{o: m.size(o) for o in AXES if o != ax})
            setattr(m, ax, auto_degree(cluster.world, d.world))
    return m


_MESH_KEYS = ("pp", "dp", "cp", "tp", "ep", "etp", "dcp")


def build_pools(r: Evaluator, cluster: Cluster | None, top: Span) -> list[Pool]:
    """The `prefill` and `decode` pools of a disaggregated serving plan (none for one mesh). Each
    is evaluated as a block of its own whose keys are the `mesh` block's, overridden by the
    pool's; `auto` in a pool fills what the cluster leaves after the other pool."""
    serve = r.blocks.get("serve")
    children = serve.children if serve else {}
    if not children:
        return []
    base = r.blocks.get("mesh")
    out, failed = [], False
    for name in SC.POOLS:
        child = children.get(name)
        if child is None:
            continue
        assigns = dict(base.assigns) if base else {}
        assigns.update(child.assigns)
        # the rank order: the pool's where it lists two axes or more, else the `mesh` block's
        # (an axis neither lists takes its usual place)
        own = [k for k in child.order if k in SC.MESH_AXES]
        order = own if len(own) > 1 else (base.order if base else [])
        r.blocks[name] = Block(name, None, child.span, None, assigns, order)
        r.spans[name] = _head(r, name, top)
        try:
            inst, seqs = _get(r, name, "instances", 1), _get(r, name, "max_num_seqs")
            m = build_mesh(r, cluster, top, name)
        except _Incomplete:
            failed = True
            continue
        if _FAILED in (inst, seqs):
            failed = True
            continue
        r.spans.setdefault(f"{name}.instances", r.spans[name])
        out.append(Pool(name, m, inst, seqs))
    if failed:
        raise _Incomplete()
    missing = [p for p in SC.POOLS if p not in children]
    if missing:
        have = next(p for p in SC.POOLS if p in children)
        r.err("P024", f"a disaggregated plan needs a `{missing[0]}` pool beside its `{have}` pool",
              r.spans[have], help=f"add `{missing[0]} {{ tp = ... }}` inside `serve`, or remove `{have}` "
                                 "to serve prefill and decode on one mesh")
        raise _Incomplete()
    return out


def _merge_order(given: list[str]) -> list[str]:
    """The spec's axis order, with the axes it leaves out (size 1) in their usual places."""
    out = list(given)
    canon = list(SC.MESH_AXES)
    for i, ax in enumerate(canon):
        if ax in out:
            continue
        # insert before the first listed axis that canonically comes after it
        pos = len(out)
        for j, o in enumerate(out):
            if canon.index(o) > i:
                pos = j
                break
        out.insert(pos, ax)
    return out


def build_placement(r: Evaluator, top: Span) -> Placement:
    p = Placement()
    blk = r.blocks.get("placement")
    if blk is None:
        return p
    failed = False
    for rule in blk.rules:
        if rule.axis not in SC.MESH_AXES + SC.MOE_AXES:
            sug = did_you_mean(rule.axis, SC.MESH_AXES + SC.MOE_AXES)
            r.err("P011", f"unknown axis `{rule.axis}`", rule.axis_span,
                  help=(f"did you mean `{sug}`? " if sug else "") + "axes: pp, dp, cp, tp, ep, etp",
                  fixes=rename(rule.axis_span, sug, rule.axis))
            failed = True
            continue
        if rule.link not in ("intra_node", "inter_node"):
            sug = did_you_mean(rule.link, ("intra_node", "inter_node"))
            r.err("P011", f"unknown link `{rule.link}`", rule.link_span,
                  help=(f"did you mean `{sug}`? " if sug else "") + "place an axis `on intra_node` or `on inter_node`",
                  fixes=rename(rule.link_span, sug, rule.link))
            failed = True
            continue
        p.links[rule.axis] = rule.link
        r.spans[f"placement.{rule.axis}"] = rule.span
    split = _get(r, "placement", "layers")
    if split is _FAILED:
        failed = True
    elif isinstance(split, list):
        p.layers_mode, p.layers = "explicit", split
    elif split is not None:
        p.layers_mode = split
    for a in blk.modules:
        node = a.value
        if isinstance(node, S.Broken):   # did not parse: reported as a syntax error
            failed = True
            continue
        if isinstance(node, S.Ref) and node.parts == ["replicate"]:
            p.modules.append(ModulePlacement(a.key, "replicate", None))
            continue
        if not isinstance(node, S.Call) or node.name not in SC.PLACEMENT_STYLES:
            name = node.name if isinstance(node, S.Call) else None
            sug = did_you_mean(name, SC.PLACEMENT_STYLES) if name else None
            r.err("P016", f"a module placement is one of colwise(tp), rowwise(tp), sequence(tp), experts(ep) or "
                          f"replicate; got {describe(node)}", node.span,
                  help=f"did you mean `{sug}`?" if sug else None, fixes=rename(node.name_span, sug, name) if sug else [])
            failed = True
            continue
        if len(node.args) != 1 or not (isinstance(node.args[0], S.Ref) and len(node.args[0].parts) == 1):
            r.err("P016", f"`{node.name}(...)` takes the axis it splits over, e.g. `{node.name}"
                          f"({SC.PLACEMENT_STYLES[node.name] or 'tp'})`", node.span)
            failed = True
            continue
        axis = node.args[0].parts[0]
        if axis not in SC.MESH_AXES + SC.MOE_AXES:
            r.err("P011", f"unknown axis `{axis}`", node.args[0].span, help="axes: pp, dp, cp, tp, ep, etp")
            failed = True
            continue
        p.modules.append(ModulePlacement(a.key, node.name, axis))
        r.spans[f"placement.module.{a.key}"] = a.span
    if failed:
        raise _Incomplete()
    return p


def _section(r: Evaluator, kind: str, cls, top: Span, partial: bool = False):
    if kind not in r.blocks:
        return None
    obj = cls()
    failed = False
    before = len(r.diags)
    for key in SC.BLOCKS[kind]:
        v = _get(r, kind, key)
        if v is _FAILED:
            failed = True
        elif v is not None:
            setattr(obj, key, v)
        r.spans.setdefault(f"{kind}.{key}", _head(r, kind, top))
    if failed:
        if not partial:
            raise _Incomplete()
        r.doc.partial.setdefault(kind, []).extend(r.diags[before:])
    return obj


def build_targets(r: Evaluator) -> dict[str, Target]:
    out = {}
    failed = False
    for name, blk in r.doc.targets.items():
        keys = target_keys(name)
        settings = {}
        for key, a in blk.assigns.items():
            f = SC.F(keys[key].get("kind", "any"), keys[key].get("min"), keys[key].get("max"),
                     tuple(keys[key].get("choices", ())), hint=keys[key].get("hint", ""))
            try:
                v = r.eval(a.value, f, key, "target")
                v = check_range(v, f, key, a.value.span)
            except ParcError as e:
                r.diags.append(e.diagnostic)
                failed = True
                continue
            except Poison:
                failed = True
                continue
            settings[key] = v
            r.spans[f"target.{name}.{key}"] = a.span
            r.spans[f"target.{name}.{key}.value"] = a.value.span
            for i, item in enumerate(getattr(a.value, "items", None) or ()):
                r.spans[f"target.{name}.{key}.value.{i}"] = item.span
        r.spans[f"target.{name}"] = Span(blk.span.file, blk.span.line, blk.span.column, blk.span.line,
                                         blk.span.column + 6, blk.span.start, blk.span.start + 6)
        repeated_options(r, name, settings)
        out[name] = Target(name, settings)
    if failed:
        raise _Incomplete()
    return out


def resolve_document(loader, main_file: str, partial: bool = False) -> Plan | None:
    """The plan of the blocks ``loader`` merged, with ``main_file`` the spec; None when a part
    failed (every failure is in ``loader.doc.diags``). With ``partial``, errors confined to
    `train` or `serve` leave that block's defaults (see ``load``)."""
    r = Evaluator(loader.doc, {})
    top = Span.point(main_file)
    parts = _build_parts(r, top, partial)
    if parts is None:
        return None
    sched = parts["schedule"] or Schedule()
    mode = "serve" if "serve" in r.blocks else "train"
    train = parts["train"] if mode == "train" else None
    if mode == "train" and train is None:
        train = Train()
    mesh = parts["mesh"]
    _fill_schedule(r, sched, mesh, top)
    plan = Plan(file=main_file, model=parts["model"], cluster=parts["cluster"], mesh=mesh,
                placement=parts["placement"], schedule=sched, mode=mode, train=train, serve=parts["serve"],
                targets=parts["targets"], pools=parts["pools"], spans=r.spans, files=loader.files)
    if parts["profile"] is not None:
        plan.profile = parts["profile"]
        plan.profile.name = r.blocks["profile"].label
    _run_defaults(r, plan)
    for kind in ("model", "cluster", "mesh", "placement", "schedule", "train", "serve", "profile"):
        if kind in r.blocks:
            r.spans[kind] = _head(r, kind, top)
    resolve_split(plan)
    return plan


def _run_defaults(r: Evaluator, plan: Plan) -> None:
    """What a spec leaves out of how its run was done, from what it says: the framework from its
    training target, the FP8 recipe and weight caching from the framework
    (parc/model/data/frameworks.toml), the GEMM efficiency from the GPU's matmul benchmark."""
    from parc.model.frameworks import fill_train_defaults

    if plan.profile.gemm_efficiency is None:
        plan.profile.gemm_efficiency = plan.cluster.gpu.gemm_efficiency
    if plan.train is not None:
        fill_train_defaults(plan.train, plan.targets, r.blocks["train"].assigns if "train" in r.blocks else {})


def _build_parts(r: Evaluator, top: Span, partial: bool) -> dict[str, Any] | None:
    """Every part of the plan, each tried even when an earlier one failed; None if any did."""
    parts: dict[str, Any] = {}
    ok = True

    def attempt(name, build):
        nonlocal ok
        try:
            parts[name] = build()
        except _Incomplete:
            ok = False
            parts[name] = None

    attempt("model", lambda: build_model(r, top))
    attempt("cluster", lambda: build_cluster(r, top))
    attempt("mesh", lambda: build_mesh(r, parts["cluster"], top))
    attempt("pools", lambda: build_pools(r, parts["cluster"], top))
    attempt("placement", lambda: build_placement(r, top))
    for kind, cls in (("schedule", Schedule), ("train", Train), ("serve", Serve), ("profile", Profile)):
        attempt(kind, lambda kind=kind, cls=cls: _section(r, kind, cls, top, partial and kind in PARTIAL_BLOCKS))
    attempt("targets", lambda: build_targets(r))
    attention_backend_conflict(r, parts.get("targets"), parts.get("train"))
    fsdp_buffer_conflict(r, parts.get("targets"), parts.get("train"))
    force_balance_fault(r, parts.get("targets"), parts.get("model"))
    if parts.get("model"):
        router_faults(r, parts["model"], _head(r, "model", top))
    dispatcher_fault(r, parts.get("targets"))
    if "train" in r.blocks and "serve" in r.blocks:
        r.err("P022", "a spec is either training (`train`) or serving (`serve`), not both",
              _head(r, "serve", top), related=[Related(_head(r, "train", top), "training declared here")],
              help="split it into two specs that `use` a shared cluster file")
        ok = False
    return parts if ok else None


def _fill_schedule(r: Evaluator, sched: Schedule, mesh: Mesh, top: Span) -> None:
    """The global batch, the pipeline and the microbatch count a spec leaves out."""
    sb = r.blocks.get("schedule")
    if sb is None or "global_batch" not in sb.assigns:
        per = ParallelDims(dp=max(mesh.dp, 1), micro_batch=sched.micro_batch)
        if sb is None or "microbatches" not in sb.assigns:
            sched.global_batch = per.global_batch_for(max(mesh.pp, 1))
            r.spans["schedule.global_batch"] = _head(r, "schedule", _head(r, "mesh", top))
        else:
            sched.global_batch = per.global_batch_for(sched.microbatches)
            r.spans["schedule.global_batch"] = r.spans["schedule.microbatches"]
    if sb is None or "pipeline" not in sb.assigns:
        if sched.virtual_stages > 1:
            sched.pipeline = "interleaved_1f1b"
    derived = ParallelDims(dp=mesh.dp, micro_batch=sched.micro_batch, global_batch=sched.global_batch).microbatches
    if sb is None or "microbatches" not in sb.assigns:  # else the P2 rules compare the two
        sched.microbatches = derived
        r.spans["schedule.microbatches"] = r.spans.get("schedule.global_batch")
