"""How often `ddplab explain` names the right cause first, on the real failure logs in tests/logs/.

    python benchmarks/explain_accuracy.py                 # every log
    python benchmarks/explain_accuracy.py --set heldout   # the held-out fifth (tests/logs/HELDOUT.txt)
    python benchmarks/explain_accuracy.py --set train     # the other four fifths

A log counts as right when the first diagnosis is the rule its `# expect:` header names. Prints one line per miss and
the share right; docs/explain.md records the figures.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from ddplab.diagnose.explain import explain_text

LOGS = Path(__file__).resolve().parent.parent / "tests" / "logs"


def read_quoted(path: Path) -> tuple[dict[str, str], str]:
    """(header fields, quoted text): the leading `# key: value` lines, then the quote."""
    lines = path.read_text().splitlines()
    head = {}
    while lines and re.match(r"# \w+: ", lines[0]):
        key, value = lines.pop(0)[2:].split(": ", 1)
        head[key] = value
    return head, "\n".join(lines)


def held_out() -> set[str]:
    text = (LOGS / "HELDOUT.txt").read_text()
    return {line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("all", "heldout", "train"), default="all")
    args = parser.parse_args(argv)
    held = held_out()
    paths = sorted(LOGS.glob("*.log"))
    if args.set == "heldout":
        paths = [p for p in paths if p.name in held]
    elif args.set == "train":
        paths = [p for p in paths if p.name not in held]
    right = 0
    for path in paths:
        head, quote = read_quoted(path)
        e = explain_text(quote)
        got = e.matches[0].rule if e.matches else None
        if got == head["expect"]:
            right += 1
        else:
            print(f"miss  {path.name}: expected {head['expect']}, got {got}")
    print(f"{args.set}: {right}/{len(paths)} right = {100 * right / max(len(paths), 1):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
