"""parc schema: the JSON Schema of the resolved plan (what `parc compile --target json` writes)."""
from __future__ import annotations

import sys

DESCRIPTION = """Print the JSON Schema (draft 2020-12) of the resolved plan: the document that
`parc compile --target json` writes and `parc run` reads back. Editors and CI can validate
plan files against it."""
EPILOG = """example:
  parc schema -o plan.schema.json"""

SCHEMA_ID = "https://github.com/parc-dev/parc/schemas/plan.schema.json"


def add_arguments(p):
    p.add_argument("-o", "--output", metavar="FILE", help="write the schema to FILE instead of stdout")
    p.add_argument("--compact", action="store_true", help="one line, no indentation")


def schema() -> dict:
    from parc import __version__
    from parc.model.plan import plan_json_schema

    body = plan_json_schema()
    out = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
           "title": "parc resolved plan",
           "description": f"A resolved parallelism plan as parc {__version__} writes it "
                          "(`parc compile --target json`); bytes are bytes, rates are per second."}
    out.update({k: v for k, v in body.items() if k != "title"})
    return out


def run(args) -> int:
    import json

    text = json.dumps(schema(), indent=None if args.compact else 2, sort_keys=False) + "\n"
    if args.output:
        from parc.cli.output import write_output

        return write_output(args.output, text)
    sys.stdout.write(text)
    return 0
