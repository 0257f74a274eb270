"""The protocol side of ``parc lsp``: pygls over stdio, parc's answers turned into LSP types.

Each open spec is linted on open and on every change (its imports read from the open buffers
first, so an unsaved cluster file counts); when a file changes, every open spec that read it
is linted again. Ranges come from the diagnostics' offsets, counted in the units the client
asked for (UTF-16 by default). A diagnostic in an imported file is shown on the `use` line
that brings it in.
"""
from __future__ import annotations

import os

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path

from parc import __version__
from parc.language.diagnostics import ERROR, WARNING, Diagnostic, Span
from parc.lsp import analysis as A

_SEVERITY = {ERROR: T.DiagnosticSeverity.Error, WARNING: T.DiagnosticSeverity.Warning}


class Positions:
    """Offsets of one text as LSP positions, in the client's units."""

    def __init__(self, text: str, codec):
        self.text, self.codec = text, codec
        self.starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]

    def position(self, offset: int) -> T.Position:
        from bisect import bisect_right

        offset = max(0, min(offset, len(self.text)))
        line = bisect_right(self.starts, offset) - 1
        return T.Position(line, self.codec.client_num_units(self.text[self.starts[line]:offset]))

    def range(self, start: int, end: int) -> T.Range:
        return T.Range(self.position(start), self.position(max(start, end)))

    def offset(self, pos: T.Position) -> int:
        if pos.line >= len(self.starts):
            return len(self.text)
        a = self.starts[pos.line]
        b = self.starts[pos.line + 1] - 1 if pos.line + 1 < len(self.starts) else len(self.text)
        units, i = 0, a
        while i < b and units < pos.character:
            units += self.codec.client_num_units(self.text[i])
            i += 1
        return i


class ParcServer(LanguageServer):
    """The open specs: their text (by real path) and their latest analysis (by URI)."""

    def __init__(self, lint, fix=None):
        super().__init__("parc", __version__)
        self.lint = lint  # parc.lint.engine.lint_texts, handed in by the command
        self.fix = fix    # parc.lint.fix.fix_text (the fix-all action), likewise
        self.buffers: dict[str, str] = {}
        self.results: dict[str, A.Analysis] = {}

    def positions(self, text: str) -> Positions:
        return Positions(text, self.workspace.position_codec)

    def check(self, uri: str) -> None:
        """Lint the open spec ``uri`` and publish what it finds."""
        doc = self.workspace.get_text_document(uri)
        path = os.path.abspath(to_fs_path(uri) or uri)
        self.buffers[os.path.realpath(path)] = doc.source
        a = A.analyse(self.lint, path, doc.source, self.buffers)
        self.results[uri] = a
        pos = self.positions(doc.source)
        diags = [self.lsp_diagnostic(a, d, pos) for d in a.diagnostics]
        self.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri, diags, version=doc.version))

    def recheck_readers(self, path: str, skip: str | None = None) -> None:
        """Lint again every open spec that read the file ``path`` (an import that changed)."""
        real = os.path.realpath(path)
        for uri, a in list(self.results.items()):
            if uri != skip and real in a.reads:
                self.check(uri)

    def span_range(self, a: A.Analysis, span: Span, pos: Positions) -> tuple[str, T.Range]:
        """The URI and range of ``span``: in this spec from its offsets, in another file from
        its lines and columns."""
        if os.path.realpath(span.file) == os.path.realpath(a.file):
            return from_fs_path(a.file), pos.range(span.start, span.end)
        start = T.Position(max(span.line - 1, 0), max(span.column - 1, 0))
        end = T.Position(max(span.end_line - 1, 0), max(span.end_column - 1, 0))
        return from_fs_path(os.path.abspath(span.file)), T.Range(start, end)

    def lsp_diagnostic(self, a: A.Analysis, d: Diagnostic, pos: Positions) -> T.Diagnostic:
        message = d.message + (f"\nhelp: {d.help}" if d.help else "")
        if os.path.realpath(d.span.file) == os.path.realpath(a.file):
            rng = pos.range(d.span.start, d.span.end)
        else:  # found in an imported file: shown on the `use` line that brings it in
            rng = pos.range(*_use_of(a, d.span.file))
            message = f"{d.span.file}:{d.span.line}:{d.span.column}: {message}"
        related = []
        for r in d.related:
            uri, r_rng = self.span_range(a, r.span, pos)
            related.append(T.DiagnosticRelatedInformation(T.Location(uri, r_rng), r.message))
        return T.Diagnostic(rng, message, severity=_SEVERITY.get(d.severity, T.DiagnosticSeverity.Information),
                            code=d.code, source="parc", related_information=related or None,
                            data={"fixes": len(d.fixes)} if d.fixes else None)


def _use_of(a: A.Analysis, file: str) -> tuple[int, int]:
    """The offsets of the `use` path that imports ``file`` (else the first `use`, else the top)."""
    from parc.language.parser import imports

    uses = imports(a.text, a.file)
    real = os.path.realpath(file)
    for path, span in uses:
        if os.path.realpath(os.path.join(os.path.dirname(a.file), path)) == real:
            return span.start, span.end
    return (uses[0][1].start, uses[0][1].end) if uses else (0, 0)


def build(lint, fix=None) -> ParcServer:
    """The server with every feature registered; ``lint`` is ``parc.lint.engine.lint_texts``,
    ``fix`` ``parc.lint.fix.fix_text`` (None: no fix-all action)."""
    from parc.lsp import features

    server = ParcServer(lint, fix)
    features.register(server)
    return server


def serve(lint, fix=None) -> None:
    """Speak LSP on stdin and stdout until the client says exit."""
    build(lint, fix).start_io()
