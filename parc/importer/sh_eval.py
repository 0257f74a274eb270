"""What a launch script would run, worked out from its text alone: the script is never executed.

:func:`commands` walks the syntax tree of :mod:`parc.importer.sh_parse` as the shell would,
keeping variables, arrays, functions and the files the script writes itself (a config written
from a here-document, a template filled in with ``sed``), and records every external command
with its words as the shell would pass them (:class:`Command`). Nothing outside the file is
consulted: a variable the file never sets stays unknown (a ``${X:-default}`` takes its default,
noted), a ``$(...)`` is never run and stays unknown, a file test is read as true.

A branch on a value the file cannot know:

* on a variable that differs per node (launchers.toml ``per_node``: SKYPILOT_NODE_RANK,
  SLURM_NODEID, ...) both branches are followed, their commands tagged with the branch: the
  nodes of one launch (a Ray head and its workers);
* otherwise the condition is read with every unknown variable empty (the script run by itself),
  and where that cannot decide it either, the branch is not taken; a note says which;
* a test of an unknown value that guards an ``exit`` (``[[ -n $X ]] || exit 2``) is read as
  passing: the script is read as it runs where it is given that value. An ``exit`` the file's
  own values decide ends the reading, and a note names its line.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from parc.importer import sh_parse as P
from parc.importer import sh_tree as T
from parc.importer.sh_expand import Scope, arith, expand_all, expand_scalar, test
from parc.importer.sh_values import U, Arg, Text, join, known, lit, shown, unknown
from parc.importer.sh_wrappers import per_node, program, unwrap

MAX_STEPS = 100_000
MAX_FORKS = 64
SHELLS = {"bash", "sh", "zsh", "dash", "ksh"}
TESTS = {"[", "test", "[["}


@dataclass
class Command:
    """An external command the script runs: its words, the environment it is given (exported
    variables and prefix assignments), where it is, the per-node branches it is under, the
    wrappers around it (outermost first) and its standard input from a here-document."""
    args: list[Arg]
    env: dict
    line: int
    file: str
    tags: tuple = ()
    wrappers: list = field(default_factory=list)
    stdin: Text | None = None
    batch: dict | None = None     # the #SBATCH options of the batch script it runs in


class _Exit(Exception):
    pass


class _Return(Exception):
    pass


@dataclass
class _State:
    """The shell's state along one path through the script: variables, exports, branch tags."""
    scope: Scope
    exported: set
    tags: tuple = ()
    batch: dict | None = None

    def copy(self) -> "_State":
        s = Scope(dict(self.scope.vars), list(self.scope.positional) if self.scope.positional is not None else None)
        s.marks, s.notes, s.defaults_taken = self.scope.marks, self.scope.notes, self.scope.defaults_taken
        return _State(s, set(self.exported), self.tags, self.batch)


class Shell:
    """One run of the reader over a script (and the scripts it hands to ``bash -c``)."""

    def __init__(self, file: str, files: dict[str, str] | None = None, folder=None):
        self.file = file
        self.folder = folder                 # where the script's own files are read from
        self.files = dict(files or {})       # path -> text: what the script wrote, and given files
        self.funcs: dict = {}
        self.commands: list[Command] = []
        self.notes: list[str] = []
        self.steps = 0
        self.forks = 0
        self.depth = 0

    def shown_text(self, text: str) -> str:
        """A text the script wrote with each unknown part as it was written."""
        return shown(Scope.unmark(self, text))

    def read(self, path: str) -> str | None:
        """A file the script reads: one it wrote itself, else one beside it (never outside its folder)."""
        from pathlib import Path

        key = path[2:] if path.startswith("./") else path
        for k in (path, key):
            if k in self.files:
                return self.files[k]
        if self.folder is None or Path(key).is_absolute() or ".." in Path(key).parts or "\ue000" in key:
            return None
        p = Path(self.folder) / key
        try:
            return p.read_text(encoding="utf-8") if p.is_file() and p.stat().st_size < (1 << 20) else None
        except (OSError, UnicodeDecodeError):
            return None

    # --- entry -------------------------------------------------------------------------------
    def run(self, text: str, variables: dict, positional: list | None, exported=()) -> None:
        st = _State(Scope(variables, positional), set(exported) | set(variables))
        self.notes = st.scope.notes
        self.marks = st.scope.marks
        try:
            self.block(P.parse(text), st)
        except _Exit as e:
            if e.args:
                self.notes.append(f"the script exits at line {e.args[0]} (give the values it checks with --var)")
        for name, d in sorted(st.scope.defaults_taken.items()):
            self.notes.append(f"`{name}` is not set by the file: its default `{shown(d)}` is read")

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise T.ShellSyntax(f"the script takes more than {MAX_STEPS:,} steps to read")

    # --- statements --------------------------------------------------------------------------
    def block(self, nodes: list, st: _State):
        status = True
        for n in nodes:
            status = self.node(n, st)
        return status

    def node(self, n, st: _State):
        self.step()
        if isinstance(n, T.AndOr):
            status = self.pipeline(n.items[0], st)
            for prev, op, pl in zip(n.items, n.ops, n.items[1:]):
                if status is None and op == "||" and not _is_test(prev):
                    # `check || ray start ...`: a fallback after a command whose status is unknown
                    # is read for the commands it starts, its exit and variables kept apart
                    try:
                        self.pipeline(pl, st.copy())
                    except _Exit:
                        pass
                    status = True
                    continue
                if status is None and _is_test(prev) and self._exits(lambda s: self.pipeline(pl, s), st):
                    status = op == "||"   # a guard (`[[ -n $X ]] || exit 2`): read as passing
                    self.notes.append(f"line {n.line}: a test of what the file does not set guards an exit: "
                                      "read as passing")
                if status is None:   # a command's status is unknown: read as success; a test's, decided
                    status = self._clean([T.AndOr([prev], [], n.line)], st) if _is_test(prev) else True
                if (op == "&&" and status is False) or (op == "||" and status is True):
                    continue
                status = self.pipeline(pl, st)
            return status
        if isinstance(n, T.Simple):
            return self.simple(n, st)
        if isinstance(n, T.If):
            return self.if_(n.clauses, n.otherwise, st)
        if isinstance(n, T.For):
            return self.for_(n, st)
        if isinstance(n, T.While):   # a loop's body is read once (retries and waits around a launch)
            self.block(n.cond, st)
            return self.block(n.body, st)
        if isinstance(n, T.Case):
            return self.case(n, st)
        if isinstance(n, T.Group):
            if n.subshell:
                inner = st.copy()
                try:
                    return self.block(n.body, inner)
                except _Exit:
                    return None
            return self.block(n.body, st)
        if isinstance(n, T.FuncDef):
            self.funcs[n.name] = n.body
            return True
        if isinstance(n, T.Arith2):
            v = known(arith(n.text, st.scope))
            return None if v is None else v != "0"
        return None

    def pipeline(self, pl: T.Pipeline, st: _State):
        status = None
        for c in pl.commands:
            status = self.node(c, st) if not isinstance(c, T.Simple) else self.simple(c, st)
        if pl.negated and status is not None:
            status = not status
        return status

    def if_(self, clauses: list, otherwise, st: _State):
        cond, body = clauses[0]
        r = self.block(cond, st)
        rest = (lambda s: self.if_(clauses[1:], otherwise, s)) if clauses[1:] else (
            (lambda s: self.block(otherwise, s)) if otherwise else (lambda s: True))
        if r is None:
            text = _cond_text(cond)
            if any(v in text for v in per_node()) and self.forks < MAX_FORKS:
                self.forks += 1
                return self.fork(st, [((text, True), lambda s: self.block(body, s)), ((text, False), rest)])
            r = self._clean(cond, st)
            self.notes.append(f"line {cond[0].line if cond else 0}: `{text}` depends on what the file does not "
                              f"set; read as {'true' if r else 'false'}" + ("" if r is not None else " (undecided)"))
        return self.block(body, st) if r else rest(st)

    def _exits(self, run, st: _State) -> bool:
        """Whether a branch ends the script (read on a copy, its commands not kept)."""
        keep = (self.commands, self.notes)
        self.commands, self.notes = [], []
        try:
            run(st.copy())
        except _Exit:
            return True
        finally:
            self.commands, self.notes = keep
        return False

    def _clean(self, cond: list, st: _State) -> bool:
        """A condition read with every variable the file does not set taken as empty."""
        probe = st.copy()
        probe.scope.vars = {k: v for k, v in st.scope.vars.items()
                            if not (isinstance(v, tuple) and any(isinstance(p, U) for p in v))}
        keep = (self.commands, self.notes)
        self.commands, self.notes = [], []
        try:
            r = self.block(cond, probe)
        except _Exit:
            r = False
        finally:
            self.commands, self.notes = keep
        return bool(r)

    def fork(self, st: _State, branches: list):
        """Follow every branch (a node's role each) and carry on with what they agree on."""
        alive = []
        for tag, run in branches:
            s = st.copy()
            s.tags = st.tags + (tag,)
            try:
                run(s)
                alive.append(s)
            except _Exit:
                pass
        if not alive:
            raise _Exit
        merged = dict(alive[0].scope.vars)
        for s in alive[1:]:
            for k in set(merged) | set(s.scope.vars):
                if merged.get(k) != s.scope.vars.get(k):
                    merged[k] = unknown(f"${k}")
        st.scope.vars = merged
        return None

    def for_(self, n: T.For, st: _State):
        items = expand_all(n.words, st.scope, self.file) if n.words is not None else [
            Arg(t, f"${n.var}", n.line) for t in (st.scope.positional or [])]
        status = True
        for a in items[:256]:
            if n.var:
                st.scope.vars[n.var] = a.text
            status = self.block(n.body, st)
        return status

    def case(self, n: T.Case, st: _State):
        subject = known(expand_scalar(n.word, st.scope))
        for patterns, body in n.arms:
            for p in patterns:
                pat = known(expand_scalar(p, st.scope))
                if subject is None:
                    if pat == "*":
                        return self.block(body, st)
                    continue
                import fnmatch
                if pat is not None and fnmatch.fnmatchcase(subject, pat):
                    return self.block(body, st)
        return True

    # --- simple commands ---------------------------------------------------------------------
    def assign(self, a: T.Assign, st: _State) -> None:
        sc = st.scope
        if a.array is not None:
            items = [x.text for x in expand_all(a.array, sc, self.file)]
            old = sc.vars.get(a.name)
            old = old if isinstance(old, list) else ([old] if old else [])
            sc.vars[a.name] = (old + items) if a.append else items
            return
        v = expand_scalar(a.value, sc)
        old = sc.vars.get(a.name)
        if isinstance(old, list):
            if a.index.isdigit():
                i = int(a.index)
                old = old + [lit("")] * (i + 1 - len(old))
                old[i] = join([old[i], v]) if a.append else v
                sc.vars[a.name] = old
            else:
                sc.vars[a.name] = [join([old[0], v]) if a.append else v] + old[1:] if old else [v]
            return
        sc.vars[a.name] = join([old, v]) if a.append and isinstance(old, tuple) else v

    def simple(self, n: T.Simple, st: _State):
        sc = st.scope
        head = n.words[0].literal() if n.words else None
        if head in P.DECLARE or not n.words:
            for a in n.assigns:
                self.assign(a, st)
                if head == "export":
                    st.exported.add(a.name)
            if head == "export":
                for w in n.words[1:]:
                    if w.literal() and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", w.literal()):
                        st.exported.add(w.literal())
            return True
        if head == "[[":
            inner = [expand_scalar(w, sc) for w in n.words[1:]]
            return test(inner[:-1] if inner and known(inner[-1]) == "]]" else inner)
        args = expand_all(n.words, sc, self.file)
        prefix = {a.name: expand_scalar(a.value, sc) for a in n.assigns if a.value is not None}
        stdin = next((expand_scalar(r.heredoc, sc) for r in n.redirects if r.heredoc is not None), None)
        out = next((known(expand_scalar(r.target, sc)) for r in n.redirects
                    if r.op in (">", ">>", ">|") and r.target is not None), None)
        if not args:
            return True
        return self.run_args(args, st, prefix, stdin, out, n.line)

    def run_args(self, args: list[Arg], st: _State, prefix: dict, stdin, out, line: int, wrappers=()):
        from parc.importer.sh_builtins import builtin

        name = program(args[0])
        if name in self.funcs and not wrappers:
            return self.call(name, args, st)
        handled, status = builtin(self, name, args, st, stdin, out, line)
        if handled:
            return status
        inner = unwrap(args)
        if inner is not None and inner[0]:
            words, w = inner
            return self.run_args(words, st, {**prefix, **w["env"]}, stdin, out, line, (*wrappers, w))
        if name in SHELLS:
            at = next((i for i in range(1, min(len(args), 4)) if re.fullmatch(r"-[a-z]*c", args[i].value or "")), 0)
            if at and at + 1 < len(args) and all((a.value or "").startswith("-") for a in args[1:at]):
                return self.subscript(args[at + 1], args[at + 2:], st, prefix, wrappers)
        if name == "sbatch" and stdin is not None:
            return self.batch(stdin, st, wrappers, line)
        env = {k: v for k, v in st.scope.vars.items() if k in st.exported and isinstance(v, tuple)}
        env.update(prefix)
        self.commands.append(Command(args, env, line, self.file, st.tags, list(wrappers), stdin, st.batch))
        return None

    def call(self, name: str, args: list[Arg], st: _State):
        self.depth += 1
        if self.depth > 32:
            raise T.ShellSyntax(f"the function `{name}` calls itself more than 32 deep")
        saved = st.scope.positional
        st.scope.positional = [a.text for a in args[1:]]
        try:
            return self.node(self.funcs[name], st)
        except _Return:
            return True
        finally:
            st.scope.positional = saved
            self.depth -= 1

    def subscript(self, code: Arg, rest: list[Arg], st: _State, prefix: dict, wrappers) -> None:
        """``bash -c STRING``: the string read as a script of its own, run under the same wrappers."""
        inner = st.copy()
        inner.scope.vars.update(prefix)
        inner.exported |= set(prefix)
        inner.scope.positional = [a.text for a in rest[1:]]
        for c in self._script(inner.scope.mark(code.text), inner):
            c.wrappers = list(wrappers) + c.wrappers
            if c.line < code.line:
                c.line = code.line
        return None

    def _script(self, text: str, inner: _State) -> list:
        """The commands a script read inside this one runs (its ``exit`` ends only it)."""
        keep = len(self.commands)
        try:
            self.block(P.parse(text), inner)
        except _Exit:
            pass
        return self.commands[keep:]

    def batch(self, body: Text, st: _State, wrappers, line: int) -> None:
        """``sbatch <<EOF``: the batch script, its #SBATCH options and the SLURM_* variables they give."""
        from parc.importer.slurm import sbatch_options, slurm_env

        text = st.scope.mark(body)
        opts = sbatch_options(shown(body))
        inner = st.copy()
        inner.batch = opts
        inner.scope.vars.update(slurm_env(opts))
        for c in self._script(text, inner):
            c.line = max(c.line + line, line)
        return None


def _is_test(pl: T.Pipeline) -> bool:
    c = pl.commands[0] if pl.commands else None
    return isinstance(c, T.Simple) and bool(c.words) and c.words[0].literal() in TESTS


def _cond_text(cond: list) -> str:
    out = []
    for n in cond:
        for pl in getattr(n, "items", []):
            for c in pl.commands:
                if isinstance(c, T.Simple):
                    out.append(" ".join(w.source() for w in c.words))
    return "; ".join(out)


def commands(text: str, file: str, variables: dict | None = None, positional: list | None = None,
             files: dict | None = None, batch: dict | None = None, folder=None) -> tuple[list[Command], list[str], "Shell"]:
    """(the commands ``text`` runs, notes on what was assumed, the files it wrote). ``variables``:
    what the file's surroundings set (a scheduler's variables, ``--var``), each a Text or a
    list of Text; ``positional``: the script's arguments (None: unknown)."""
    sh = Shell(file, files, folder)
    variables = dict(variables or {})
    st_vars = {k: (v if isinstance(v, (tuple, list)) else lit(str(v))) for k, v in variables.items()}
    if batch is not None:
        from parc.importer.slurm import slurm_env

        st_vars = {**slurm_env(batch), **st_vars}
    sh.run(text, st_vars, positional)
    for c in sh.commands:
        if batch is not None and c.batch is None:
            c.batch = batch
    return sh.commands, sh.notes, sh
