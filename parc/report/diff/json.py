"""``parc diff --format json``: both estimates, their errors, the settings and metrics compared."""
from __future__ import annotations


def render_json(old, new, changes: list[dict], rows: list[dict]) -> str:
    """``old`` and ``new`` have ``name``, ``estimate`` and ``errors`` (diagnostics)."""
    import json

    return json.dumps({"ok": True, "old": {"file": old.name, "estimate": old.estimate,
                               "errors": [d.to_json() for d in old.errors]},
                       "new": {"file": new.name, "estimate": new.estimate,
                               "errors": [d.to_json() for d in new.errors]},
                       "changes": changes, "metrics": rows}, indent=2) + "\n"
