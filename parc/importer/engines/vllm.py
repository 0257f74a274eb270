"""``vllm serve`` read back into a spec: the rules of the options parc/targets/vllm/flags.toml
marks with ``read`` (the inverse of what parc/targets/vllm/__init__.py writes)."""
from __future__ import annotations

from parc.importer.argv import Opt, parse
from parc.importer.draft import Name
from parc.importer.engines.common import ServingReader, load_json, number

# the vLLM names of parc's speculative methods (vllm/config/speculative.py SpeculativeConfig.method)
SPECULATIVE = {"mtp": "mtp", "deepseek_mtp": "mtp", "eagle": "eagle", "eagle3": "eagle3"}


class VLLM(ServingReader):
    target = "vllm"

    def __init__(self, draft, report):
        super().__init__(draft, report)
        self.expert_parallel = False
        self.kv_role: str | None = None
        self.wire: dict[str, Opt] = {}
        self.model_id = None

    def read_launch(self, la) -> None:
        opts, positional = parse(self.target, la.args, underscores=True)
        if positional:
            self.model_id = positional[0]
            if positional[0].value is not None:
                self.draft.target(self.target, "model", positional[0].value, f"{la.where()} vllm serve {positional[0].shown}")
            self.carry_args(positional[1:], "words vllm serve does not take")
        config = [o for o in opts if o.what == "config"]
        for o in config:
            self.read(self._config_opts(o, la))
        self.read([o for o in opts if o.what != "config"])

    def _config_opts(self, o: Opt, la) -> list[Opt]:
        """``--config FILE``: each YAML key is the option of that name (a true boolean: the switch
        alone; vLLM's FlexibleArgumentParser.load_config_file)."""
        from parc.importer.sources import read_beside
        from parc.importer.sh_values import arg

        text = read_beside(la, o.value) if o.value else None
        data = _yaml(text) if text is not None else None
        if not isinstance(data, dict):
            self.carry(o, "its file cannot be read here")
            return []
        words = []
        for k, v in data.items():
            if v is True:
                words.append(arg(f"--{k}", o.line, f"{o.value}"))
            elif v is not False and v is not None:
                words += [arg(f"--{k}", o.line, f"{o.value}"), arg(str(v), o.line, f"{o.value}")]
        return parse(self.target, words, underscores=True)[0]

    # --- the rules of flags.toml's `read` -------------------------------------------------------
    def read_expert_parallel(self, o: Opt) -> None:
        self.expert_parallel = True
        self.seen["enable_expert_parallel"] = o

    def read_eplb_config(self, o: Opt) -> None:
        cfg = load_json(o) if not o.sub else {o.sub: number(o.value)}
        keys = {"window_size": "eplb_window", "step_interval": "eplb_interval", "num_redundant_experts": "redundant_experts"}
        if cfg is None or set(cfg) - set(keys) or not all(isinstance(v, int) for v in cfg.values()):
            self.carry(o, "EPLB options parc has no key for")
            return
        for k, v in cfg.items():
            self.draft.set("serve", keys[k], v, self.note(o))

    def read_kv_transfer(self, o: Opt) -> None:
        from parc.model.targets import spec

        cfg = load_json(o)
        if cfg is None:
            self.carry(o, "not a JSON object")
            return
        found = [k for k, c in spec(self.target)["kv_connectors"].items() if c["connector"] == cfg.get("kv_connector")]
        if not found:
            self.carry(o, f"the KV connector {cfg.get('kv_connector')!r} is none of parc's")
            return
        self.draft.set("serve", "kv_transfer", Name(found[0]), self.note(o))
        self.kv_role = cfg.get("kv_role")
        rest = sorted(set(cfg) - {"kv_connector", "kv_role"})
        if rest:
            self.drop(o, f"the connector's options {', '.join(rest)}: no .par key (parc writes kv_connector and kv_role)")

    def read_speculative(self, o: Opt) -> None:
        cfg = load_json(o)
        method = SPECULATIVE.get(str((cfg or {}).get("method")))
        if cfg is None or method is None or set(cfg) - {"method", "model", "num_speculative_tokens"}:
            self.carry(o, "speculative options parc has no key for")
            return
        self.draft.set("serve", "speculative", Name(method), self.note(o))
        if cfg.get("model"):
            self.draft.set("serve", "draft_model", str(cfg["model"]), self.note(o))
        if isinstance(cfg.get("num_speculative_tokens"), int):
            self.draft.set("serve", "speculative_tokens", cfg["num_speculative_tokens"], self.note(o))

    def read_config_file(self, o: Opt) -> None:   # handled before the command line (read_launch)
        pass

    def read_dp_local(self, o: Opt) -> None:
        self.wire["dp_local"] = o
        self.wiring(o)

    def read_nnodes(self, o: Opt) -> None:
        self.wire["nnodes"] = o
        self.wiring(o)

    def direct(self, o: Opt, path: str | None = None) -> bool:
        if o.what == "distributed_executor_backend" and o.value not in ("mp", "ray"):
            self.carry(o, f"the executor {o.value!r} is neither mp nor ray")
            return False
        return super().direct(o, path)

    # --- after every option -------------------------------------------------------------------
    def finish(self, moe: bool | None) -> None:
        """ep = dp · cp · tp where expert parallelism is on; vLLM's dp ranks of an MoE model run as
        one engine (serve.dp_attention)."""
        d = self.draft
        if self.expert_parallel:
            sizes = [d.get("mesh", k, 1) for k in ("dp", "cp", "tp")]
            o = self.seen["enable_expert_parallel"]
            if moe is False:
                self.carry(o, "the model has no experts")
            elif all(isinstance(v, int) for v in sizes):
                d.set("mesh", "ep", sizes[0] * sizes[1] * sizes[2], f"{self.note(o)}: ep = dp · cp · tp")
        dp = d.get("mesh", "dp", 1)
        if moe and isinstance(dp, int) and dp > 1:
            d.set("serve", "dp_attention", True, "vLLM runs the dp ranks of an MoE model as one engine", replace=False)


def _yaml(text: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


# --- the deployment ------------------------------------------------------------------------------
def _pool_of(la) -> str | None:
    """The pool a vLLM server is in: its KV role (kv_producer: prefill, kv_consumer: decode), else
    the name of its file or a branch it is under (prefill..., decode...); an orchestrator's
    role for it (a Dynamo worker's --disaggregation-mode, KServe's or Ray Serve's prefill config) first."""
    from parc.importer.argv import parse

    if la.role in ("prefill", "decode"):
        return la.role
    opts, _ = parse("vllm", la.args, underscores=True)
    kv = next((load_json(o) for o in opts if o.what == "kv_transfer_config"), None)
    if kv is None:
        return None
    role = {"kv_producer": "prefill", "kv_consumer": "decode"}.get(str(kv.get("kv_role")))
    if role:
        return role
    hint = (la.file + " " + " ".join(str(t[0]) for t in la.tags)).lower()
    return "prefill" if "prefill" in hint else "decode" if "decode" in hint else None


def _read(ctx, la, draft, report) -> VLLM:
    r = VLLM(draft, report)
    r.read_launch(la)
    return r


def deploy(ctx) -> str:
    """The spec of vLLM launches: one engine over its nodes, or two pools of instances."""
    from parc.importer import cluster
    from parc.importer.deploy import alternatives, is_moe, merge_pools, model_block

    group = [la for la in ctx.group]
    pools: dict[str, list] = {}
    for la in group:
        pools.setdefault(_pool_of(la) or "", []).append(la)
    opts, positional = parse("vllm", group[0].args, underscores=True)
    model_id = positional[0].value if positional else next((o.value for o in opts if o.what == "model"), None)
    preset = model_block(ctx, model_id, f"{group[0].where()} vllm serve {model_id}")
    moe = is_moe(ctx, preset)
    facts = ctx.facts()
    if set(pools) == {"prefill", "decode"}:
        from parc.importer.draft import Draft

        drafts, counts = {}, {}
        for name in ("prefill", "decode"):
            alternatives(ctx, "vllm", [[la] for la in pools[name]])
            sub = Draft(blocks={"model": ctx.draft.blocks.get("model", {})})
            r = _read(ctx, pools[name][0], sub, ctx.report)
            r.finish(moe)
            sub.blocks.pop("model", None)
            drafts[name], counts[name] = sub, sum(la.instances for la in pools[name])
        merge_pools(ctx, drafts, counts)
        world = sum(counts[p] * _world(drafts[p]) for p in counts)
        facts.setdefault("nodes", (1, "the pools' servers on one host"))
        facts.setdefault("gpus_per_node", (world, "every instance's GPUs"))
    else:
        nodes = _nodes(ctx, group)
        alternatives(ctx, "vllm", nodes)
        r = _read(ctx, nodes[0][0], ctx.draft, ctx.report)
        r.finish(moe)
        _layout_facts(ctx, r, nodes, facts)
        if ctx.helpers("ray") and not ctx.draft.targets.get("vllm", {}).get("executor"):
            ctx.draft.target("vllm", "executor", Name("ray"), f"{ctx.helpers('ray')[0].where()} ray start: a Ray cluster")
    ctx.draft.blocks.setdefault("serve", {})
    _order_mesh(ctx.draft)
    cluster.write(ctx.draft, facts, ctx.options.cluster, ctx.report, _cluster_name(ctx))
    return "vllm"


def _nodes(ctx, group) -> list[list]:
    """The deployments among the launches, each a list of its nodes' launches: a primary with the
    --headless nodes that join it (a headless node runs no API server, so its API options may
    differ); every other launch a deployment of its own."""
    from parc.importer.argv import parse

    primaries, headless = [], []
    for la in group:
        opts, _ = parse("vllm", la.args, underscores=True)
        (headless if any(o.what == "headless" for o in opts) else primaries).append(la)
    if not primaries:
        return [headless]
    if len(primaries) == 1:
        return [primaries + headless]
    return [[la] for la in primaries]


def _world(draft) -> int:
    out = 1
    for k in ("dp", "pp", "cp", "tp"):
        v = draft.get("mesh", k, 1)
        out *= v if isinstance(v, int) else 1
    return out


def _layout_facts(ctx, r: VLLM, nodes, facts: dict) -> None:
    """Nodes and GPUs a node from the launch: --nnodes (a replica over nodes), the local data
    parallel size (replicas a node), the launches of the file (a primary and its headless nodes),
    else one node holding the engine's GPUs."""
    world = _world(ctx.draft)
    launches = nodes[0]
    n_opt = r.wire.get("nnodes")
    local = r.wire.get("dp_local")
    if n_opt is not None and n_opt.value and n_opt.value.isdigit():
        n = int(n_opt.value)
        facts.setdefault("nodes", (n, r.note(n_opt)))
        if world % n == 0:
            facts.setdefault("gpus_per_node", (world // n, f"{world} GPUs over {n} nodes"))
    elif local is not None and local.value and local.value.isdigit():
        per = int(local.value) * world // max(1, ctx.draft.get("mesh", "dp", 1) if isinstance(ctx.draft.get("mesh", "dp", 1), int) else 1)
        facts.setdefault("gpus_per_node", (per, r.note(local)))
        if per and world % per == 0:
            facts.setdefault("nodes", (world // per, f"{world} GPUs, {per} a node"))
    elif len(launches) > 1 and not ctx.helpers("ray"):
        facts.setdefault("nodes", (len(launches), f"{len(launches)} launches: a primary and its headless nodes"))
        if world % len(launches) == 0:
            facts.setdefault("gpus_per_node", (world // len(launches), f"{world} GPUs over {len(launches)} nodes"))
    elif not ctx.helpers("ray"):
        facts.setdefault("nodes", (1, "one vllm serve"))
        facts.setdefault("gpus_per_node", (world, "the GPUs the engine uses (dp · pp · cp · tp)"))


def _order_mesh(draft) -> None:
    """The mesh in vLLM's own order (dp, pp, cp, tp; target.toml rank_order), then ep and dcp."""
    mesh = draft.blocks.get("mesh", {})
    order = ["dp", "pp", "cp", "tp", "ep", "dcp"]
    draft.blocks["mesh"] = {k: mesh[k] for k in sorted(mesh, key=lambda k: order.index(k) if k in order else 9)}
    if not draft.blocks["mesh"]:
        draft.set("mesh", "tp", 1, "vLLM's default --tensor-parallel-size")


def _cluster_name(ctx) -> str:
    g = ctx.facts().get("gpu")
    return f"{g[0]}" if g else "imported"
