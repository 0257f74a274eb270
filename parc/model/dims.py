"""The parallel degrees of a plan and everything that follows from them.

:class:`ParallelDims` (after torchtitan's object of the same name) holds the degrees — pp, dp,
cp, tp, ep, etp — with the virtual stages and batch sizes, and derives what every part of parc
needs from them: the world, the dp·cp·tp ranks of a pipeline stage that the expert grid is
carved from, the expert data-parallel size, the microbatch count, the stages and the sequence
divisor. :meth:`ParallelDims.violations` returns the invariants a model breaks as coded
:class:`Fact` s; the rules word them, the planner's space filters with them, the runtime
refuses a plan with them and the resolver's ``auto`` fills an axis with :func:`auto_degree`.

The predicates below the class are each invariant written once. They use only ``%``, ``==``,
``|`` and ``&``, so they take Python ints or numpy arrays alike (the planner passes arrays).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import gcd
from typing import Optional

AXES = ("pp", "dp", "cp", "tp", "ep", "etp")


# ---------------------------------------------------------------- the invariants, once each

def splits(width, degree):
    """``degree`` cuts ``width`` into whole parts (heads, widths, experts, vocab over tp/ep/etp)."""
    return width % degree == 0


def kv_split(kv_heads, tp, replicate=True):
    """tp splits the KV heads, or (where the target replicates them) is a multiple of them."""
    return (kv_heads % tp == 0) | (replicate & (tp % kv_heads == 0))


def grid_fits(region, ep, etp):
    """The expert grid ep·etp is carved from the dp·cp·tp ranks of a stage."""
    return region % (ep * etp) == 0


def seq_cp_ok(seq, cp):
    """Load-balanced context parallelism gives each rank one chunk of 2·cp from each end."""
    return (cp <= 1) | (seq % (2 * cp) == 0)


def seq_sp_ok(seq, cp, tp, sp):
    """Sequence parallelism splits each rank's seq / cp tokens over tp."""
    return (sp == 0) | (tp <= 1) | (seq % (cp * tp) == 0)


def batch_divides(global_batch, micro_batch, dp):
    """global_batch / (micro_batch · dp) is a whole microbatch count."""
    return global_batch % (micro_batch * dp) == 0


def stage_ranks(dp, cp, tp):
    """The dp·cp·tp ranks of one pipeline stage (the expert grid is carved from them)."""
    return dp * cp * tp


def expert_dp_of(dp, cp, tp, ep, etp):
    """The experts' data-parallel size: a stage's ranks over the expert grid (at least 1)."""
    q = stage_ranks(dp, cp, tp) // (ep * etp)
    return q + (q == 0)


def auto_degree(world: int, others: int) -> int:
    """The degree an ``auto`` axis takes: world over the product of the others (0 when that is
    not whole; P101 reports it)."""
    return world // others if others > 0 and world % others == 0 else 0


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


def _lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


def tp_widths(model) -> list[tuple[str, int]]:
    """The model widths a tensor-parallel degree must divide, in the user's names."""
    out = [("heads", model.heads)]
    if model.kv_heads != model.heads:
        out.append(("kv_heads", model.kv_heads))
    if model.layers - model.moe_layers:
        out.append(("ffn_hidden", model.ffn_hidden))
    if model.is_moe and model.shared_experts:
        out.append(("shared expert width (shared_experts · moe_ffn_hidden)",
                    model.shared_experts * model.moe_ffn_hidden))
    return out


def tp_fits_model(model, t: int, replicate_kv: bool = True) -> bool:
    """Whether tensor-parallel degree ``t`` splits every width of the model (the KV heads may be
    replicated where ``replicate_kv``)."""
    if not splits(model.heads, t) or not kv_split(model.kv_heads, t, replicate_kv):
        return False
    return all(splits(w, t) for n, w in tp_widths(model) if n not in ("heads", "kv_heads"))


# ---------------------------------------------------------------- facts

@dataclass(frozen=True, slots=True)
class Fact:
    """One violated invariant: ``code`` names it, ``values`` holds the quantities involved
    (in the user's names), ``alternatives`` the values of the offending degree (or size) that
    would satisfy it."""
    code: str
    values: dict = field(default_factory=dict)
    alternatives: tuple = ()


# Codes, in the order violations() reports them.
CODES = ("world", "heads_tp", "kv_tp", "width_tp", "kv_tp_replicated", "vocab_tp", "ep_without_experts",
         "experts_ep", "expert_grid", "moe_ffn_etp", "layers_stages", "seq_cp", "seq_sp", "batch")


@dataclass(frozen=True, slots=True)
class ParallelDims:
    pp: int = 1
    dp: int = 1
    cp: int = 1
    tp: int = 1
    ep: int = 1
    etp: int = 1
    virtual_stages: int = 1
    micro_batch: int = 1
    global_batch: int = 1
    sequence_parallel: bool = False
    redundant_experts: int = 0      # EPLB's extra expert copies (serving): spread over ep with the experts

    @classmethod
    def from_plan(cls, plan, mesh=None) -> "ParallelDims":
        """The dims of ``plan`` (with ``mesh`` in place of its own, when given). Serving runs
        one stage per pipeline rank: its virtual stages are 1."""
        m, s = mesh or plan.mesh, plan.schedule
        sp = bool(plan.train and plan.train.sequence_parallel)
        v = s.virtual_stages if plan.mode == "train" else 1
        extra = plan.serve.redundant_experts if plan.mode == "serve" and plan.serve else 0
        return cls(pp=m.pp, dp=m.dp, cp=m.cp, tp=m.tp, ep=m.ep, etp=m.etp, virtual_stages=v,
                   micro_batch=s.micro_batch, global_batch=s.global_batch, sequence_parallel=sp,
                   redundant_experts=extra)

    # ---------------------------------------------------------------- derived sizes

    @property
    def world(self) -> int:
        return self.pp * self.dp * self.cp * self.tp

    @property
    def region(self) -> int:
        """The dp·cp·tp ranks of one pipeline stage (the expert grid is carved from them)."""
        return stage_ranks(self.dp, self.cp, self.tp)

    @property
    def expert_dp(self) -> int:
        """The data-parallel size of the experts: the stage's ranks over the expert grid."""
        return int(expert_dp_of(self.dp, self.cp, self.tp, self.ep, self.etp))

    @property
    def replicas(self) -> int:
        """Model copies that each see their own samples (dp; cp ranks share a sequence)."""
        return self.dp

    @property
    def per_microbatch(self) -> int:
        """Samples of the global batch in one microbatch step: micro_batch · dp."""
        return self.micro_batch * self.dp

    @property
    def microbatches(self) -> Optional[int]:
        """global_batch / (micro_batch · dp), None when that is not whole."""
        per = self.per_microbatch
        if per <= 0 or self.global_batch % per:
            return None
        return self.global_batch // per

    def global_batch_for(self, microbatches: int) -> int:
        """The global batch that gives ``microbatches`` microbatches with these sizes."""
        return microbatches * self.per_microbatch

    @property
    def stages(self) -> int:
        """Pipeline stages: pp · virtual_stages."""
        return self.pp * self.virtual_stages

    @property
    def seq_divisor(self) -> int:
        """What seq_len must be divisible by: 2·cp for load-balanced context parallelism, and
        cp·tp under sequence parallelism."""
        d = 2 * self.cp if self.cp > 1 else 1
        if self.sequence_parallel and self.tp > 1:
            d = _lcm(d, self.cp * self.tp)
        return d

    def size(self, axis: str) -> int:
        return getattr(self, axis)

    # ---------------------------------------------------------------- alternatives

    def tp_degrees(self, model, replicate_kv: bool = True, world: Optional[int] = None,
                   cap: Optional[int] = None) -> list[tuple[int, Optional[int]]]:
        """Tensor-parallel degrees that split the model, each with the dp it leaves on ``world``
        GPUs (pp and cp kept; None without a world), at most ``cap``."""
        rest = self.pp * self.cp
        out = []
        for t in divisors(model.heads):
            if cap is not None and t > cap or not tp_fits_model(model, t, replicate_kv):
                continue
            if world is None:
                out.append((t, None))
            elif world % (rest * t) == 0:
                out.append((t, world // (rest * t)))
        return out

    def physical_experts(self, model) -> int:
        """The expert slots ep spreads: the model's experts and EPLB's redundant copies (SGLang
        loads experts + ``--ep-num-redundant-experts`` and asserts ep divides them,
        fused_moe_triton/layer.py; vLLM's ``num_redundant_experts`` add to its global experts)."""
        return model.experts + self.redundant_experts

    def ep_degrees(self, model) -> list[int]:
        """Expert-parallel degrees above 1 that divide the expert slots and whose grid (with
        this etp) fits the stage's ranks."""
        return [d for d in divisors(gcd(self.physical_experts(model), self.region))
                if d > 1 and grid_fits(self.region, d, self.etp)]

    def etp_degrees(self, model, most: int = 8) -> list[int]:
        """Expert tensor-parallel degrees (up to ``most``, or this etp) that split the expert MLP
        and whose grid (with this ep) fits the stage's ranks."""
        return [d for d in divisors(model.moe_ffn_hidden)
                if d <= max(most, self.etp) and grid_fits(self.region, self.ep, d)]

    def seq_lens(self, seq: int) -> list[int]:
        """The sequence lengths next to ``seq`` that the sequence divisor accepts."""
        step = self.seq_divisor
        lo = (seq // step) * step
        return [x for x in (lo, lo + step) if x > 0]

    # ---------------------------------------------------------------- the invariants as facts

    def violations(self, model, mode: str = "train", *, world: Optional[int] = None,
                   replicate_kv: bool = True) -> list[Fact]:
        """Every invariant these degrees break for ``model``, in :data:`CODES` order.

        ``world``: the cluster's GPUs, when the mesh must fill them; ``replicate_kv``: whether the
        target replicates KV heads when tp exceeds them (Megatron-LM and vLLM do; the torch
        runtime does not, which adds ``kv_tp_replicated``). A dp of 0 (an ``auto`` with no whole
        value, P101's) has no batch to judge. Every broken tp invariant is listed;
        the rules decide which one reports (one mistake, one error)."""
        out = []
        if world is not None and self.world != world:
            out.append(Fact("world", {"world": world, "mesh": self.world}))
        out += self._tp_facts(model, world, replicate_kv)
        out += self._expert_facts(model)
        if self.stages > 1 and model.layers % self.stages:
            v = self.virtual_stages
            out.append(Fact("layers_stages", {"layers": model.layers, "pp": self.pp, "virtual_stages": v},
                            tuple(d // v for d in divisors(model.layers) if d % v == 0)))
        if mode == "train":
            out += self._seq_facts(model.seq_len)
            if self.per_microbatch > 0 and not batch_divides(self.global_batch, self.micro_batch, self.dp):
                per = self.per_microbatch
                lo = (self.global_batch // per) * per
                out.append(Fact("batch", {"global_batch": self.global_batch, "micro_batch": self.micro_batch,
                                          "dp": self.dp}, tuple(x for x in (lo, lo + per) if x > 0)))
        return out

    def _tp_facts(self, model, world, replicate_kv) -> list[Fact]:
        t = self.tp
        if t <= 1:
            return []
        def alts(replicate=replicate_kv):
            return tuple(d for d, _ in self.tp_degrees(model, replicate, world))

        out = []
        if not splits(model.heads, t):
            out.append(Fact("heads_tp", {"heads": model.heads, "tp": t}, alts()))
        if not kv_split(model.kv_heads, t):
            out.append(Fact("kv_tp", {"kv_heads": model.kv_heads, "tp": t}, alts()))
        out += [Fact("width_tp", {"name": n, "width": w, "tp": t}, alts())
                for n, w in tp_widths(model) if n not in ("heads", "kv_heads") and not splits(w, t)]
        if not replicate_kv and not splits(model.kv_heads, t) and kv_split(model.kv_heads, t):
            out.append(Fact("kv_tp_replicated", {"kv_heads": model.kv_heads, "tp": t}, alts(False)))
        if not splits(model.vocab, t):
            out.append(Fact("vocab_tp", {"vocab": model.vocab, "tp": t},
                            tuple(d for d in divisors(model.vocab) if d > 1)))
        return out

    def _expert_facts(self, model) -> list[Fact]:
        if self.ep <= 1 and self.etp <= 1:
            return []
        if not model.is_moe:
            ax = "ep" if self.ep > 1 else "etp"
            return [Fact("ep_without_experts", {ax: self.size(ax)})]
        out = []
        slots = self.physical_experts(model)
        if not splits(slots, self.ep):
            out.append(Fact("experts_ep", {"experts": model.experts, "redundant": self.redundant_experts,
                                           "ep": self.ep}, tuple(self.ep_degrees(model))))
        elif not grid_fits(self.region, self.ep, self.etp):
            ok = [e for e in divisors(slots) if e > 1 and grid_fits(self.region, e, self.etp)]
            out.append(Fact("expert_grid", {"ep": self.ep, "etp": self.etp, "region": self.region}, tuple(ok)))
        if self.etp > 1 and not splits(model.moe_ffn_hidden, self.etp):
            out.append(Fact("moe_ffn_etp", {"moe_ffn_hidden": model.moe_ffn_hidden, "etp": self.etp},
                            tuple(self.etp_degrees(model))))
        return out

    def _seq_facts(self, seq: int) -> list[Fact]:
        if not seq_cp_ok(seq, self.cp):
            return [Fact("seq_cp", {"seq_len": seq, "cp": self.cp}, tuple(self.seq_lens(seq)))]
        if not seq_sp_ok(seq, self.cp, self.tp, self.sequence_parallel):
            return [Fact("seq_sp", {"seq_len": seq, "cp": self.cp, "tp": self.tp}, tuple(self.seq_lens(seq)))]
        return []
