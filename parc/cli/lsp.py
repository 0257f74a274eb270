"""parc lsp: the language server editors start (diagnostics, hover, completion, fixes)."""
from __future__ import annotations

import sys

DESCRIPTION = """Run the Language Server Protocol server on stdin and stdout, for editors.

It reports every finding of `parc check` and `parc lint` as you type, with quick fixes for
those whose help names a change; hover shows a mesh degree's groups, link and bytes, a block's
memory per GPU and step time (or TTFT/TPOT), a preset's fields; completion offers blocks, keys,
presets, targets and values; go to definition follows `use`; formatting is `parc fmt`.
docs/editor.md sets it up in VS Code, Neovim and Helix. Needs pygls: pip install 'parc[lsp]'."""
EPILOG = """exit status: 0 when the client ends the session, 2 when pygls is not installed

examples:
  parc lsp            (started by the editor, not by hand)"""


def add_arguments(p):
    p.add_argument("--stdio", action="store_true",
                   help="speak over stdin and stdout (the default and only transport; editors pass it)")


def run(args) -> int:
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        print("parc lsp: the language server needs pygls; install it with `pip install 'parc[lsp]'`",
              file=sys.stderr)
        return 2
    from parc.lint.engine import lint_texts
    from parc.lint.fix import fix_text
    from parc.lsp.server import serve

    serve(lint_texts, fix_text)  # lsp/ and lint/ are siblings: the command hands the one to the other
    return 0
