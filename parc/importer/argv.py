"""An engine's command line read through its target's flags.toml: each option the table names
(every spelling of every release, aliases too) becomes its entry with its value; every other
option is kept with the words it spans, for ``extra_args``."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from parc.importer.sh_values import Arg
from parc.model.targets import flag_table

_NUMBER = re.compile(r"-\d")
# each launcher's switches (torch/distributed/run.py; deepspeed/launcher/runner.py parse_args):
# every other option of theirs takes a value
SWITCHES = {"torchrun": {"--standalone", "--no-python", "--no_python", "--run-path", "--run_path", "-m", "--module"},
            "deepspeed": {"--no_python", "--no_local_rank", "--module", "--force_multi", "--save_pid",
                          "--bind_cores_to_rank", "--no_ssh_check", "--no_ssh", "--elastic_training",
                          "--enable_each_rank_log", "--autotuning"}}


@dataclass
class Opt:
    """One option as written: its flags.toml entry (``what`` None: parc has none), its spelling,
    its value words and every word it spans."""
    what: str | None
    spelled: str
    values: list[Arg]
    words: list[Arg]
    entry: dict = field(default_factory=dict)
    sub: str = ""              # vLLM's --eplb-config.window_size: the JSON key

    @property
    def value(self) -> str | None:
        if len(self.values) != 1:
            return None
        return self.values[0].value

    @property
    def line(self) -> int:
        return self.words[0].line if self.words else 0

    def source(self) -> str:
        # a word from a variable shows the variable (`--tp $TP`); one of an array's words, its value
        return " ".join(w.src if ("[@]" not in w.src and "[*]" not in w.src)
                        and (w.src.startswith("$") or "$" in w.src and w.value is None) else w.shown
                        for w in self.words)


@lru_cache(maxsize=None)
def index(target: str) -> dict[str, tuple[str, dict]]:
    """Every spelling in target's flags.toml -> (what, entry)."""
    out: dict = {}
    for what, entry in flag_table(target).items():
        if entry.get("form") == "config":
            continue
        for n in entry["names"]:
            out.setdefault(n["name"], (what, entry))
    return out


def _option(word: str | None) -> bool:
    return bool(word) and word.startswith("-") and len(word) > 1 and not _NUMBER.match(word)


def parse(target: str, args: list[Arg], underscores: bool = False) -> tuple[list[Opt], list[Arg]]:
    """(options in order, positional words) of ``args`` for ``target``; ``underscores``: the
    engine also reads ``--a_b`` as ``--a-b`` (vLLM's FlexibleArgumentParser)."""
    table = index(target)
    opts, positional = [], []
    i = 0
    while i < len(args):
        name, eq, inline = split_eq(args[i])
        if not _option(name) or name == "--":
            positional.append(args[i])
            i += 1
            continue
        found = table.get(name)
        if found is None and underscores and name.startswith("--"):
            found = table.get("--" + name[2:].replace("_", "-"))
        sub = ""
        if found is None and "." in name:            # --eplb-config.window_size 1000
            head, _, sub = name.partition(".")
            found = table.get(head)
            if found is None or found[1].get("takes") != "json":
                found, sub = None, ""
        takes = found[1].get("takes", "value") if found else None
        j = i + 1
        values: list[Arg] = []
        if eq:
            values = [inline]
        elif takes in ("value", "json"):
            if j < len(args):
                values, j = [args[j]], j + 1
        elif takes in ("words", None):
            while j < len(args) and not _option(args[j].value) and args[j].value != "--":
                values.append(args[j])
                j += 1
        opts.append(Opt(found[0] if found else None, name, values, args[i:j], found[1] if found else {}, sub))
        i = j
    return opts, positional


def split_eq(a: Arg) -> tuple[str | None, bool, Arg | None]:
    """(option name, whether ``=`` follows it, the value after ``=``) of a word ``--name=value``
    whose name is known text (the value may hold unknown parts); (None, False, None) otherwise."""
    first = a.text[0] if a.text and isinstance(a.text[0], str) else None
    if first is None or not first.startswith("-"):
        return a.value, False, None
    if "=" not in first:
        return (first, False, None) if len(a.text) == 1 else (None, False, None)
    name, _, rest = first.partition("=")
    text = ((rest,) if rest else ()) + tuple(a.text[1:])
    return name, True, Arg(text, a.src, a.line, a.file)


def launcher_split(name: str, rest: list[Arg]) -> tuple[list[Arg], Arg | None, Arg | None, list[Arg]]:
    """A launcher's command line cut into (its own option words, the ``-m`` module, the script,
    the script's or module's arguments)."""
    switches = SWITCHES.get(name, set())
    i = 0
    while i < len(rest):
        key, eq, _ = split_eq(rest[i])
        if not _option(key):
            break
        if key in ("-m", "--module"):
            return rest[:i + 1], rest[i + 1] if i + 1 < len(rest) else None, None, rest[i + 2:]
        i += 1 if eq or key in switches else 2
    if i < len(rest):
        return rest[:i], None, rest[i], rest[i + 1:]
    return rest, None, None, []
