"""The files ``parc import`` reads, each told apart by its name and contents: a shell script or a
text of command lines (a Slurm batch script among them), a Kubernetes, LeaderWorkerSet, TrainJob
or SkyPilot YAML file, a torchtitan TOML, a DeepSpeed JSON config, a DeepSpeed hostfile. Each
becomes a :class:`Source`: the engine launches it runs and what it says about the cluster."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from parc.importer.launches import Launch, recognize

MAX_BYTES = 1 << 20
_HOST_LINE = re.compile(r"\s*[A-Za-z0-9_.:-]+\s+slots\s*=\s*\d+\s*(#.*)?$")


class ImportError_(ValueError):
    """A file the importer cannot read (the message says why); ``parc import`` exits 2."""


@dataclass
class Source:
    """One file read: its kind, the launches it holds and the cluster facts it states."""
    path: str
    kind: str                      # shell, slurm, lws, skypilot, kubernetes, trainjob, toml, json, hostfile
    launches: list[Launch] = field(default_factory=list)
    facts: dict = field(default_factory=dict)      # cluster facts: name -> (value, note)
    notes: list[str] = field(default_factory=list)
    warnings: list[tuple[str, str, str]] = field(default_factory=list)   # (code, where, what): Report.warnings
    data: object = None            # a TOML, JSON or hostfile's contents
    folder: str = "."
    scheduler: dict | None = None  # {"target": "lws", "keys": {...}}: the scheduler the file is for

    @property
    def name(self) -> str:
        return Path(self.path).name


def read_text(path: str) -> str:
    p = Path(path)
    try:
        if not p.is_file():
            raise ImportError_(f"{path}: not a regular file")
        if p.stat().st_size > MAX_BYTES:
            raise ImportError_(f"{path}: larger than {MAX_BYTES // 1024} KiB")
        data = p.read_bytes()
    except OSError as e:
        raise ImportError_(f"{path}: {e.strerror or e}") from None
    if b"\0" in data:
        raise ImportError_(f"{path}: a binary file (it holds NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportError_(f"{path}: not UTF-8 text") from None


def kind_of(path: str, text: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".toml":
        return "toml"
    if suffix == ".json":
        return "json"
    if suffix in (".yaml", ".yml"):
        return "yaml"
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if lines and all(_HOST_LINE.match(ln) for ln in lines):
        return "hostfile"
    if re.search(r"(?m)^\s*(apiVersion|kind|resources|run|num_nodes)\s*:", text) and not re.search(
            r"(?m)^\s*(vllm|python|torchrun|deepspeed|srun|sglang)\b", text):
        return "yaml"
    return "slurm" if re.search(r"(?m)^#SBATCH\s", text) else "shell"


def docs_text(text: str) -> str:
    """A command as docs print it, made a script: a ``\\ # comment`` after an option (the line
    continued, then a comment, which a shell would read as an escaped blank and the end of the
    command) is read as the continuation it means."""
    return "\n".join(re.sub(r"\\[ \t]+#.*$", "\\\\", line) for line in text.splitlines()) + "\n"


def read_source(path: str, variables: dict, positional: list | None) -> Source:
    text = read_text(path)
    kind = kind_of(path, text)
    folder = str(Path(path).resolve().parent)
    src = Source(path, kind, folder=folder)
    if kind == "toml":
        import tomllib

        try:
            src.data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ImportError_(f"{path}: not TOML ({e})") from None
    elif kind == "json":
        import json

        try:
            src.data = json.loads(text)
        except ValueError as e:
            raise ImportError_(f"{path}: not JSON ({e})") from None
    elif kind == "hostfile":
        src.data = hosts(text)
    elif kind == "yaml":
        from parc.importer.yamlfiles import read_yaml

        read_yaml(src, text, variables)
    else:
        shell_launches(src, text, variables, positional)
    return src


def shell_launches(src: Source, text: str, variables: dict, positional: list | None, extra_env: dict | None = None,
                   tags: tuple = (), facts: dict | None = None) -> list[Launch]:
    """The launches a script runs, appended to ``src`` (with the scheduler's ``extra_env``)."""
    from parc.importer.sh_eval import commands
    from parc.importer.sh_tree import ShellSyntax
    from parc.importer.slurm import sbatch_options

    batch = sbatch_options(text) if src.kind == "slurm" else None
    try:
        cmds, notes, reader = commands(docs_text(text), src.name, {**(extra_env or {}), **variables}, positional,
                                       batch=batch, folder=src.folder)
    except ShellSyntax as e:
        raise ImportError_(f"{src.path}: {e}") from None
    src.notes += [f"{src.name}: {n}" for n in notes]
    out = []
    for c in cmds:
        la = recognize(c, reader)
        if la is not None:
            la.tags = tags + la.tags
            la.facts = dict(facts or {})
            out.append(la)
    if batch is not None:
        from parc.importer.cluster import slurm_facts

        src.facts.update(slurm_facts(batch, src.name))
        keys = {k[len("slurm."):]: v for k, v in src.facts.items() if k.startswith("slurm.")}
        src.scheduler = {"target": "slurm", "keys": keys, "what": "job"}
    src.launches += out
    return out


def hosts(text: str) -> list[tuple[str, int]]:
    """A DeepSpeed hostfile (``HOST slots=N`` a line, deepspeed/launcher/runner.py _parse_hostfile)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"(\S+)\s+slots\s*=\s*(\d+)$", line)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


def read_beside(la: Launch, path: str | None) -> str | None:
    """A file a launch names (vLLM's --config, DeepSpeed's config, a hostfile, a torchtitan TOML):
    one its script wrote, else one beside the file the launch is in (never outside that folder)."""
    if not path:
        return None
    reader = la.reader
    if reader is not None and hasattr(reader, "read"):
        text = reader.read(path)
        return reader.shown_text(text) if text is not None else None
    return None
