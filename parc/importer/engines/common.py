"""What every engine reader shares: an option whose flags.toml entry names one .par key is that
key's value (converted to the field's kind, through the entry's `values`); an option parc has no
key for goes to the target's ``extra_args`` (or ``args``) with a comment; an option of the
launch's own wiring (`plumbing`) is read for the nodes and left to parc's launch, and said so."""
from __future__ import annotations

from dataclasses import dataclass, field

from parc.importer.argv import Opt
from parc.importer.draft import Draft, Name, Placeholder, writable
from parc.importer.sh_values import Arg


@dataclass
class Report:
    """What the import says on stderr besides the spec: each option carried unparsed (and why),
    each option left to parc's launch, each assumption the shell reader made."""
    carried: list[tuple[str, str]] = field(default_factory=list)      # (where option, why)
    wiring: list[tuple[str, str]] = field(default_factory=list)       # (where option, what parc writes)
    notes: list[str] = field(default_factory=list)
    dropped: list[tuple[str, str]] = field(default_factory=list)      # (where what, why it cannot be written)
    warnings: list[tuple[str, str, str]] = field(default_factory=list)  # (code, where, what): P041..P043


def field_kind(path: str, target: str | None = None) -> dict:
    """The kind (and choices) of a .par key ``block.field`` or ``target.key``."""
    from parc.model.fields import BLOCKS
    from parc.model.targets import keys

    block, _, name = path.partition(".")
    if block == "target":
        return dict(keys(target or "").get(name, {}))
    f = BLOCKS.get(block, {}).get(name)
    return {"kind": f.kind, "choices": list(f.choices or ())} if f else {}


def number(text: str | None):
    """An int or float from an engine's word, None when it is neither."""
    if text is None:
        return None
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        v = float(t)
        return v if v == v and abs(v) != float("inf") else None
    except ValueError:
        return None


def inverse(entry: dict, word) -> object:
    """The .par value of an engine's word through the entry's ``values`` (par -> engine)."""
    for par, eng in (entry.get("values") or {}).items():
        if eng == word or (isinstance(eng, str) and isinstance(word, str) and eng.lower() == word.lower()):
            return {"true": True, "false": False}.get(par, par)
    return word


class Reader:
    """The base of the per-engine readers (``parc/importer/engines/<target>.py``)."""

    target = ""
    extra_key = "extra_args"

    def __init__(self, draft: Draft, report: Report):
        self.draft = draft
        self.report = report
        self.seen: dict[str, Opt] = {}

    # --- notes ---------------------------------------------------------------------------------
    def where(self, o: Opt) -> str:
        f = o.words[0].file if o.words else ""
        if not o.line:                 # a TOML or YAML key: the file (tomllib keeps no lines)
            return f or "the launch"
        return f"{f}:{o.line}" if f else f"line {o.line}"

    def note(self, o: Opt) -> str:
        return f"{self.where(o)} {o.source()}"

    # --- the generic rules ---------------------------------------------------------------------
    def read(self, opts: list[Opt]) -> None:
        for o in opts:
            self.seen[o.what or o.spelled] = o
            gone = self.not_in_release(o)
            if gone:
                self.drop(o, gone)
                continue
            if o.what is None:
                self.carry(o, "parc has no key for it")
                continue
            e = o.entry
            rule = e.get("read")
            if rule:
                getattr(self, "read_" + rule)(o)
            elif e.get("plumbing"):
                self.wiring(o)
            elif isinstance(e.get("key"), str) and "." in e["key"]:
                self.direct(o)
            else:
                self.carry(o, "parc has no key for it")

    def not_in_release(self, o: Opt) -> str | None:
        """Why an option the newest release parc knows no longer takes is not carried (it would be
        P665 in the spec): the original ran an older release. None for an option it takes."""
        from parc.model.targets import display, holds, newest, span_text

        spelled = next((e for e in (o.entry or {}).get("names", []) if e["name"] == o.spelled), None)
        v = newest(self.target)
        if spelled is None or v is None or holds(self.target, v, spelled.get("since"), spelled.get("until")):
            return None
        return (f"{display(self.target)} {v} has no option `{o.spelled}` "
                f"({span_text(self.target, spelled.get('since'), spelled.get('until'))} only): the original ran an "
                "older release")

    def direct(self, o: Opt, path: str | None = None) -> bool:
        """Set the entry's key from the option; carry it where the value does not fit the key."""
        path = path or o.entry["key"]
        v = self.convert(o, path)
        if v is None:
            return False
        block, _, key = path.partition(".")
        if block == "target":
            self.draft.target(self.target, key, v, self.note(o))
        else:
            self.draft.set(block, key, v, self.note(o))
        return True

    def convert(self, o: Opt, path: str):
        """The .par value of option ``o`` for key ``path``; None (the option carried) where it has none."""
        kind = field_kind(path, self.target)
        takes = o.entry.get("takes", "value")
        if takes == "switch":
            v = inverse(o.entry, True) if o.entry.get("values") else True
            return Name(v) if isinstance(v, str) and kind.get("kind") in ("enum", "preset") else v
        if not o.values:
            self.carry(o, "it has no value")
            return None
        a = o.values[0]
        if a.value is None:
            return Placeholder(a.shown)
        word = inverse(o.entry, a.value) if takes != "words" else None
        k = kind.get("kind", "str")
        if takes == "words":
            vals = [w.value for w in o.values]
            if any(v is None for v in vals):
                return Placeholder(" ".join(w.shown for w in o.values))
            return [Name(v) if k == "enumlist" else v for v in vals]
        if k in ("int", "int_or_auto", "frac", "bytes", "float"):
            n = number(str(word))
            if n is None or (k.startswith("int") and not isinstance(n, int)):
                self.carry(o, f"`{a.value}` is not a number parc reads for {path}")
                return None
            return n
        if k == "bool":
            if isinstance(word, bool):
                return word
            b = {"true": True, "false": False, "1": True, "0": False}.get(str(word).lower())
            if b is None:
                self.carry(o, f"`{a.value}` is not true or false")
            return b
        if k in ("enum", "preset"):
            choices = kind.get("choices") or []
            if choices and word not in choices:
                self.carry(o, f"`{a.value}` is not among {path}'s values ({', '.join(map(str, choices))})")
                return None
            return Name(str(word))
        if not writable(str(word)):
            self.drop(o, "its value holds a control character or is too long for a spec string")
            return None
        return str(word)

    def carry(self, o: Opt, why: str) -> None:
        """The option's words, as written, into the target's extra_args, with why."""
        words = [w.value if w.value is not None else Placeholder(w.shown) for w in o.words]
        if not all(isinstance(w, Placeholder) or writable(w) for w in words):
            self.drop(o, "it holds a control character or a value too long for a spec string")
            return
        self.draft.extra(self.target, self.extra_key, words, f"{self.where(o)}: {why}")
        self.report.carried.append((self.note(o), why))

    def drop(self, o: Opt, why: str) -> None:
        self.report.dropped.append((self.note(o), why))

    def wiring(self, o: Opt, what: str = "") -> None:
        self.report.wiring.append((self.note(o), what or o.entry.get("doc") or "parc's launch writes its own"))

    def carry_args(self, args: list[Arg], why: str) -> None:
        """Words that are no option (a script's positional arguments) carried as they are."""
        if args:
            self.carry(Opt(None, args[0].shown, [], list(args)), why)


# the engines' --dtype words as parc's dtypes (vLLM and SGLang take the same: torch dtype names)
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}


class ServingReader(Reader):
    """The rules vLLM and SGLang share: --dtype, --quantization and config.json overrides."""

    def read_dtype(self, o: Opt) -> None:
        if o.value == "auto":
            from parc.model.targets import display

            self.wiring(o, f"{display(self.target)}'s default (the checkpoint's dtype): the spec leaves it out")
            return
        d = DTYPES.get(o.value or "")
        if d is None:
            self.carry(o, f"`{o.value}` is no dtype parc has")
        elif self.draft.get("model", "dtype") != Name("fp8"):   # --quantization fp8 runs bf16 activations
            self.draft.set("model", "dtype", Name(d), self.note(o))

    def read_quantization(self, o: Opt) -> None:
        from parc.resolve.catalog import presets

        if o.value == "fp8":
            self.draft.set("model", "dtype", Name("fp8"), self.note(o))
            return
        formats = [f for f, c in presets("checkpoints").items() if c.get(self.target) == o.value] if o.value else []
        if len(formats) == 1:
            self.draft.set("model", "checkpoint_format", Name(formats[0]), self.note(o))
        else:
            self.carry(o, f"the quantization method {o.value!r} is no checkpoint format parc has")

    def read_hf_overrides(self, o: Opt) -> None:
        from parc.importer.models import read_overrides

        if not read_overrides(self.draft, load_json(o), self.note(o)):
            self.carry(o, "config.json keys parc has no field for")


def load_json(o: Opt) -> dict | None:
    """The JSON object an option's value holds, None when it is none."""
    import json

    if o.value is None:
        return None
    try:
        v = json.loads(o.value)
    except ValueError:
        return None
    return v if isinstance(v, dict) else None
