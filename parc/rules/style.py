"""P55x: style — specs that are right but say more than they need to, or say it untidily.

These checks run only under ``parc lint`` (``parc check`` reports what is wrong, not what is
untidy): the lint engine turns them on with :func:`linting`, which also hands them the source
text it has already read. The rules over the plan are registered here; :func:`text_checks`
holds the ones that look only at the text (they run on every linted file, fragments included).
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from fractions import Fraction

from parc.language.diagnostics import WARNING, Diagnostic, Edit, Fix, Span, diff_edits
from parc.resolve.reader import source_text
from parc.rules import rule
from parc.rules.util import dims

# While set, the style rules run; the dict maps shown file names to their text.
_LINTING: ContextVar[dict | None] = ContextVar("parc_linting", default=None)


@contextmanager
def linting(sources: dict[str, str] | None = None):
    token = _LINTING.set({} if sources is None else sources)
    try:
        yield
    finally:
        _LINTING.reset(token)


def _source(file: str) -> str | None:
    sources = _LINTING.get()
    if sources is None:
        return None
    return source_text(sources, file)


def _assigned(plan, path: str, key: str) -> Span | None:
    """The span of ``key = ...`` when the user wrote it (not a value borrowed from elsewhere)."""
    s = plan.spans.get(path)
    if s is None:
        return None
    text = _source(s.file)
    if text is None or not text.startswith(key, s.start):
        return None
    rest = text[s.start + len(key):s.start + len(key) + 64].lstrip(" \t")
    return s if rest.startswith("=") else None


def _removal(s: Span) -> list[Fix]:
    """The fix that removes the statement at ``s``: its whole line when nothing else is on it,
    else the statement alone (a comment after it stays)."""
    text = _source(s.file)
    if text is None:
        return []
    a = text.rfind("\n", 0, s.start) + 1
    nl = text.find("\n", s.end)
    b = len(text) if nl < 0 else nl + 1
    before, after = text[a:s.start], text[s.end:b]
    if before.strip() or after.strip():
        a, b = s.start, s.end
        while b < len(text) and text[b] in " \t;":
            b += 1
    else:
        a = a if a == 0 or b < len(text) or text[a - 1] != "\n" else a - 1
    return [Fix("remove the line", (Edit(Span.of(s.file, text, a, b), ""),))]


def _value_fix(s: Span, new: str) -> list[Fix]:
    """The fix that writes ``new`` as the value of the assignment at ``s``."""
    text = _source(s.file)
    eq = text.find("=", s.start, s.end) if text is not None else -1
    if eq < 0:
        return []
    a = eq + 1
    while a < s.end and text[a] in " \t":
        a += 1
    return [Fix(f"write `{new}`", (Edit(Span.of(s.file, text, a, s.end), new),))]


def _same(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, (int, float, Fraction)) and isinstance(b, (int, float, Fraction)):
        return Fraction(a) == Fraction(b) if not isinstance(a, float) and not isinstance(b, float) \
            else abs(float(a) - float(b)) <= 1e-9 * max(abs(float(a)), abs(float(b)), 1.0)
    return a == b


# seq_len is left out: it is a choice of the workload that specs state on purpose.
_MODEL_FIELDS = ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "head_dim", "vocab", "params",
                 "dtype", "tied_embeddings", "mlp", "norm", "position", "bias", "experts",
                 "top_k", "moe_ffn_hidden", "shared_experts", "moe_every")
_GPU_FIELDS = ("memory", "flops", "hbm_bandwidth", "nvlink_bandwidth", "pcie_bandwidth")


@rule("P552", "preset-value-restated", WARNING)
def preset_value_restated(plan, c):
    if _LINTING.get() is None:
        return
    from parc.resolve.resolver import presets

    md = plan.model
    pre = presets("models").get(md.preset or "") if md.preset else None
    if pre:
        for k in _MODEL_FIELDS:
            if k in pre and (s := _assigned(plan, f"model.{k}", k)) and _same(getattr(md, k), pre[k]):
                c.report(s, f"`{k} = ...` restates the preset's own value: `{md.preset}` already has "
                            f"{k} = {getattr(md, k)}",
                         help=f"remove the line; `from = {md.preset}` sets it", fixes=_removal(s))
    gpu = plan.cluster.gpu
    gpre = presets("gpus").get(gpu.name)
    if gpre:
        for k in _GPU_FIELDS:
            if k in gpre and (s := _assigned(plan, f"gpu.{k}", k)) and _same(getattr(gpu, k), gpre[k]):
                c.report(s, f"`{k} = ...` restates the value of the GPU preset `{gpu.name}`",
                         help=f"remove the line; `from = {gpu.name}` sets it", fixes=_removal(s))


@rule("P553", "derived-value-restated", WARNING)
def derived_value_restated(plan, c):
    """A field that parc derives, written out with the value it would derive anyway."""
    if _LINTING.get() is None:
        return
    md, s = plan.model, plan.schedule
    derived = []
    if md.heads and md.hidden % md.heads == 0:
        derived.append(("model.head_dim", "head_dim", md.head_dim, md.hidden // md.heads,
                        "hidden / heads"))
    if not md.preset or "params" not in _preset(md.preset):
        from parc.cost.estimate import param_count

        try:
            derived.append(("model.params", "params", md.params, param_count(md), "the model's shapes"))
        except (ZeroDivisionError, ValueError):
            pass
    n = dims(plan).microbatches
    if plan.mode == "train" and n is not None:
        derived.append(("schedule.microbatches", "microbatches", s.microbatches, n, "global_batch / (micro_batch · dp)"))
    for path, key, have, want, how in derived:
        if have is None or not _same(have, want):
            continue
        span = _assigned(plan, path, key)
        if span is not None:
            c.report(span, f"`{key} = {have}` is what parc derives from {how}",
                     help=f"remove the line so {key} follows when the other values change", fixes=_removal(span))


def _preset(name: str) -> dict:
    from parc.resolve.resolver import presets

    return presets("models").get(name) or {}


@rule("P554", "explicit-even-split", WARNING)
def explicit_even_split(plan, c):
    if _LINTING.get() is None:
        return
    pl = plan.placement
    if pl.layers_mode != "explicit" or not pl.layers or len(pl.layers) < 2:
        return
    if len(set(pl.layers)) == 1 and sum(pl.layers) == plan.model.layers:
        span = _assigned(plan, "placement.layers", "layers")
        if span is not None:
            c.report(span, f"the explicit split {pl.layers} is the even split",
                     help="write `layers = even`; it follows the model when layers or pp change",
                     fixes=_value_fix(span, "even"))


# ----------------------------------------------------------------------------- text checks

def _formatter():
    """The `parc fmt` function text -> text, or None where it is not available."""
    try:
        from parc.language import fmt as _fmt  # type: ignore[attr-defined]
    except ImportError:
        return None
    for name in ("format_text", "format_source", "fmt"):
        fn = getattr(_fmt, name, None)
        if callable(fn):
            return fn
    return None


def text_checks(file: str, text: str) -> list[Diagnostic]:
    """The style checks that need only the text: P551, a file `parc fmt` would change."""
    out: list[Diagnostic] = []
    fmt = _formatter()
    if fmt is None:
        return out
    try:
        new = fmt(text, file)
    except Exception:  # a file that does not parse is reported by the checks, not here
        return out
    if isinstance(new, tuple):
        new = new[0]
    if not isinstance(new, str) or new == text:
        return out
    old_lines, new_lines = text.splitlines(), new.splitlines()
    line = next((i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
                min(len(old_lines), len(new_lines)))
    changed = sum(1 for a, b in zip(old_lines, new_lines) if a != b) + abs(len(old_lines) - len(new_lines))
    ln = line + 1
    src = old_lines[line] if line < len(old_lines) else ""
    offset = sum(len(x) + 1 for x in old_lines[:line])
    span = Span(file, ln, 1, ln, max(2, len(src) + 1), offset, offset + max(1, len(src)))
    out.append(Diagnostic("P551", WARNING,
                          f"the file is not in the canonical layout ({changed} line{'s' if changed != 1 else ''} "
                          f"would change, the first here)",
                          span, help=f"run `parc fmt {file}`", fixes=[Fix("format the file", diff_edits(file, text, new))]))
    return out
