"""parc presets: the built-in model and GPU presets."""
from __future__ import annotations

DESCRIPTION = "List the built-in model and GPU presets, with the public source of each figure."
EPILOG = """examples:
  parc presets
  parc presets --kind gpus --format json"""


def add_arguments(p):
    p.add_argument("--kind", choices=("models", "gpus", "all"), default="all")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--sources", action="store_true", help="also print where each preset's numbers come from")


def _count(n) -> str:
    for div, suf in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.1f}{suf}"
    return str(n)


def run(args) -> int:
    import json

    from parc.model.plan import Model
    from parc.resolve.resolver import presets
    from parc.cost import estimate as costmodel

    kinds = ("models", "gpus") if args.kind == "all" else (args.kind,)
    if args.format == "json":
        print(json.dumps({k: presets(k) for k in kinds}, indent=2, sort_keys=True))
        return 0
    from parc.report.table import table

    if "models" in kinds:
        rows = []
        for name, m in presets("models").items():
            fields = {k: v for k, v in m.items() if k in Model.__dataclass_fields__}
            model = Model(name=name, head_dim=None, params=0, **fields)
            moe = f"{m['experts']}x top-{m['top_k']}" if m.get("experts") else "-"
            rows.append([name, _count(costmodel.param_count(model)), m["layers"], m["hidden"], m["ffn_hidden"],
                         m["heads"], m.get("kv_heads", m["heads"]), m["vocab"], m["seq_len"], moe])
        print("models")
        print(table(["preset", "params", "layers", "hidden", "ffn", "heads", "kv", "vocab", "seq_len", "experts"],
                    rows, align="lrrrrrrrrl"))
        if args.sources:
            for name, m in presets("models").items():
                print(f"  {name}: {m['source']}")
    if "gpus" in kinds:
        if "models" in kinds:
            print()
        rows = []
        for name, g in presets("gpus").items():
            rows.append([name, f"{g['memory'] / 2**30:.0f} GiB", f"{g['flops'] / 1e12:g} TFLOPS",
                         f"{g['hbm_bandwidth'] / 1e9:g} GB/s",
                         f"{g['nvlink_bandwidth'] / 1e9:g} GB/s" if g["nvlink_bandwidth"] else "-"])
        print("gpus")
        print(table(["preset", "memory", "bf16 dense", "HBM", "NVLink (per dir.)"], rows, align="lrrrr"))
        if args.sources:
            for name, g in presets("gpus").items():
                print(f"  {name}: {g['source']}")
    return 0
