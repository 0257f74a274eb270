"""The corpus read back by ``parc import``: each original imported (with the cluster of its
``plan.par``, which no launch states, and the arguments and environment its entry runs it with),
checked for the entry's target, compiled, and its launch compared with the original's by the
corpus's own readers (``tests/support/wild.py``)."""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from support import wild


def import_entry(entry: wild.Entry, box: Path, **over):
    """The :class:`parc.importer.Imported` of an entry's original files (copied into ``box``
    below their source header, as they were published)."""
    from parc.importer import Options, import_files

    o = entry.original
    names = o["file"] if isinstance(o["file"], list) else [o["file"]]
    box.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names + [src for src in o.get("place", {})]:
        p = box / Path(name).name
        if not p.exists():
            p.write_text(wild.original_text(entry.folder / name), encoding="utf-8")
        if name in names:
            paths.append(str(p))
    for src, dst in o.get("place", {}).items():
        q = box / dst
        q.parent.mkdir(parents=True, exist_ok=True)
        q.write_text(wild.original_text(entry.folder / src), encoding="utf-8")
    variables = {str(i): a for i, a in enumerate(o.get("args", []), 1)}
    variables.update(o.get("env", {}))
    variables.setdefault("PWD", str(box))      # the directory the original runs in (as the corpus runs it)
    if "select" in o and len(o["select"]) == 1:     # the one launch of several that states the plan
        over.setdefault("launch", o["select"][0] + 1)
    over.setdefault("cluster", str(entry.par))
    opts = Options(variables=variables, **over)
    return import_files(paths, opts)


def filled(text: str) -> str:
    """The imported spec with each documentation placeholder (``<client_entry.py>`` in a command
    copied from docs, imported as ``unknown("<client_entry.py>")``) filled in with its own name, as
    the user does who runs it: the script the docs mean is the one the placeholder names."""
    return re.sub(r'unknown\("<([^"<>]+)>"\)', lambda m: '"' + m.group(1) + '"', text)


def given(text: str, par: str) -> str:
    """The imported spec with each placeholder the files cannot fill (what a training script's own
    code decides: its parallel groups, its batch; a TrainJob runtime's command no file holds)
    replaced by the value of the same key in the same block of the entry's hand-written plan.par,
    as the user does who knows the script."""
    def block_of(src: str, at: int) -> str | None:
        heads = list(re.finditer(r"(?m)^(\w+(?: \w+)?)(?: \"[^\"]*\")? \{", src[:at]))
        return heads[-1].group(1) if heads else None

    def fill(m):
        block, key = block_of(text, m.start()), m.group(2)
        body = re.search(rf"(?ms)^{re.escape(block)}(?: \"[^\"]*\")? \{{(.*?)^}}", par) if block else None
        v = re.search(rf"(?m)^\s*{key}\s*=\s*(.+?)\s*(#.*)?$", body.group(1)) if body else None
        return f"{m.group(1)}{key} = {v.group(1)}" if v else m.group(0)
    return re.sub(r'(?m)^(\s*)(\w+)\s*=\s*unknown\("[^"\n]*"\)', fill, text)


def round_trip(entry: wild.Entry):
    """(the imported spec's text, its check result, the differences between the original's launch
    and the one parc compiles from the imported spec; None where it leaves no plan)."""
    from parc import targets
    from parc.api import check_file

    tmp = Path(tempfile.mkdtemp(prefix="parc-import-"))
    try:
        imp = import_entry(entry, tmp / "in")
        model = re.search(r"(?ms)^model .*?^}", imp.text)
        if model and "unknown(" in model.group(0):
            # a model no preset names (its config.json is not in the launch): the entry's model block
            imp = import_entry(entry, tmp / "in", model=str(entry.par))
        spec = tmp / "imported.par"
        text = filled(imp.text)
        if entry.target == "trainjob":      # a plain torchrun script: its code is not read
            text = given(text, entry.par.read_text(encoding="utf-8"))
        spec.write_text(text, encoding="utf-8")
        r = check_file(str(spec), [entry.target], root=wild.ROOT)
        if r.plan is None or r.errors:
            return imp, r, None
        original = wild.original_launches(entry, tmp)
        emitted = wild.emitted_launches(entry.target, targets.get(entry.target).build(r.plan), tmp)
        return imp, r, wild.compare(original, emitted)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
