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


def run(args) -> int:
    from parc.resolve.resolver import presets
    from parc.report import presets as report

    kinds = ("models", "gpus") if args.kind == "all" else (args.kind,)
    if args.format == "json":
        print(report.render_json({k: presets(k) for k in kinds}))
        return 0
    parts = []
    if "models" in kinds:
        models = presets("models")
        parts.append(report.render_models(models, {n: _param_count(n, m) for n, m in models.items()},
                                          args.sources))
    if "gpus" in kinds:
        parts.append(report.render_gpus(presets("gpus"), args.sources))
    print("\n\n".join(parts))
    return 0


def _param_count(name: str, fields: dict) -> int:
    """A model preset's parameter count, as the cost model counts it."""
    from parc.cost.estimate import param_count
    from parc.model.plan import Model

    known = {"head_dim": None, **{k: v for k, v in fields.items() if k in Model.__dataclass_fields__}}
    return param_count(Model(name=name, params=0, **known))
