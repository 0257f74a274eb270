"""The shell builtins and the few file-writing commands the importer's shell reader follows:
tests, ``exit``/``return``, ``unset``, ``shift``, ``set --``, ``eval``, and the files a script
writes for its engine (``cat <<EOF > config.json``, ``sed -e 's/a/b/g' template > config``).
Every other builtin that only prints or waits is read as doing nothing; ``source`` is not
followed (noted)."""
from __future__ import annotations

import re

from parc.importer.sh_expand import test
from parc.importer.sh_values import known, shown

QUIET = {"cd", "pushd", "popd", "echo", "printf", "read", "trap", "wait", "sleep", "ulimit", "umask", "shopt",
         "alias", "hash", "type", "which", "mkdir", "touch", "rm", "chmod", "chown", "ln", "cp", "mv", "tee",
         "date", "hostname", "nvidia-smi", "rocm-smi", "scontrol", "kill", "pkill", "sync", "printenv",
         "ls", "pwd", "clear", "logger", "dirname", "basename", "realpath", "readlink"}


def builtin(sh, name: str | None, args: list, st, stdin, out: str | None, line: int) -> tuple[bool, object]:
    """(handled, exit status) for a builtin; (False, None) for a command to record."""
    from parc.importer.sh_eval import _Exit, _Return

    if name is None:
        return False, None
    words = [a.text for a in args[1:]]
    if name in ("[", "test"):
        return True, test(words[:-1] if name == "[" and words and known(words[-1]) == "]" else words)
    if name in ("true", ":"):
        return True, True
    if name == "false":
        return True, False
    if name == "exit":
        raise _Exit(line)
    if name == "return":
        raise _Return
    if name == "unset":
        for w in words:
            st.scope.vars.pop(known(w) or "", None)
        return True, True
    if name == "shift":
        n = int(known(words[0]) or 1) if words and (known(words[0]) or "1").isdigit() else 1
        if st.scope.positional is not None:
            st.scope.positional = st.scope.positional[n:]
        return True, True
    if name == "set":
        if words and known(words[0]) == "--":
            st.scope.positional = words[1:]
        return True, True
    if name in ("source", "."):
        sh.notes.append(f"line {line}: `{name} {shown(words[0]) if words else ''}` is not followed: the variables "
                        "it sets are unknown here")
        return True, None
    if name == "eval":
        return True, _eval(sh, args, st)
    if name == "cat" and stdin is not None and out:
        sh.files[out] = st.scope.mark(stdin)
        return True, True
    if name == "sed" and out:
        return True, _sed(sh, args, st, out)
    if name in QUIET:
        return True, None
    return False, None


def _eval(sh, args, st):
    from parc.importer import sh_parse as P

    text = " ".join(st.scope.mark(a.text) for a in args[1:])
    sh.block(P.parse(text), st)
    return None


def _sed(sh, args, st, out: str):
    """``sed -e 's/A/B/g' ... FILE > OUT``: the substitutions applied to a file the script wrote or
    was given (its text known); any other sed program leaves OUT unknown."""
    subs, files = [], []
    words = [a.value for a in args[1:]]
    i = 0
    while i < len(words):
        w = words[i]
        if w in ("-e", "--expression") and i + 1 < len(words):
            subs.append(words[i + 1])
            i += 2
        elif w is not None and w.startswith("-"):
            i += 1
        else:
            if not subs and w is not None:
                subs.append(w)
            elif w is not None:
                files.append(w)
            i += 1
    text = sh.read(files[0]) if len(files) == 1 else None
    if text is None or any(s is None for s in subs):
        sh.notes.append(f"`sed ... > {out}`: the file it writes is not known to the importer")
        return None
    for s in subs:
        m = re.fullmatch(r"s(.)(.*?)(?<!\\)\1(.*?)(?<!\\)\1(g?)", s, re.S)
        if not m:
            sh.notes.append(f"`sed '{s}'`: only s/A/B/ substitutions are read")
            return None
        pat = m.group(2).replace("\\" + m.group(1), m.group(1))
        rep = m.group(3).replace("\\" + m.group(1), m.group(1))
        try:
            text = re.sub(_basic_re(pat), lambda _m: rep, text, count=0 if m.group(4) else 1)
        except re.error:
            return None
    sh.files[out] = text
    return True


def _basic_re(p: str) -> str:
    """A sed basic regular expression as Python's: ``\\{``, ``\\}``, ``\\(`` are the operators, the
    bare characters literal."""
    out, i = [], 0
    while i < len(p):
        c = p[i]
        if c == "\\" and i + 1 < len(p):
            n = p[i + 1]
            out.append(n if n in "{}()|+?" else "\\" + n)
            i += 2
            continue
        out.append(re.escape(c) if c in "{}()|+?$" and not (c == "$" and i == len(p) - 1) else c)
        i += 1
    return "".join(out)

