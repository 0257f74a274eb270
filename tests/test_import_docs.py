"""docs/import.md's flag tables are the targets' flags.toml (the one table import and compile
share), and the placeholder ``parc import`` writes is P040 at its line."""
from __future__ import annotations

from pathlib import Path

from support.snapshot import updating
from support.specs import assert_fires, assert_quiet, spec

PAGE = Path(__file__).resolve().parent.parent / "docs" / "import.md"


def test_the_import_page_carries_every_engines_flag_table():
    from parc.importer.flagdocs import ENGINES, replace_section
    from parc.model.targets import flag_table

    page = PAGE.read_text(encoding="utf-8")
    want = replace_section(page)
    if updating():
        PAGE.write_text(want, encoding="utf-8")
        return
    assert page == want, "docs/import.md's flag tables are not flags.toml's; PARC_UPDATE_GOLDEN=1 rewrites them"
    for engine in ENGINES:
        for entry in flag_table(engine).values():
            assert f"`{entry['names'][0]['name']}`" in page, (engine, entry["names"][0]["name"])


def test_the_object_tables_name_keys_the_spec_language_has():
    """Every `.par` key docs/import.md's object tables name is a key of its block or target."""
    from parc.importer.flagdocs import objects
    from parc.model.fields import BLOCKS
    from parc.model.targets import keys

    for name, o in objects().items():
        for row in o["rows"]:
            for k in filter(None, (x.strip() for x in row["key"].split(","))):
                parts = k.split(".")
                if parts[0] == "target":
                    assert parts[2] in keys(parts[1]), (name, k)
                elif parts[:2] == ["serve", "prefill"] or parts[:2] == ["serve", "decode"]:
                    assert len(parts) == 2 or parts[2] in BLOCKS[parts[1]], (name, k)
                else:
                    assert parts[1] in BLOCKS[parts[0]], (name, k)


def test_a_placeholder_is_p040_at_its_line(check_spec):
    text = spec(mesh='dp = unknown("$DP")')
    d = assert_fires(check_spec, text, "P040", 'unknown("$DP")')
    assert "$DP" in d.message and "`dp`" in d.message
    assert_quiet(check_spec, spec(mesh="dp = 8"), "P040")
