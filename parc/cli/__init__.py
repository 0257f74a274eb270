"""The command line: ``main`` and one module per command, each imported only when it runs."""
