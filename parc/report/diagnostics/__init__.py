"""Diagnostics in each output format: ``text`` (the terminal, with source snippets), ``json``,
``sarif`` (GitHub code scanning) and ``github`` (workflow annotations)."""
