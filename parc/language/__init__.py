"""The language: grammar (par.lark), parser, syntax tree with spans, diagnostics and fmt."""
