"""What a search starts from: the model, the cluster, the workload and the fields a user fixed.

A :class:`Problem` is read from ``--model`` and ``--cluster`` (a preset name, or a ``.par`` file
holding that block) or from a partial spec: every field the spec gives is kept, and every field
it leaves out or sets to ``auto`` is searched. Loading goes through the resolver, so a bad file
gives the same diagnostics as ``parc check``.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from parc.language.diagnostics import Diagnostic
from parc.model.plan import Cluster, Model, Placement, Plan, Profile, Serve, Target, Train

# Fields the planner searches, by mode; a partial spec fixes any of them by giving a value.
TRAIN_FIELDS = ("mesh.pp", "mesh.dp", "mesh.cp", "mesh.tp", "mesh.ep", "mesh.etp",
                "schedule.pipeline", "schedule.virtual_stages", "schedule.micro_batch",
                "train.zero", "train.recompute", "train.sequence_parallel")
SERVE_FIELDS = ("mesh.pp", "mesh.dp", "mesh.cp", "mesh.tp", "mesh.ep", "mesh.etp", "serve.max_num_seqs")
# Fields a spec may set to `auto` here although `parc check` accepts `auto` only for mesh axes.
_AUTO_OK = {f.split(".")[1]: f.split(".")[0] for f in TRAIN_FIELDS + SERVE_FIELDS} | {"etp": "mesh"}

DEFAULT_BATCH_TOKENS = 4 * 2**20   # a training step of about 4M tokens when no batch is given


class InputError(Exception):
    """The model, cluster or spec could not be read; ``diagnostics`` says why (with ``sources``)."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None,
                 sources: dict[str, str] | None = None):
        super().__init__(message)
        self.diagnostics = diagnostics or []
        self.sources = sources or {}


@dataclass
class Problem:
    """A search's fixed inputs. ``fixed`` maps searched fields (``"mesh.tp"``) to the value a
    spec gave; everything else in ``TRAIN_FIELDS``/``SERVE_FIELDS`` is searched."""

    model: Model
    cluster: Cluster
    mode: str = "train"
    global_batch: Optional[int] = None
    microbatches: Optional[int] = None          # fixed microbatch count (a spec's `microbatches`)
    fixed: dict[str, Any] = field(default_factory=dict)
    order: list[str] = field(default_factory=lambda: ["pp", "dp", "cp", "tp"])
    placement: Placement = field(default_factory=Placement)
    train: Train = field(default_factory=Train)
    serve: Serve = field(default_factory=Serve)
    targets: dict[str, Target] = field(default_factory=dict)
    profile: Profile = field(default_factory=Profile)   # the cluster's efficiency factors
    file: str = "plan.par"
    # source text of blocks written back unchanged into the best plan (targets, say)
    block_text: dict[str, str] = field(default_factory=dict)
    extra_targets: tuple = ()        # targets whose rules apply beyond those the spec names (--target)
    max_virtual: int = 8             # virtual stages per pipeline rank tried by interleaved schedules
    max_micro_batch: int = 64        # micro batches tried when the microbatch count is fixed instead
    memo: dict = field(default_factory=dict, repr=False, compare=False)   # per-problem caches

    def __post_init__(self):
        if self.mode not in ("train", "serve"):
            raise ValueError(f"mode must be 'train' or 'serve', not {self.mode!r}")
        if self.mode == "train" and self.global_batch is None and self.microbatches is None:
            self.global_batch = default_global_batch(self.model.seq_len)

    def target_settings(self, name: str) -> dict[str, Any]:
        """A target block's settings with what it inherits, as :meth:`Plan.target_settings` reads
        them (the engine and release a report names come from here)."""
        return Plan.target_settings(self, name)

    @property
    def rule_targets(self) -> set[str]:
        """The targets whose rules judge the plans, as ``run_rules`` implies them."""
        from parc.model.targets import implied

        own = (lambda t: self.targets[t].settings if t in self.targets else {})
        return implied(set(self.targets) | set(self.extra_targets), self.mode, own, self.targets)


def default_global_batch(seq_len: int) -> int:
    """The power of two nearest to 4M tokens per step (at least one sequence)."""
    n = max(1, DEFAULT_BATCH_TOKENS // max(1, seq_len))
    return 1 << (n.bit_length() - 1)


# --- loading ------------------------------------------------------------------------------------

def _resolver(anchor: Path, root):
    from parc.resolve import load_partial

    return load_partial(anchor, root)


def _fail(r, what: str):
    raise InputError(f"{what} has errors", r.errors, r.sources)


def _unread(r) -> None:
    """A file named on the command line that could not be read is an I/O failure (exit 2)."""
    from parc.resolve.reader import READ_CODE

    for d in r.diagnostics:
        if d.code == READ_CODE and d.span.line == 1 and d.span.column == 1:
            raise InputError(d.message[:1].lower() + d.message[1:])


def _resolve(r, shown: str):
    """Resolve what ``r`` has loaded into a plan; InputError with the P0 diagnostics otherwise."""
    plan = r.resolve(shown)
    if plan is None:
        _fail(r, shown)
    return plan


def _is_file(arg: str) -> bool:
    return arg.endswith(".par") or os.sep in arg or (os.altsep or "/") in arg or Path(arg).is_file()


def _load_into(r, arg: str, kind: str) -> str:
    """Load a preset name or a .par file for block ``kind`` into resolver ``r``; the shown name."""
    from parc.resolve import presets

    if not _is_file(arg):
        table = presets("models" if kind == "model" else "gpus")
        if kind == "model" and arg in table:
            shown = f"<--model {arg}>"
            return r.add_text(shown, f'model "{arg}" {{\n  from = {arg}\n}}\n')
        from parc.resolve import did_you_mean

        sug = did_you_mean(arg, table) if kind == "model" else None
        hint = (f"did you mean `{sug}`? " if sug else "") + (
            "`parc presets` lists the model presets" if kind == "model" else
            "--cluster takes a .par file holding a `cluster` block")
        raise InputError(f"--{kind} {arg}: no such {'preset or ' if kind == 'model' else ''}file ({hint})")
    r.add(arg)
    _unread(r)
    shown = r.files[-1] if r.files else arg
    if not r.has(kind) and not r.errors:
        raise InputError(f"{arg} holds no `{kind}` block")
    return shown


def load_model(arg: str, root=None) -> Model:
    """The model of a preset name or a .par file holding a ``model`` block."""
    r = _resolver(Path(arg) if _is_file(arg) else Path.cwd() / "x.par", root)
    shown = _load_into(r, arg, "model")
    r.complete("cluster")
    return _resolve(r, shown).model


def load_cluster(arg: str, root=None) -> Cluster:
    """The cluster of a .par file holding a ``cluster`` block."""
    return load_cluster_profile(arg, root)[0]


def load_cluster_profile(arg: str, root=None) -> tuple[Cluster, Profile]:
    """The cluster of a .par file holding a ``cluster`` block, and the `profile` the file holds
    or imports (``parc calibrate``'s measured factors; the defaults when it has none)."""
    r = _resolver(Path(arg), root)
    shown = _load_into(r, arg, "cluster")
    r.complete("model")
    plan = _resolve(r, shown)
    return plan.cluster, plan.profile


def with_seq_len(model: Model, seq_len: int) -> Model:
    """A copy of ``model`` at another sequence length (parameters re-derived when they were)."""
    from parc.cost import estimate as costmodel

    m = copy.copy(model)
    derived = model.params == costmodel.param_count(model)
    m.seq_len = int(seq_len)
    if derived:
        m.params = costmodel.param_count(m)
    return m


def load_spec(path: str, root=None, text: str | None = None, *, model: str | None = None,
              cluster: str | None = None, mode: str | None = None) -> Problem:
    """A :class:`Problem` from a (partial) spec: given fields are fixed, absent or `auto` ones searched.

    ``model`` and ``cluster`` (a preset name or a .par file) supply those blocks when the spec
    has none; what the spec itself writes wins. ``mode`` applies to a spec with neither a
    ``train`` nor a ``serve`` block."""
    p = Path(path)
    r = _resolver(p, root)
    for arg, kind in ((model, "model"), (cluster, "cluster")):
        if arg is not None:
            _load_into(r, arg, kind)
    shown = r.add(p, text=text)
    _unread(r)
    if mode == "serve" and not r.has("train") and not r.has("serve"):
        r.add_text("<--serve>", "serve {\n}\n")
    if r.errors:
        _fail(r, shown)
    searched_auto = r.take_autos(_AUTO_OK)  # the search fills them
    given = r.given()
    plan = _resolve(r, shown)
    mode = plan.mode
    fixed: dict[str, Any] = {}
    for f in TRAIN_FIELDS + SERVE_FIELDS:
        kind, key = f.split(".")
        if f in searched_auto or key not in given.get(kind, ()):
            continue
        obj = {"mesh": plan.mesh, "schedule": plan.schedule, "train": plan.train, "serve": plan.serve}[kind]
        if obj is not None:
            fixed[f] = getattr(obj, key)
    mesh_given = [ax for ax in r.order("mesh") if ax in ("pp", "dp", "cp", "tp")]
    sched_given = given.get("schedule", set())
    gb = plan.schedule.global_batch if "global_batch" in sched_given else None
    mbs = plan.schedule.microbatches if ("microbatches" in sched_given and gb is None) else None
    placement = copy.deepcopy(plan.placement)
    if "layers" not in given.get("placement", set()):
        placement.layers_mode, placement.layers = "even", None
    else:
        fixed["placement.layers"] = placement.layers_mode
    block_text = r.target_text()
    return Problem(model=plan.model, cluster=plan.cluster, mode=mode, global_batch=gb, microbatches=mbs,
                   fixed=fixed, order=plan.mesh.order if mesh_given else ["pp", "dp", "cp", "tp"],
                   placement=placement, train=plan.train or Train(), serve=plan.serve or Serve(),
                   targets=plan.targets, profile=plan.profile, file=shown, block_text=block_text)


def problem(model, cluster, mode: str = "train", *, seq_len: int | None = None,
            global_batch: int | None = None, root=None, **kw) -> Problem:
    """A :class:`Problem` from a model (Model, preset name or file) and a cluster (Cluster or file).
    ``seq_len`` is the training sequence length, or for serving ``max_model_len`` (by default the
    engine's own: the model's context)."""
    m = load_model(str(model), root) if isinstance(model, (str, os.PathLike)) else model
    c = cluster
    if isinstance(cluster, (str, os.PathLike)):
        c, prof = load_cluster_profile(str(cluster), root)
        kw.setdefault("profile", prof)
    if mode == "serve":
        serve = copy.copy(kw.pop("serve", None) or Serve())
        if seq_len is not None:
            serve.max_model_len = int(seq_len)
        kw["serve"] = serve
    elif seq_len is not None and seq_len != m.seq_len:
        m = with_seq_len(m, seq_len)
    return Problem(model=m, cluster=c, mode=mode, global_batch=global_batch, **kw)


__all__ = ["Problem", "InputError", "problem", "load_spec", "load_model", "load_cluster", "load_cluster_profile",
           "with_seq_len",
           "default_global_batch", "TRAIN_FIELDS", "SERVE_FIELDS"]
