"""Megatron-LM's ``pretrain_*.py`` argument list (run by ``torchrun``, ``python`` or a script)
read back into a spec: the rules of the options parc/targets/megatron/flags.toml marks with
``read``, the inverse of what parc/targets/megatron/__init__.py writes; the data parallel size is
what Megatron-LM derives (world / (tp · pp · cp), megatron/core/parallel_state.py), the world
from torchrun's ``--nnodes`` and ``--nproc-per-node``."""
from __future__ import annotations

import ast

from parc.importer.argv import Opt, parse
from parc.importer.draft import Name, Placeholder
from parc.importer.engines.common import Reader, number

# --data-parallel-sharding-strategy -> ZeRO stage (Megatron-FSDP's strategies, arguments.py)
SHARDING = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
# attention backends that are parc's flash_attention = true (Megatron-LM's AttnBackend)
FLASH = ("auto", "flash", "fused")


class Megatron(Reader):
    target = "megatron"

    def __init__(self, draft, report):
        super().__init__(draft, report)
        self.split: dict[str, Opt] = {}
        self.late: dict[str, Opt] = {}
        self.mla = False
        self.tp_pp_dp = False

    def read_launch(self, la) -> None:
        opts, positional = parse(self.target, la.args)
        if la.script is not None and la.script.value:
            name = la.script.value.rsplit("/", 1)[-1]
            self.draft.target(self.target, "entrypoint", name, f"{la.where()} {la.script.shown}")
        self.carry_args(positional, "words pretrain_*.py does not take")
        self.read(opts)

    # --- the rules of flags.toml's `read` -------------------------------------------------------
    def read_mapping(self, o: Opt) -> None:
        self.tp_pp_dp = True

    def read_virtual_stages(self, o: Opt) -> None:
        self.direct(o, "schedule.virtual_stages")

    def read_layer_split(self, o: Opt) -> None:
        self.split[o.what] = o

    def read_layout(self, o: Opt) -> None:
        stages = (o.value or "").replace(" ", "").split("|")
        if o.value is None or not all(set(s) <= set("EtL") for s in stages):
            self.carry(o, "a layout of other than transformer layers (E, t, L)")
            return
        self.draft.set("placement", "layers", [s.count("t") for s in stages], self.note(o))

    def read_gqa(self, o: Opt) -> None:
        if o.what == "num_query_groups":
            self.direct(o, "model.kv_heads")

    def read_max_positions(self, o: Opt) -> None:
        self.late["max_positions"] = o

    def read_mla(self, o: Opt) -> None:
        self.mla = True

    def read_qk_norm(self, o: Opt) -> None:
        self.late["qk_norm"] = o

    def read_window(self, o: Opt) -> None:
        left, _, right = (o.value or "").partition(",")
        n = number(left)
        if not isinstance(n, int) or right.strip() not in ("0", ""):
            self.carry(o, "a window parc has no key for (parc's is W-1,0)")
            return
        self.draft.set("model", "attention_window", n + 1, self.note(o))
        self.draft.set("model", "local_attention", Name("sliding"), self.note(o))

    def read_shared_experts(self, o: Opt) -> None:
        self.late["shared_experts"] = o

    def read_moe_layer_freq(self, o: Opt) -> None:
        bits = layer_bits(o.value)
        if bits is None:
            self.carry(o, "not a 0/1 layer pattern parc reads")
            return
        first = next((i for i, b in enumerate(bits) if b), len(bits))
        rest = bits[first:]
        every = next((p for p in range(1, len(rest) + 1) if rest == ([0] * (p - 1) + [1]) * (len(rest) // p)
                      and len(rest) % p == 0), None) if rest else None
        if every is None:
            self.carry(o, "a pattern other than dense layers first, then every n-th layer MoE")
            return
        if first:
            self.draft.set("model", "first_k_dense", first, self.note(o))
        if every > 1:
            self.draft.set("model", "moe_every", every, self.note(o))

    def read_dispatcher(self, o: Opt) -> None:
        if o.value == "alltoall":
            self.wiring(o, "parc writes alltoall where ep > 1")
        else:
            self.direct(o, "target.token_dispatcher")

    def read_optimizer(self, o: Opt) -> None:
        if o.value in ("adam", "adamw", "sgd"):
            self.draft.set("train", "optimizer", Name("sgd" if o.value == "sgd" else "adam"), self.note(o))
        else:
            self.carry(o, f"the optimizer {o.value!r} is neither adam nor sgd")

    def read_zero(self, o: Opt) -> None:
        stage = {"use_distributed_optimizer": 1, "use_megatron_fsdp": 3}.get(o.what or "")
        if stage is None:
            stage = SHARDING.get(o.value or "")
            if stage is None:
                self.carry(o, f"the sharding strategy {o.value!r} is none of Megatron-FSDP's")
                return
        if stage > (self.draft.get("train", "zero", 0) if isinstance(self.draft.get("train", "zero", 0), int) else 0):
            self.draft.set("train", "zero", stage, self.note(o))

    def read_precision(self, o: Opt) -> None:
        if self.draft.get("train", "precision") != Name("fp8"):
            self.draft.set("train", "precision", Name("bf16" if o.what == "bf16" else "fp16"), self.note(o))

    def read_fp8(self, o: Opt) -> None:
        if o.value in ("hybrid", "e4m3"):
            self.draft.set("train", "precision", Name("fp8"), self.note(o))
        else:
            self.carry(o, f"the FP8 format {o.value!r} is neither hybrid nor e4m3")

    def read_recompute_method(self, o: Opt) -> None:
        self.wiring(o, "parc writes --recompute-method uniform --recompute-num-layers 1 with recompute = full")

    def read_transformer_impl(self, o: Opt) -> None:
        if o.value == "transformer_engine":
            self.wiring(o, "parc writes --transformer-impl transformer_engine")
        else:
            self.carry(o, f"parc launches Transformer Engine, not {o.value!r}")

    def read_tokenizer(self, o: Opt) -> None:
        self.late[o.what] = o

    def read_fsdp_double_buffer(self, o: Opt) -> None:
        self.late["fsdp_double_buffer"] = o

    def read_attention_backend(self, o: Opt) -> None:
        if o.value == "unfused":
            self.draft.set("train", "flash_attention", False, self.note(o))
        elif o.value == "auto":
            self.wiring(o, "Megatron-LM's default: Transformer Engine picks a fused kernel (flash_attention)")
        elif o.value in FLASH:
            self.direct(o, "target.attention_backend")
        else:
            self.carry(o, f"the attention backend {o.value!r} is none parc names")

    # --- after every option -------------------------------------------------------------------
    def finish(self) -> None:
        d = self.draft
        self._tokenizer()
        mp = self.late.get("max_positions")
        if mp is not None and mp.value != str(d.get("model", "seq_len")):
            self.direct(mp, "model.max_positions")
        if "qk_norm" in self.late and not self.mla:
            d.set("model", "qk_norm", True, self.note(self.late["qk_norm"]))
        sh = self.late.get("shared_experts")
        if sh is not None:
            size, moe = number(sh.value), d.get("model", "moe_ffn_hidden")
            if isinstance(size, int) and isinstance(moe, int) and moe and size % moe == 0:
                d.set("model", "shared_experts", size // moe, f"{self.note(sh)} / --moe-ffn-hidden-size {moe}")
            else:
                self.carry(sh, "not a whole number of --moe-ffn-hidden-size experts")
        self._split()
        self._absent_switches()
        self._double_buffer()

    def _double_buffer(self) -> None:
        """--fsdp-double-buffer is Megatron-FSDP's: with ZeRO-3 the key, without it nothing that
        Megatron-LM reads (and P028 in a spec), so it is left out and said so."""
        o = self.late.get("fsdp_double_buffer")
        if o is None:
            return
        zero = self.draft.get("train", "zero", 0)
        if isinstance(zero, int) and zero >= 3:
            self.direct(o, "target.fsdp_double_buffer")
        else:
            self.drop(o, "Megatron-LM reads it only with Megatron-FSDP (--use-megatron-fsdp), which the launch "
                         "does not use")

    def _absent_switches(self) -> None:
        """A train switch the launch leaves out is off in Megatron-LM (``store_true``); where parc's
        default for its key is on, the spec says off, as the launch means."""
        import dataclasses

        from parc.model.plan import Train
        from parc.model.targets import flag_table

        defaults = {f.name: f.default for f in dataclasses.fields(Train)}
        for what, e in flag_table(self.target).items():
            key = e.get("key")
            if (e.get("takes") != "switch" or e.get("read") or e.get("values") or not isinstance(key, str)
                    or not key.startswith("train.") or what in self.seen):
                continue
            name = key.partition(".")[2]
            if defaults.get(name) is True and not self.draft.has("train", name):
                self.draft.set("train", name, False, f"no {e['names'][0]['name']}: off in Megatron-LM")

    def _tokenizer(self) -> None:
        kind, model = self.late.get("tokenizer_type"), self.late.get("tokenizer_model")
        if kind is not None and kind.value == "HuggingFaceTokenizer" and model is not None:
            self.direct(model, "target.tokenizer")
            self.wiring(kind, "parc writes it with `tokenizer`")
            return
        for o in (kind, model):
            if o is not None:
                self.carry(o, "a tokenizer other than a Hugging Face one")

    def _split(self) -> None:
        """--decoder-first/last-pipeline-num-layers as the layers of every pipeline stage."""
        if not self.split:
            return
        d = self.draft
        pp, layers, v = d.get("mesh", "pp", 1), d.get("model", "layers"), d.get("schedule", "virtual_stages", 1)
        first, last = (number(self.split[k].value) if k in self.split else None
                       for k in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"))
        if not all(isinstance(x, int) for x in (pp, layers, v)) or v != 1 or pp < 2:
            for o in self.split.values():
                self.carry(o, "an uneven split parc reads only with a known pp and layer count, one stage a rank")
            return
        rest = pp - (first is not None) - (last is not None)
        left = layers - (first or 0) - (last or 0)
        if rest <= 0 or left % rest:
            for o in self.split.values():
                self.carry(o, f"the other stages cannot share {left} layers evenly")
            return
        mid = left // rest
        split = [first if first is not None else mid] + [mid] * (pp - 2) + [last if last is not None else mid]
        d.set("placement", "layers", split, " ".join(self.note(o) for o in self.split.values()))


def layer_bits(text: str | None) -> list[int] | None:
    """The 0/1 list of a ``--moe-layer-freq`` pattern (``[0]*3+[1]*58``, ``([0]+[1])*24``), read
    without evaluating it: only list literals of 0 and 1, ``+`` and ``*`` by a number."""
    if not text or len(text) > 200:
        return None

    def ev(n):
        if isinstance(n, ast.List) and all(isinstance(e, ast.Constant) and e.value in (0, 1) for e in n.elts):
            return [e.value for e in n.elts]
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            a, b = ev(n.left), ev(n.right)
            return a + b if isinstance(a, list) and isinstance(b, list) else None
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
            a, k = ev(n.left), n.right
            if isinstance(a, list) and isinstance(k, ast.Constant) and isinstance(k.value, int) and 0 < k.value <= 4096:
                return a * k.value
        return None
    try:
        return ev(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None


# --- the deployment ------------------------------------------------------------------------------
def _launcher(r: Megatron, la) -> None:
    """torchrun's own options but its sizes: the rendezvous wiring parc's launch writes (said so),
    any other one listed as not carried (the megatron target has no key for torchrun's options)."""
    from parc.model.targets import keys

    if la.launcher != "torchrun":
        return
    for o in parse("torchrun", la.launcher_args)[0]:
        if o.what in ("nnodes", "nproc_per_node", "module"):
            continue
        if o.what == "max_restarts" and "max_restarts" in keys(r.target):
            r.direct(o, "target.max_restarts")
        elif o.entry.get("plumbing") or o.what == "rdzv_endpoint":
            r.wiring(o, "torchrun's rendezvous: parc's launch writes it from the cluster")
        else:
            r.drop(o, f"a torchrun option the {r.target} target has no key for")


def _world(ctx, la, facts: dict):
    """(nodes, GPUs a node) of the launch: torchrun's --nnodes and --nproc-per-node, else the
    cluster facts of the files around it; a placeholder for what neither says."""
    nodes, per = facts.get("nodes", (None, ""))[0], facts.get("gpus_per_node", (None, ""))[0]
    if la.launcher == "torchrun":
        opts, _ = parse("torchrun", la.launcher_args)
        for o in opts:
            if o.what == "nnodes":
                v = o.values[0] if o.values else None
                n = number(v.value) if v is not None and v.value and ":" not in v.value else None
                facts["nodes"] = (n if isinstance(n, int) else Placeholder(v.shown if v else "--nnodes"),
                                  f"{la.where()} --nnodes {v.shown if v else ''}")
                nodes = facts["nodes"][0]
            elif o.what == "nproc_per_node":
                v = o.values[0] if o.values else None
                n = number(v.value) if v is not None else None
                facts["gpus_per_node"] = (n if isinstance(n, int) else Placeholder(v.shown if v else "--nproc-per-node"),
                                          f"{la.where()} --nproc-per-node {v.shown if v else ''}")
                per = facts["gpus_per_node"][0]
    if nodes is None and la.launcher == "torchrun":
        nodes = 1
        facts["nodes"] = (1, f"{la.where()} torchrun without --nnodes: one node")
    return nodes, per


def deploy(ctx, reader: type = Megatron, launcher=None) -> str:
    """The spec of a Megatron-LM launch (the nodes of one torchrun launch are one plan);
    ``reader`` and ``launcher`` read another flavour's arguments and launcher (Megatron-DeepSpeed's,
    parc/importer/engines/megatron_deepspeed.py)."""
    from parc.importer import cluster
    from parc.importer.deploy import alternatives
    from parc.importer.models import settle

    group = ctx.group
    r = reader(ctx.draft, ctx.report)
    alternatives(ctx, r.target, [[la] for la in group])
    la = group[0]
    r.read_launch(la)
    (launcher or _launcher)(r, la)
    facts = ctx.facts()
    cluster.given_facts(ctx.options.cluster, facts)
    nodes, per = _world(ctx, la, facts) if la.launcher != "deepspeed" else r.world(la, facts)
    d = ctx.draft
    sizes = [d.get("mesh", k, 1) for k in ("tp", "pp", "cp")]
    if isinstance(nodes, int) and isinstance(per, int) and all(isinstance(s, int) for s in sizes):
        model_par = sizes[0] * sizes[1] * sizes[2]
        if (nodes * per) % model_par == 0:
            d.set("mesh", "dp", nodes * per // model_par, f"{nodes * per} GPUs / (tp · pp · cp = {model_par})")
    elif not d.has("mesh", "dp"):
        d.set("mesh", "dp", Placeholder("the world size / (tp · pp · cp)"), "the launch's world size is not known")
    r.finish()
    settle(d, None)
    _order_mesh(d, r.tp_pp_dp)
    d.blocks.setdefault("train", {})
    cluster.write(d, facts, ctx.options.cluster, ctx.report, "imported")
    return r.target


def _order_mesh(draft, tp_pp_dp: bool) -> None:
    """The mesh outermost first in Megatron-LM's rank order: pp, dp, cp, tp (tp-cp-ep-dp-pp,
    innermost first), or dp, pp, cp, tp with --use-tp-pp-dp-mapping."""
    mesh = draft.blocks.get("mesh", {})
    order = (["dp", "pp"] if tp_pp_dp else ["pp", "dp"]) + ["cp", "tp", "ep", "etp"]
    draft.blocks["mesh"] = {k: mesh[k] for k in sorted(mesh, key=lambda k: order.index(k) if k in order else 9)}
