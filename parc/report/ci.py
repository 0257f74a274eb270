"""The two CI formats together, for callers that want both: SARIF for code scanning and
GitHub workflow annotations (each lives in its own module under ``parc.report.diagnostics``)."""
from parc.report.diagnostics.github import (  # noqa: F401
    escape_data, escape_property, parse_github_line, render_github, render_github_line, unescape)
from parc.report.diagnostics.sarif import SARIF_SCHEMA, render_sarif, sarif_rules  # noqa: F401

__all__ = ["escape_data", "escape_property", "parse_github_line", "render_github", "render_github_line",
           "unescape", "SARIF_SCHEMA", "render_sarif", "sarif_rules"]
