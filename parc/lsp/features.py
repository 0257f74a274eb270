"""The LSP requests and notifications ``parc lsp`` answers, each a thin handler over
:mod:`parc.lsp.analysis`, :mod:`parc.lsp.hover` and :mod:`parc.lsp.complete`."""
from __future__ import annotations

import os

from lsprotocol import types as T
from pygls.uris import from_fs_path, to_fs_path

from parc.lsp import analysis as A

_ITEM_KIND = {"block": T.CompletionItemKind.Module, "key": T.CompletionItemKind.Field,
              "value": T.CompletionItemKind.EnumMember, "preset": T.CompletionItemKind.Constant,
              "target": T.CompletionItemKind.Class}


def register(ls) -> None:
    """Register every feature on the server ``ls``.

    Long because: one nested handler per LSP method, each a few lines, registered in one place."""

    @ls.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params: T.DidOpenTextDocumentParams):
        ls.check(params.text_document.uri)
        ls.recheck_readers(_path(params.text_document.uri), skip=params.text_document.uri)

    @ls.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls, params: T.DidChangeTextDocumentParams):
        ls.check(params.text_document.uri)
        ls.recheck_readers(_path(params.text_document.uri), skip=params.text_document.uri)

    @ls.feature(T.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls, params: T.DidSaveTextDocumentParams):
        ls.recheck_readers(_path(params.text_document.uri), skip=params.text_document.uri)

    @ls.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params: T.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        ls.results.pop(uri, None)
        ls.buffers.pop(os.path.realpath(_path(uri)), None)  # its importers read the disk again
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri, []))
        ls.recheck_readers(_path(uri))

    @ls.feature(T.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def watched(ls, params: T.DidChangeWatchedFilesParams):
        for change in params.changes:
            ls.recheck_readers(_path(change.uri))

    @ls.feature(T.TEXT_DOCUMENT_HOVER)
    def hover(ls, params: T.HoverParams):
        from parc.lsp.hover import hover as text_at

        a, pos = _at(ls, params.text_document.uri)
        if a is None:
            return None
        text = text_at(a, pos.offset(params.position))
        return T.Hover(T.MarkupContent(T.MarkupKind.Markdown, text)) if text else None

    @ls.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions(trigger_characters=["=", " ", "{"]))
    def completion(ls, params: T.CompletionParams):
        from parc.lsp.complete import complete

        doc = ls.workspace.get_text_document(params.text_document.uri)
        pos = ls.positions(doc.source)
        items = []
        for it in complete(doc.source, pos.offset(params.position)):
            items.append(T.CompletionItem(
                it.label, kind=_ITEM_KIND.get(it.kind), detail=it.detail or None,
                documentation=T.MarkupContent(T.MarkupKind.Markdown, it.doc) if it.doc else None,
                insert_text=it.insert, insert_text_format=T.InsertTextFormat.Snippet if it.snippet else None))
        return T.CompletionList(is_incomplete=False, items=items)

    @ls.feature(T.TEXT_DOCUMENT_DEFINITION)
    def definition(ls, params: T.DefinitionParams):
        a, pos = _at(ls, params.text_document.uri)
        if a is None:
            return None
        span = A.definition(a, pos.offset(params.position))
        if span is None:
            return None
        uri, rng = ls.span_range(a, span, pos)
        return T.Location(uri, rng)

    @ls.feature(T.TEXT_DOCUMENT_FORMATTING)
    def formatting(ls, params: T.DocumentFormattingParams):
        doc = ls.workspace.get_text_document(params.text_document.uri)
        edits = A.formatting(_path(doc.uri), doc.source)
        if edits is None:
            return None
        pos = ls.positions(doc.source)
        return [T.TextEdit(pos.range(e.span.start, e.span.end), e.text) for e in edits]

    @ls.feature(T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(
        code_action_kinds=[T.CodeActionKind.QuickFix, T.CodeActionKind.SourceFixAll]))
    def code_action(ls, params: T.CodeActionParams):
        a, pos = _at(ls, params.text_document.uri)
        if a is None:
            return None
        lo, hi = pos.offset(params.range.start), pos.offset(params.range.end)
        only = params.context.only
        actions = _fix_all(ls, a, pos) if _wanted(only, T.CodeActionKind.SourceFixAll) else []
        for d in a.diagnostics if _wanted(only, T.CodeActionKind.QuickFix) else ():
            same = os.path.realpath(d.span.file) == os.path.realpath(a.file)
            if not d.fixes or not same or d.span.end < lo or d.span.start > hi:
                continue
            lsp_diag = ls.lsp_diagnostic(a, d, pos)
            for i, fix in enumerate(d.fixes):
                changes: dict[str, list[T.TextEdit]] = {}
                for e in fix.edits:
                    uri, rng = ls.span_range(a, e.span, pos)
                    changes.setdefault(uri, []).append(T.TextEdit(rng, e.text))
                actions.append(T.CodeAction(f"{d.code}: {fix.message}", kind=T.CodeActionKind.QuickFix,
                                            diagnostics=[lsp_diag], edit=T.WorkspaceEdit(changes=changes),
                                            is_preferred=fix.safe and i == 0))
        return actions


def _wanted(only, kind: str) -> bool:
    """Whether a code action request (its ``only`` kinds; None: every kind) asks for ``kind``:
    the kind itself or a kind above it (``source`` asks for ``source.fixAll``)."""
    return not only or any(kind == k or kind.startswith(f"{k}.") for k in only)


def _fix_all(ls, a, pos) -> list:
    """The source.fixAll action: every safe fix ``parc lint --fix`` would apply, as one edit
    (none when there is nothing to fix or no fixer was handed in)."""
    edits = A.fix_all(ls.lint, ls.fix, a, ls.buffers) if ls.fix else ()
    if not edits:
        return []
    uri = from_fs_path(a.file)
    return [T.CodeAction("parc: apply every safe fix", kind=T.CodeActionKind.SourceFixAll,
                         edit=T.WorkspaceEdit(changes={uri: [T.TextEdit(pos.range(e.span.start, e.span.end), e.text)
                                                              for e in edits]}))]


def _path(uri: str) -> str:
    return os.path.abspath(to_fs_path(uri) or uri)


def _at(ls, uri: str):
    """The latest analysis of ``uri`` (made now if the document has none) and its positions."""
    a = ls.results.get(uri)
    doc = ls.workspace.get_text_document(uri)
    if a is None or a.text != doc.source:
        ls.check(uri)
        a = ls.results.get(uri)
    return a, ls.positions(a.text) if a else None

