"""Write ``par_table.json``, the parser's table, from ``par.lark``.

Run after every grammar change: ``python -m parc.language.build_table``. A test fails while
the table and the grammar disagree.
"""
from __future__ import annotations

import os
import tempfile

from parc.language.parser import TABLE_PATH, build_table


def main() -> None:
    text = build_table()
    fd, tmp = tempfile.mkstemp(dir=TABLE_PATH.parent, prefix=".par_table-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, TABLE_PATH)
    print(f"wrote {TABLE_PATH}")


if __name__ == "__main__":
    main()
