"""Every piece of .par a user may paste parses: the code in every `help:` that the fixtures and
examples trigger (each spec under every target, and with one thing broken), and the code in the
README and docs/*.md; a whole spec in the docs checks as the text beside it says. Statements
that share a line are separated by `;`, as the grammar wants (pasted without it they are P001)."""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from parc.api import check_file
from parc.language.diagnostics import ParcError
from parc.language.parser import parse_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# a backticked snippet that is .par (an assignment, a block, a placement rule), not a command
_CODE = re.compile(r"^[A-Za-z_][\w.]*\s*=\s*\S|^[A-Za-z_]\w*( \"[^\"]*\"| \w+)? \{|^[a-z]+ on [a-z_]+$")
# commands, JSON and TOML, Python, a field named by its path (`serve.dp_attention = true`)
_NOT_PAR = re.compile(r"^(parc|pip|python|torchrun|vllm|sglang|export|kubectl|git|sky|srun|sbatch|deepspeed|"
                      r"NCCL_|CUDA_|HIP_|--|-)|==|://|\$\{|\bfor\b|^\w+\(|^\w+(\.\w+)+\(|=[^ ]|^\{\"|"
                      r"= \{|^\w+\.\w+(\.\w+)* =|[·×⌈⌉≥≤]|//")   # ... and math: `ep = dp · tp`
_ELIDED = re.compile(r"\.\.\.|…")   # a placeholder for what the text leaves out


def is_par(snippet: str) -> bool:
    s = snippet.strip()
    return bool(_CODE.search(s)) and not _NOT_PAR.search(s)


def parses(snippet: str) -> str | None:
    """None when ``snippet`` parses as a spec, the statements of a block, or a value (what `...`
    leaves out left out); else why not."""
    first = None
    snippet = _ELIDED.sub("", re.sub(r"=\s*(\.\.\.|…)", "= x", snippet))   # `key = ...`: any value
    snippet = re.sub(r"(\w)\*", r"\1x", snippet)   # `deepep_*`: any name of that family
    for text in (snippet, "x {\n" + snippet + "\n}", "x = " + snippet):
        try:
            parse_text(text + "\n", "<snippet>")
            return None
        except ParcError as e:
            first = first or e.diagnostic.message
    return first


def code_spans(text: str) -> list[str]:
    """The inline code of a text (`...`, which may wrap onto the next line), outside fenced blocks."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [m.replace("\n", " ") for m in re.findall(r"`([^`]+)`", text) if "\n\n" not in m]


# --- the help texts --------------------------------------------------------------------------------

def _specs() -> list[Path]:
    return sorted([*EXAMPLES.rglob("*.par"), *(ROOT / "tests" / "data").rglob("*.par")])


_BREAKS = [("mesh {", "mesh {\n  tp = 3\n"), ("mesh {", "mesh {\n  tp = 6\n"), ("mesh {", "mesh {\n  pp = 3\n"),
           ("mesh {", "mesh {\n  ep = 3\n"), ("mesh {", "mesh {\n  cp = 3\n"), ("global_batch", "global_batch = 7 #"),
           ("zero", "zero = 0 #"), ("micro_batch", "micro_batch = 64 #"), ("max_model_len", "max_model_len = 1048576 #"),
           ("= h100_sxm", "= h100"), ("from = llama3_", "from = llama_"), ("cluster", "clusterr"), ("model", "modell"),
           ("pipeline", "pipeline = 1F1B #"), ("recompute", "recompute = fulll #"), ("{", "{{")]


@lru_cache(maxsize=1)
def helps() -> list[tuple[str, str, str]]:
    """(where, code, help) of every diagnostic the specs give: as written, under each target,
    and with one thing broken."""
    from parc.model.targets import names

    out = []
    targets = [t for t in names() if t != "json"]
    for path in _specs():
        text = path.read_text()
        variants = [(str(path.relative_to(ROOT)), text, ())]
        if path.parent == EXAMPLES:   # the examples under every target: each target's own rules
            variants += [(f"{path.name} --target {t}", text, (t,)) for t in targets]
        for needle, new in _BREAKS:
            if needle in text:
                variants.append((f"{path.name} with {new.strip()}", text.replace(needle, new, 1), ()))
        for where, body, tg in variants:
            try:
                r = check_file(path, tg, text=body)
            except OSError:
                continue
            out += [(where, d.code, d.help) for d in r.diagnostics if d.help]
    return out


def test_the_corpus_reaches_every_family():
    codes = {code for _, code, _ in helps()}
    assert {"P0", "P1", "P2", "P3", "P4", "P5", "P6"} <= {c[:2] for c in codes}, codes
    assert {"P001", "P010", "P016", "P018", "P102", "P201", "P401", "P602"} <= codes, sorted(codes)


def test_every_code_in_a_help_parses():
    bad = {}
    for where, code, text in helps():
        for snippet in code_spans(text):
            if is_par(snippet) and (why := parses(snippet)):
                bad.setdefault((code, snippet), (where, why))
    assert not bad, "\n".join(f"{c}: `{s}` ({w}): {why}" for (c, s), (w, why) in sorted(bad.items()))


# --- the docs --------------------------------------------------------------------------------------

def _fences(path: Path) -> list[tuple[int, str, str]]:
    """(line, text before, code) of each ```par block."""
    text = path.read_text()
    out = []
    for m in re.finditer(r"```par\n(.*?)```", text, re.S):
        line = text.count("\n", 0, m.start()) + 1
        out.append((line, text[max(0, m.start() - 400):m.start()], m.group(1)))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_code_in_the_docs_parses(doc):
    bad = [f"`{s}`: {why}" for s in code_spans(doc.read_text()) if is_par(s) and (why := parses(s))]
    bad += [f"line {ln}: {why}" for ln, _, code in _fences(doc) if (why := parses(code))]
    assert not bad, "\n".join(bad)


def _whole(code: str) -> bool:
    return all(re.search(rf"^\s*{k}\b", code, re.M) for k in ("model", "mesh")) and (
        "cluster" in code or "use " in code)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_a_whole_spec_in_the_docs_checks_as_the_text_says(doc, tmp_path):
    for ln, before, code in _fences(doc):
        if not _whole(code):
            continue
        said = set(re.findall(r"\bP\d{3}\b", before.rsplit("\n\n", 1)[-1]))
        spec = EXAMPLES / f".doc-{doc.stem}-{ln}.par"   # beside the examples, whose clusters it uses
        spec.write_text(code)
        try:
            r = check_file(spec, root=ROOT)
        finally:
            spec.unlink()
        errors = {d.code for d in r.errors}
        assert errors == said, f"{doc.name}:{ln}: errors {sorted(errors)}, the text says {sorted(said)}"
