"""Write docs/lint.md's rules table from the rule modules' docs (src/ddplab/lint/rules/), between its markers.

python tools/lint_rules_table.py          (tests/lint/test_rule_fixtures.py fails when the table is stale)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from ddplab.lint.rules import markdown_table  # noqa: E402

DOC = ROOT / "docs" / "lint.md"
START, END = "<!-- rules table: python tools/lint_rules_table.py -->", "<!-- end of the rules table -->"


def main() -> int:
    text = DOC.read_text()
    if START not in text or END not in text:
        print(f"{DOC}: no {START} ... {END} markers: put them where the table goes", file=sys.stderr)
        return 2
    DOC.write_text(
        re.sub(
            re.escape(START) + ".*?" + re.escape(END), lambda _: f"{START}\n{markdown_table()}\n{END}", text, flags=re.S
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
