"""Write ``par_table.json``, the parser's table, from ``par.lark``.

Run after every grammar change: ``python -m parc.language.build_table``. A test fails while
the table and the grammar disagree.
"""
from __future__ import annotations

from parc.language.parser import TABLE_PATH, build_table


def main() -> None:
    from parc.files import write_atomic

    write_atomic(TABLE_PATH, build_table(), mode=0o644)
    print(f"wrote {TABLE_PATH}")


if __name__ == "__main__":
    main()
