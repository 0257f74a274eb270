"""From files to a typed plan: reader, imports, merge, evaluation, build."""
