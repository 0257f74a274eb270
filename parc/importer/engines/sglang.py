"""``python -m sglang.launch_server`` (``sglang serve``) read back into a spec: the rules of the
options parc/targets/sglang/flags.toml marks with ``read``, the inverse of the layout
parc/targets/sglang/__init__.py writes (``layout``: tp_size is dp · tp under DP attention, the
all-to-all backends set ep to tp_size)."""
from __future__ import annotations

from parc.importer.argv import Opt, parse
from parc.importer.draft import Name, Placeholder
from parc.importer.engines.common import ServingReader, number

SPECULATIVE = {"NEXTN": "mtp", "EAGLE": "eagle", "EAGLE3": "eagle3"}


class SGLang(ServingReader):
    target = "sglang"

    def __init__(self, draft, report):
        super().__init__(draft, report)
        self.sizes: dict[str, object] = {}
        self.notes: dict[str, str] = {}
        self.attn_dp = False
        self.side: str | None = None
        self.wire: dict[str, Opt] = {}

    def read_launch(self, la) -> None:
        opts, positional = parse(self.target, la.args)
        self.carry_args(positional, "words launch_server does not take")
        self.read(opts)

    def _size(self, o: Opt, name: str) -> None:
        v = number(o.value) if o.value is not None else None
        self.sizes[name] = v if isinstance(v, int) else (Placeholder(o.values[0].shown) if o.values else None)
        self.notes[name] = self.note(o)

    # the sizes: kept until every option is read (finish)
    def read_tp(self, o: Opt) -> None:
        self._size(o, "tp")

    def read_dp(self, o: Opt) -> None:
        self._size(o, "dp")

    def read_attn_dp(self, o: Opt) -> None:
        if o.what == "enable_dp_attention":
            self.attn_dp = True
            self.notes["attn"] = self.note(o)
        else:
            self._size(o, "attn_dp")

    def read_disaggregation(self, o: Opt) -> None:
        if o.value in ("prefill", "decode"):
            self.side = o.value
        elif o.value != "null":
            self.carry(o, f"the disaggregation mode {o.value!r} is neither prefill nor decode")

    def read_transfer_backend(self, o: Opt) -> None:
        from parc.model.fields import BLOCKS

        if o.value in BLOCKS["serve"]["kv_transfer"].choices:
            self.draft.set("serve", "kv_transfer", Name(o.value), self.note(o))
        else:
            self.direct(o, "target.transfer_backend")

    def read_dist_port(self, o: Opt) -> None:
        v = o.values[0] if o.values else None
        port = v.text[-1] if v is not None and v.text and isinstance(v.text[-1], str) else ""
        tail = port.rsplit(":", 1)[-1] if ":" in port else ""
        if tail.isdigit() and int(tail) != 5000:
            self.draft.target(self.target, "dist_port", int(tail), self.note(o))
        self.wiring(o, "node 0's address: parc writes $MASTER_ADDR")

    def read_nnodes(self, o: Opt) -> None:
        self.wire["nnodes"] = o
        self.wiring(o)

    def read_base_gpu(self, o: Opt) -> None:
        self.wire["base_gpu"] = o
        self.wiring(o)

    def read_eagle_topk(self, o: Opt) -> None:
        if o.value != "1":
            self.carry(o, "parc's speculative drafts are a chain (top-k 1)")
        else:
            self.wiring(o)

    def read_draft_tokens(self, o: Opt) -> None:
        self.wire["draft_tokens"] = o

    def direct(self, o: Opt, path: str | None = None) -> bool:
        if o.what == "speculative_algorithm" and o.value not in SPECULATIVE:
            self.carry(o, f"the speculative algorithm {o.value!r} is none of parc's")
            return False
        if o.what == "kv_cache_dtype" and o.value in ("fp8_e4m3", "fp8_e5m2", "bf16", "auto"):
            self.draft.set("serve", "kv_cache_dtype", Name(o.value), self.note(o))
            return True
        if o.what == "speculative_algorithm":
            self.draft.set("serve", "speculative", Name(SPECULATIVE[o.value]), self.note(o))
            return True
        return super().direct(o, path)

    # --- after every option -------------------------------------------------------------------
    def finish(self, moe: bool | None) -> None:
        """The mesh of the server's sizes (the inverse of parc/targets/sglang layout())."""
        d, s = self.draft, self.sizes
        tp, dp, adp = s.get("tp", 1), s.get("dp", 1), s.get("attn_dp")
        if self.attn_dp and adp is None:         # --dp-size N --enable-dp-attention (before 0.5.22)
            adp, dp = dp, 1
        backend = d.targets.get(self.target, {}).get("moe_a2a_backend")
        if isinstance(adp, int) and adp > 1:
            d.set("mesh", "dp", adp, self.notes.get("attn_dp") or self.notes.get("dp", ""))
            if isinstance(tp, int) and tp % adp == 0:
                d.set("mesh", "tp", tp // adp, f"{self.notes.get('tp', '')} / attention dp {adp}")
            else:
                d.set("mesh", "tp", tp, self.notes.get("tp", ""))
            d.set("serve", "dp_attention", True, self.notes.get("attn") or self.notes.get("attn_dp", ""))
        else:
            if dp != 1:
                d.set("mesh", "dp", dp, self.notes.get("dp", ""))
            d.set("mesh", "tp", tp, self.notes.get("tp", "SGLang's default --tp-size 1"))
        if moe and backend is not None and not d.has("mesh", "ep") and isinstance(tp, int):
            d.set("mesh", "ep", tp, f"{backend.note}: the experts over the server's {tp} GPUs")
        if moe is False and d.has("mesh", "ep"):
            d.drop("mesh", "ep")
        sv = d.blocks.get("serve", {})
        if "speculative_tokens" in sv and "draft_tokens" in self.wire:
            n, k = number(self.wire["draft_tokens"].value), sv["speculative_tokens"].value
            if isinstance(n, int) and isinstance(k, int) and n != k + 1:
                self.carry(self.wire["draft_tokens"], f"parc writes num_steps + 1 = {k + 1} draft tokens")


# --- the deployment ------------------------------------------------------------------------------
def deploy(ctx) -> str:
    """The spec of SGLang servers: one server over its nodes (--nnodes, a launch per node), or
    the prefill and decode servers of a disaggregated plan, each pool's servers its instances."""
    from parc.importer import cluster
    from parc.importer.deploy import alternatives, is_moe, merge_pools, model_block
    from parc.importer.draft import Draft

    group = ctx.group
    opts, _ = parse("sglang", group[0].args)
    model_id = next((o.value for o in opts if o.what == "model_path"), None)
    preset = model_block(ctx, model_id, f"{group[0].where()} --model-path {model_id}")
    moe = is_moe(ctx, preset)
    sides: dict[str, list] = {}
    for la in group:
        sides.setdefault(_side(la) or "", []).append(la)
    facts = ctx.facts()
    if set(sides) == {"prefill", "decode"}:
        drafts, counts, gpus = {}, {}, 0
        for name in ("prefill", "decode"):
            servers = _servers(sides[name])
            alternatives(ctx, "sglang", servers)
            sub = Draft()
            r = SGLang(sub, ctx.report)
            r.read_launch(servers[0][0])
            r.finish(moe)
            drafts[name], counts[name] = sub, sum(s[0].instances for s in servers)
            gpus += counts[name] * _world(sub)
            _nodes_fact(r, servers, facts, name)
        merge_pools(ctx, drafts, counts)
        if not ctx.draft.has("serve", "kv_transfer") and "transfer_backend" not in ctx.draft.targets.get("sglang", {}):
            ctx.draft.set("serve", "kv_transfer", Name("mooncake"), "SGLang's default transfer backend")
        if "nodes" not in facts:
            facts["nodes"] = (1, "the pools' servers on one host")
            facts.setdefault("gpus_per_node", (gpus, "every server's GPUs"))
    else:
        servers = _servers(group)
        alternatives(ctx, "sglang", servers)
        r = SGLang(ctx.draft, ctx.report)
        r.read_launch(servers[0][0])
        r.finish(moe)
        _nodes_fact(r, servers, facts, None)
    ctx.draft.blocks.setdefault("serve", {})
    _order_mesh(ctx.draft)
    cluster.write(ctx.draft, facts, ctx.options.cluster, ctx.report, _name(facts))
    return "sglang"


def _side(la) -> str | None:
    opts, _ = parse("sglang", la.args)
    return next((o.value for o in opts if o.what == "disaggregation_mode" and o.value in ("prefill", "decode")), None)


def _servers(launches: list) -> list[list]:
    """The launches grouped per server: the nodes of one server share its --dist-init-addr and
    count --node-rank from 0; a launch without --nnodes is a server of its own."""
    out: list[list] = []
    for la in launches:
        opts, _ = parse("sglang", la.args)
        rank = next((o.value for o in opts if o.what == "node_rank"), "0")
        if out and rank not in (None, "0") and len(out[-1]) < _nnodes(out[-1][0]):
            out[-1].append(la)
        else:
            out.append([la])
    return out


def _nnodes(la) -> int:
    opts, _ = parse("sglang", la.args)
    v = next((o.value for o in opts if o.what == "nnodes"), "1")
    return int(v) if v and v.isdigit() else 1


def _world(draft) -> int:
    out = 1
    for k in ("dp", "pp", "tp"):
        v = draft.get("mesh", k, 1)
        out *= v if isinstance(v, int) else 1
    return out


def _nodes_fact(r: SGLang, servers: list, facts: dict, pool: str | None) -> None:
    n_opt = r.wire.get("nnodes")
    per_server = int(n_opt.value) if n_opt is not None and n_opt.value and n_opt.value.isdigit() else 1
    world = _world(r.draft)
    nodes = per_server * len(servers)
    if pool is not None:     # servers over whole nodes: the pools' nodes add up
        if per_server > 1:
            facts["pool_nodes"] = facts.get("pool_nodes", 0) + nodes
            facts["nodes"] = (facts["pool_nodes"], "the pools' nodes (--nnodes of each server)")
            facts.setdefault("gpus_per_node", (world // per_server, r.note(n_opt)))
        return
    if "nodes" in facts:
        return
    facts["nodes"] = (nodes, r.note(n_opt) if n_opt else "one server on one node")
    if world % per_server == 0:
        facts.setdefault("gpus_per_node", (world // per_server, f"the server's {world} GPUs over {per_server} node(s)"))


def _order_mesh(draft) -> None:
    mesh = draft.blocks.get("mesh", {})
    order = ["pp", "dp", "tp", "ep", "dcp"]
    draft.blocks["mesh"] = {k: mesh[k] for k in sorted(mesh, key=lambda k: order.index(k) if k in order else 9)}


def _name(facts: dict) -> str:
    g = facts.get("gpu")
    return str(g[0]) if g else "imported"
