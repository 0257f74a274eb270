"""``parc lsp``: the language server (pygls, imported only when the command runs).

``server.py`` speaks the protocol; ``analysis.py`` lints an open buffer and keeps its plan;
``hover.py``, ``complete.py`` and ``scan.py`` answer from parc's own data and ``parc explain``'s
numbers. A sibling of ``lint/`` and ``planner/``: ``parc lsp`` (cli/) hands it the lint function,
as neither sibling imports the other.
"""
