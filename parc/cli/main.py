"""The `parc` command line. Each command lives in its own module under parc.cli and is
imported only when it runs, so `parc check` pays for nothing it does not use."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from parc import __version__

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("parc.cli.check", "parse and validate specs"),
    "lint": ("parc.cli.lint", "check plus style and advice, for pull-request CI"),
    "fmt": ("parc.cli.fmt", "rewrite specs in the canonical layout"),
    "explain": ("parc.cli.explain", "show the math: rank map, memory, communication, step time"),
    "compile": ("parc.cli.compile", "emit the launch plan for a target"),
    "import": ("parc.cli.import_", "read an existing launch (script, YAML, TOML, JSON) into a spec"),
    "run": ("parc.cli.run", "execute the plan in PyTorch (or rehearse it on this CPU)"),
    "plan": ("parc.cli.plan", "search every valid plan for a model on a cluster"),
    "calibrate": ("parc.cli.calibrate", "fit the cluster's efficiency factors to measured runs"),
    "doctor": ("parc.cli.doctor", "check this node against a spec before the launch (GPUs, versions, network)"),
    "diff": ("parc.cli.diff", "what a change to a spec does to the plan"),
    "draw": ("parc.cli.draw", "draw the mesh, the schedule or memory as SVG/PNG"),
    "topo": ("parc.cli.topo", "write a node's topology (nvidia-smi / rocm-smi) as a cluster block"),
    "presets": ("parc.cli.presets", "list the built-in model and GPU presets"),
    "rules": ("parc.cli.rules", "list the diagnostic codes, or explain one"),
    "schema": ("parc.cli.schema", "print the JSON Schema of the resolved plan"),
    "completion": ("parc.cli.completion", "print a shell completion script"),
    "lsp": ("parc.cli.lsp", "run the language server for editors (stdio; needs the `lsp` extra)"),
}

EPILOG = """examples:
  parc check examples/llama3-70b-serve.par
  parc compile examples/llama3-70b-serve.par --target vllm
  parc explain examples/llama3-70b-train.par

Run `parc COMMAND --help` for a command's options."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with one line, never a traceback
        self.print_usage(sys.stderr)
        sys.stderr.write(f"parc: error: {message}\n")
        raise SystemExit(2)


def _top_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="parc", description="A compiler for parallelism plans (.par specs).",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter, add_help=False)
    p.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    p.add_argument("--version", action="version", version=f"parc {__version__}")
    lines = "\n".join(f"  {n:<11} {h}" for n, (_, h) in COMMANDS.items())
    p.usage = "parc [--version] COMMAND [ARGS...]"
    p.description = "A compiler for parallelism plans (.par specs).\n\ncommands:\n" + lines
    return p


def command_parser(name: str):
    mod_name, help_ = COMMANDS[name]
    mod = importlib.import_module(mod_name)
    p = _Parser(prog=f"parc {name}", description=getattr(mod, "DESCRIPTION", help_),
                epilog=getattr(mod, "EPILOG", None), formatter_class=argparse.RawDescriptionHelpFormatter)
    mod.add_arguments(p)
    return mod, p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    top = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        top.print_help()
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"parc {__version__}")
        return 0
    name = argv[0]
    if name not in COMMANDS:
        import difflib

        near = difflib.get_close_matches(name, COMMANDS, n=1)
        sys.stderr.write(f"parc: unknown command `{name}`" + (f"; did you mean `{near[0]}`?" if near else "")
                         + "\nrun `parc --help` for the list\n")
        return 2
    try:
        mod, p = command_parser(name)
        args = p.parse_args(argv[1:])
        return int(mod.run(args) or 0)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt:
        sys.stderr.write("parc: interrupted\n")
        return 130
    except BrokenPipeError:
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except Exception as e:  # never a traceback for a user; PARC_DEBUG=1 shows it
        if os.environ.get("PARC_DEBUG"):
            raise
        sys.stderr.write(f"parc: internal error in `{name}`: {type(e).__name__}: {e}\n"
                         "please report it with the spec that caused it (PARC_DEBUG=1 shows the traceback)\n")
        return 2
