"""What ``parc fmt --diff`` prints: a unified diff from a spec to its formatted text."""
from __future__ import annotations

import difflib

from parc.printable import printable


def render_diff(old: str, new: str, name: str, stdin: bool = False) -> str:
    """The diff headed by the file's name (twice for standard input, which has no second
    version on disk), or marked original and formatted."""
    a, b = (name, name) if stdin else (f"{name} (original)", f"{name} (formatted)")
    return printable("".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), a, b)))
