"""One rank of a run: build the meshes, the stages and the placements, train, verify, report."""
from __future__ import annotations

import os
import resource
import time
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from parc.model import schedules
from parc.model.dims import ParallelDims
from parc.model.plan import Plan
from parc.runtime.options import Options, RunError  # noqa: F401 - re-exported
from parc.runtime import mesh as M
from parc.runtime import parallel as P
from parc.runtime import reference as R
from parc.runtime.model import Config, Transformer, loss_fn, set_parallel
from parc.runtime.pipeline import build_schedule, layout


# How the runtime words each fact of ParallelDims.violations that stops it.
_REFUSES = {
    "heads_tp": lambda v, m: f"heads = {m.heads} and kv_heads = {m.kv_heads} must both be divisible by tp = {v['tp']}",
    "width_tp": lambda v, m: f"{v['name']} = {v['width']} must be divisible by tp = {v['tp']}",
    "ep_without_experts": lambda v, m: f"{', '.join(f'{k} = {x}' for k, x in v.items())} but the model has no experts",
    "experts_ep": lambda v, m: f"experts = {v['experts']} must be divisible by ep = {v['ep']}",
    "expert_grid": lambda v, m: (f"ep · etp = {v['ep']} · {v['etp']} must divide the dp·cp·tp = {v['region']} "
                                 f"ranks of a pipeline stage"),
    "moe_ffn_etp": lambda v, m: f"moe_ffn_hidden = {v['moe_ffn_hidden']} must be divisible by etp = {v['etp']}",
    "seq_cp": lambda v, m: f"seq_len = {v['seq_len']} must be divisible by 2·cp = {2 * v['cp']}",
    "seq_sp": lambda v, m: (f"seq_len / cp = {v['seq_len'] // v['cp']} must be divisible by tp = {v['tp']} "
                            f"for sequence parallel"),
    "batch": lambda v, m: (f"global_batch = {v['global_batch']} must split into dp = {v['dp']} × "
                           f"micro_batch = {v['micro_batch']} × a whole number of microbatches"),
}
_REFUSES["kv_tp"] = _REFUSES["kv_tp_replicated"] = _REFUSES["heads_tp"]


def check_plan(plan: Plan) -> None:
    """What the runtime needs beyond `parc check` (the rules catch these first; a plan built in
    Python can still get here): the invariants of :class:`ParallelDims` that it cannot run
    without (it splits KV heads and does not replicate them), then the schedule."""
    d, s = ParallelDims.from_plan(plan), plan.schedule
    problems = unbuilt_features(plan.model)
    # judged as training whatever the mode: serving splits sequences over cp and feeds
    # microbatches through the stages just the same
    for f in d.violations(plan.model, "train", replicate_kv=False):
        text = _REFUSES.get(f.code, lambda v, m: None)(f.values, plan.model)
        if text and text not in problems:
            problems.append(text)
    n = d.microbatches
    if n is not None and s.microbatches != n:
        problems.append(f"microbatches = {s.microbatches} disagrees with global_batch / (micro_batch · dp) = "
                        f"{d.global_batch} / ({d.micro_batch} · {d.dp}) = {n}")
    if d.pp > 1 and plan.mode == "train" and not schedules.in_torch(s.pipeline):
        problems.append(f"torch.distributed.pipelining has no {s.pipeline} schedule (ScheduleDualPipeV only): "
                        "DualPipe runs with deepseek-ai/DualPipe; use pipeline = dualpipe_v with virtual_stages = 2")
    elif n is not None and d.pp > 1 and plan.mode == "train":
        why = schedules.check(s.pipeline, d.pp, n, s.virtual_stages)
        if why:
            problems.append(why)
    if problems:
        raise RunError("the runtime cannot run this plan: " + "; ".join(problems))


def unbuilt_features(m) -> list[str]:
    """Model features parc costs but the runtime does not build: running without them would train
    another model than the plan describes."""
    out = []
    if m.first_k_dense:
        out.append(f"first_k_dense = {m.first_k_dense} (dense first layers before the MoE ones) is not built "
                   "by the runtime; every layer follows moe_every")
    if m.is_mla:
        out.append("multi-head latent attention (kv_lora_rank) is not built by the runtime")
    if m.mtp_layers:
        out.append(f"mtp_layers = {m.mtp_layers} (multi-token prediction) is not built by the runtime")
    out += [f"{k} is not built by the runtime" for k in ("qk_norm", "attention_sinks", "hybrid") if getattr(m, k)]
    if m.attention_window:
        out.append(f"attention_window = {m.attention_window} (local attention) is not built by the runtime; "
                   "every layer attends to the whole sequence")
    return out


def param_bytes(modules) -> int:
    seen, total = set(), 0
    for mod in modules:
        for p in mod.parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            t = p._local_tensor if isinstance(p, DTensor) else p
            total += t.numel() * t.element_size()
    return total


def peak_memory(device: str) -> int:
    if device == "cuda" and torch.cuda.is_available():
        return int(torch.cuda.max_memory_allocated())
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t


class Rank:
    """Everything one rank holds for one plan."""

    def __init__(self, plan: Plan, opts: Options):
        check_plan(plan)
        self.plan, self.opts = plan, opts
        dev = opts.device
        self.device = torch.device(dev, int(os.environ.get("LOCAL_RANK", 0))) if dev == "cuda" else torch.device("cpu")
        self.meshes = M.build_meshes(plan, dev)
        self.coords = dict(self.meshes.coords)
        self.cfg = Config.from_model(plan.model)
        self.pp_rank = self.coords["pp"]
        self.lay = layout(plan, self.pp_rank)
        self.sp = bool(plan.train and plan.train.sequence_parallel) and plan.mesh.tp > 1
        self.zero = plan.train.zero if plan.train else 0
        self.actions: list = []
        self.modules: dict[int, torch.nn.Module] = {}
        for idx in self.lay.stage_ids:
            mod = Transformer(self.cfg, self.lay.layers[idx], first=idx == 0, last=idx == self.lay.n_stages - 1)
            mod.init_weights(opts.seed)
            self.modules[idx] = mod.to(self.device)
        par = P.parallel_context(self.meshes, self.sp)
        patterns = [p for p in plan.placement.modules if p.style in P.STYLES] or None
        for mod in self.modules.values():
            set_parallel(mod, par)
            P.apply_tp(mod, self.meshes, self.sp, patterns)
            P.apply_ep(mod, self.meshes)
        # tied embeddings with the first and last stage on one rank (V placement): one weight
        self.shared_tie = (self.cfg.tied_embeddings and plan.mesh.pp > 1 and self.lay.first and self.lay.last)
        if self.shared_tie:
            if self.zero == 3:
                raise RunError("tied embeddings under a V schedule (zero_bubble or dualpipe_v) put the "
                               "embedding and the head in two stages of one rank; with zero = 3 the runtime "
                               "cannot shard one weight for both yet: use zero = 1 or 2, or untie them")
            last = self.modules[self.lay.n_stages - 1]
            last.output.weight = self.modules[0].tok_embeddings.weight
        mods = list(self.modules.values())
        pipelined = plan.mesh.pp > 1
        prec = plan.train.precision if plan.train else plan.model.dtype
        half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(prec) if self.device.type == "cuda" else None
        fsdp = P.apply_fsdp(mods, self.meshes, pipelined, half) if self.zero == 3 else (False, False)
        self.sync = P.GradSync(mods, self.meshes, self.zero, *fsdp)
        self.tied = self.cfg.tied_embeddings and plan.mesh.pp > 1 and not self.shared_tie
        self.tie_group = (P.tie_groups(self.meshes, self.lay.owner, 0, self.lay.n_stages - 1)
                          if self.tied else None)
        params = [p for m in mods for p in m.parameters()]
        owned = self.sync.owned(_unique(params))
        self.opt = (R.make_optimizer(opts.optimizer_name(plan), owned, opts.learning_rate(plan))
                    if plan.mode == "train" else None)
        self.schedule = None
        if pipelined:
            self.schedule = build_schedule(plan, self.modules, self.lay, self.meshes.group("pp"),
                                           self.device, loss_fn, self.actions)
        hook = opts.hooks.get("after_build")
        if hook:
            hook(self)

    # -- names ------------------------------------------------------------------------------
    def named_parameters(self):
        seen = set()
        for idx in self.lay.stage_ids:
            for n, p in self.modules[idx].named_parameters():
                if id(p) in seen:
                    continue
                seen.add(id(p))
                yield n, p

    def state_dict_modules(self):
        return [self.modules[i] for i in self.lay.stage_ids]

    # -- one step ---------------------------------------------------------------------------
    def step(self, step: int, index: int = 0) -> tuple[float, float, Optional[dict]]:
        """Train step ``step`` (its data); ``index``: its position in this run (0-based)."""
        plan = self.plan
        x, y = R.global_batch(plan, step, self.opts.seed)
        x = R.local_batch(plan, x, self.coords["dp"], self.coords["cp"]).to(self.device)
        y = R.local_batch(plan, y, self.coords["dp"], self.coords["cp"]).to(self.device)
        self._sync_device()
        t0 = time.perf_counter()
        if self.plan.mode == "serve":
            return self._forward_only(x, y, t0)
        if self.opt is not None:
            self.opt.zero_grad(set_to_none=True)
        for m in self.modules.values():
            m.zero_grad(set_to_none=True)
        with self.autocast():
            if self.schedule is not None:
                losses: list = []
                kw = {}
                if self.lay.last:
                    kw = {"target": y, "losses": losses}
                args = (x,) if self.lay.first else ()
                self.schedule.step(*args, **kw)
                # the losses come divided by the microbatch count
                local = torch.stack([x.detach().float() for x in losses]).sum() if self.lay.last else None
            else:
                mod = self.modules[0]
                n = plan.schedule.microbatches or 1
                local = None
                for i, (xc, yc) in enumerate(zip(x.chunk(n), y.chunk(n))):
                    self.actions.append(schedules.Action("F", i, 0))
                    loss = loss_fn(mod(xc), yc) / n
                    self.actions.append(schedules.Action("B", i, 0))
                    loss.backward()
                    local = loss.detach() if local is None else local + loss.detach()
        self._fault(step)
        # the tied copies' gradients add up before the data-parallel reduction, which under
        # ZeRO-1/2 leaves a gradient only on its owner (both are sums: the order is free)
        self._sync_tied()
        self.sync.reduce()
        grads_diff, t_cmp = None, 0.0
        if self.reference is not None:
            t1 = time.perf_counter()
            grads_diff = self._compare_grads(index)
            t_cmp = time.perf_counter() - t1
        if self.opt is not None:
            self.opt.step()
        self.sync.broadcast()
        loss = self._global_loss(float(local.item()) if local is not None else 0.0)
        self._sync_device()
        seconds = time.perf_counter() - t0 - t_cmp      # the comparison is not part of the step
        return loss, seconds, grads_diff

    def autocast(self):
        """Mixed precision on CUDA for a bf16/fp16 plan (fp32 master weights, matmuls in the
        plan's precision); rehearsals and CPU runs stay fp32 for exact comparisons."""
        import contextlib

        prec = self.plan.train.precision if self.plan.train else self.plan.model.dtype
        if self.device.type != "cuda" or prec not in ("bf16", "fp16"):
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=torch.bfloat16 if prec == "bf16" else torch.float16)

    def _sync_device(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _forward_only(self, x, y, t0):
        """Serving plans: forward passes (no gradients, no optimizer)."""
        with torch.no_grad(), self.autocast():
            if self.schedule is not None:
                out = self.schedule.step(*((x,) if self.lay.first else ()))
                local = loss_fn(out, y).item() if self.lay.last else 0.0
            else:
                n = self.plan.schedule.microbatches or 1
                local = 0.0
                for i, (xc, yc) in enumerate(zip(x.chunk(n), y.chunk(n))):
                    self.actions.append(schedules.Action("F", i, 0))
                    local += loss_fn(self.modules[0](xc), yc).item() / n
        loss = self._global_loss(local)
        return loss, time.perf_counter() - t0, None

    def _fault(self, step: int) -> None:
        f = self.opts.fault
        if not f:
            return
        r, _, s = f.partition(":")
        if int(r) == self.meshes.rank and int(s or 1) == step:
            raise RunError(f"injected fault on rank {self.meshes.rank} at step {step}")

    def _global_loss(self, local: float) -> float:
        holds_loss = self.lay.last and self.coords["tp"] == 0
        v = torch.tensor([local / self.meshes.dp_cp_size if holds_loss else 0.0], dtype=torch.float64,
                         device=self.device)     # NCCL reduces device tensors only
        dist.all_reduce(v)
        return float(v.item())

    def _sync_tied(self) -> None:
        """Tied embeddings under pp > 1: the first stage's embedding and the last stage's head are
        copies of one weight; their gradients add up (on one rank under V placement)."""
        if not self.tied:
            return
        emb = self.modules[0].tok_embeddings.weight if self.lay.first else None
        head = self.modules[self.lay.n_stages - 1].output.weight if self.lay.last else None
        if emb is not None and head is not None:   # both copies on this rank
            total = _local_grad(emb) + _local_grad(head)
            _local_grad(emb).copy_(total)
            _local_grad(head).copy_(total)
            return
        p = emb if emb is not None else head
        if p is not None and self.tie_group is not None:
            dist.all_reduce(_local_grad(p), group=self.tie_group)

    # -- verification -----------------------------------------------------------------------
    reference: Optional[R.Reference] = None

    def _compare_grads(self, index: int) -> dict:
        """Every gradient this rank should hold against the reference's; a gradient present on
        one side only fails (a proof must not pass because nothing was compared)."""
        ref = self.reference.grads[index]
        worst, ok, worst_name, missing, compared = 0.0, True, None, [], 0
        for name, p in self.named_parameters():
            g = p.grad
            full = _full(g) if g is not None else None
            rname = R.reference_name(name, self.cfg.tied_embeddings)
            r = ref.get(rname)
            if full is None or r is None:
                if (full is None) != (r is None) and (full is not None or self.sync.keeps_grad(p)):
                    missing.append(f"{name} ({'this run' if full is None else 'the reference'} has no gradient)")
                    ok = False
                continue
            compared += 1
            r = r.to(full.device)
            d = (full.detach() - r).abs()
            dm = float(d.max()) if d.numel() else 0.0
            if dm >= worst:
                worst, worst_name = dm, name
            ok = ok and bool(torch.allclose(full.detach(), r, atol=R.GRAD_ATOL, rtol=R.GRAD_RTOL))
        return {"max": worst, "ok": ok, "worst": worst_name, "missing": missing, "compared": compared}

    def compare_params(self) -> dict:
        """Every parameter after the last step against the reference's, within
        :func:`reference.param_tolerance` (1e-6 for SGD; for Adam what the gradient tolerance
        allows its normalised step to move)."""
        ref = self.reference.params
        name_of = self.opts.optimizer_name(self.plan)
        lr = self.opts.learning_rate(self.plan)
        worst, worst_name, ok = 0.0, None, True
        for name, p in self.named_parameters():
            full = _full(p.detach())
            rname = R.reference_name(name, self.cfg.tied_embeddings)
            r = ref[rname].to(full.device)
            d = (full - r).abs()
            dm = float(d.max()) if d.numel() else 0.0
            if dm >= worst:
                worst, worst_name = dm, name
            tol = R.param_tolerance(name_of, lr, [g.get(rname) for g in self.reference.grads])
            ok = ok and bool((d <= tol.to(d.device) if torch.is_tensor(tol) else d <= tol).all())
        return {"max": worst, "ok": ok, "worst": worst_name}


def _local_grad(p):
    g = p.grad
    return g._local_tensor if isinstance(g, DTensor) else g


def _unique(params):
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def run_rank(plan: Plan, opts: Options, reference: Optional[R.Reference] = None,
             progress: Optional[Callable[[int], None]] = None) -> Optional[dict]:
    """Run the plan on this rank (torch.distributed already initialised). Returns the report on
    global rank 0, None elsewhere."""
    from parc.runtime import checkpoint as CK
    from parc.cost import estimate as costmodel

    t_build = time.perf_counter()
    rk = Rank(plan, opts)
    rk.reference = reference if opts.verify else None
    resumed = None
    if opts.checkpoint and CK.exists(opts.checkpoint):
        resumed = CK.load(rk, opts.checkpoint)
        hook = opts.hooks.get("after_load")
        if hook:
            hook(rk)
    build_s = time.perf_counter() - t_build
    base = resumed["step"] if resumed else 0      # a resumed run continues the data stream
    steps, grad_worst, grad_ok, grad_where, missing, compared = [], 0.0, True, None, [], 0
    for i in range(opts.steps):
        step = base + i + 1
        loss, secs, gd = rk.step(step, i)
        steps.append({"step": step, "loss": loss, "seconds": secs})
        if gd is not None:
            if gd["max"] >= grad_worst:
                grad_where = gd["worst"]
            grad_worst, grad_ok = max(grad_worst, gd["max"]), grad_ok and gd["ok"]
            missing += [m for m in gd["missing"] if m not in missing]
            compared += gd["compared"]
        hook = opts.hooks.get("after_step")
        if hook:
            hook(rk, step)
        if progress:
            progress(i + 1)
    params = rk.compare_params() if rk.reference is not None and opts.steps else None
    saved = None
    if opts.checkpoint:
        saved = CK.save(rk, opts.checkpoint, base + opts.steps)
    mine = {
        "rank": rk.meshes.rank,
        "coords": {a: int(rk.coords[a]) for a in rk.meshes.order},
        "stages": rk.lay.stage_ids,
        "param_bytes": param_bytes(rk.modules.values()),
        "predicted_param_bytes": _predicted(costmodel, plan, rk.meshes.rank),
        "peak_memory_bytes": peak_memory(opts.device),
        "actions": [str(a) for a in rk.actions[:len(rk.actions) // max(1, opts.steps)]],
        "grad": {"max": grad_worst, "ok": grad_ok, "worst": grad_where, "missing": missing,
                 "compared": compared},
        "param": params,
        "build_seconds": build_s,
    }
    gathered = [None] * dist.get_world_size() if rk.meshes.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if rk.meshes.rank != 0:
        return None
    return _report(plan, opts, steps, gathered, reference, resumed, saved)


def _predicted(costmodel, plan: Plan, rank: int):
    fn = getattr(costmodel, "param_bytes_on_rank", None)
    return int(fn(plan, rank)) if fn else None


def _report(plan: Plan, opts: Options, steps, ranks, reference, resumed, saved) -> dict:
    m = plan.mesh
    from parc.cost import estimate as costmodel

    prec = plan.train.precision if plan.mode == "train" and plan.train else plan.model.dtype
    rep = {
        "world_size": plan.world_size,
        "param_bytes_per_param": 4,
        "predicted_bytes_per_param": int(costmodel.dtype_bytes(prec)),
        "mesh": {"order": list(m.order), "pp": m.pp, "dp": m.dp, "cp": m.cp, "tp": m.tp, "ep": m.ep,
                 "etp": m.etp},
        "rehearsal": opts.rehearsal,
        "model": {"layers": plan.model.layers, "hidden": plan.model.hidden, "heads": plan.model.heads,
                  "kv_heads": plan.model.kv_heads, "ffn_hidden": plan.model.ffn_hidden,
                  "vocab": plan.model.vocab, "seq_len": plan.model.seq_len, "experts": plan.model.experts,
                  "params": plan.model.params},
        "schedule": {"pipeline": plan.schedule.pipeline if m.pp > 1 else None,
                     "microbatches": plan.schedule.microbatches,
                     "virtual_stages": plan.schedule.virtual_stages,
                     "global_batch": plan.schedule.global_batch},
        "optimizer": opts.optimizer_name(plan),
        "steps": steps,
        "ranks": [{k: r[k] for k in ("rank", "coords", "param_bytes", "predicted_param_bytes",
                                     "peak_memory_bytes", "stages")} for r in sorted(ranks, key=lambda r: r["rank"])],
        "actions": {},
    }
    pp_ranks = {}
    for r in ranks:
        pp_ranks.setdefault(r["coords"].get("pp", 0), r["actions"])
    rep["actions"] = {str(k): v for k, v in sorted(pp_ranks.items())}
    ver = {"ran": False, "passed": None, "max_loss_diff": None, "max_grad_diff": None, "max_param_diff": None}
    if opts.verify and reference is not None:
        loss_diff = max((abs(s["loss"] - rl) for s, rl in zip(steps, reference.losses)), default=0.0)
        grad_diff = max(r["grad"]["max"] for r in ranks)
        grad_ok = all(r["grad"]["ok"] for r in ranks)
        pdiffs = [r["param"]["max"] for r in ranks if r["param"]]
        param_diff = max(pdiffs, default=0.0)
        params_ok = bool(pdiffs) and all(r["param"]["ok"] for r in ranks if r["param"])
        missing = [m for r in ranks for m in r["grad"].get("missing", [])]
        # nothing compared proves nothing: a training run must compare some gradient
        compared = sum(r["grad"].get("compared", 0) for r in ranks)
        grads_seen = compared > 0 or plan.mode != "train"
        ver = {"ran": True,
               "passed": bool(loss_diff <= R.LOSS_ATOL and grad_ok and params_ok and grads_seen and not missing
                              and len(steps) > 0),
               "missing_grads": missing[:20], "grads_compared": compared,
               "max_loss_diff": loss_diff, "max_grad_diff": grad_diff, "max_param_diff": param_diff,
               "reference_losses": reference.losses,
               "worst_grad_param": max(ranks, key=lambda r: r["grad"]["max"])["grad"]["worst"],
               "worst_param": max((r for r in ranks if r["param"]), key=lambda r: r["param"]["max"],
                                  default={"param": {}})["param"].get("worst")}
    rep["verify"] = ver
    if resumed is not None:
        rep["resumed"] = resumed
    if saved is not None:
        rep["checkpoint"] = saved
    return rep
