"""How often `ddplab explain` names the right cause first, on the real failure logs in tests/logs/.

    python benchmarks/explain_accuracy.py                 # every log
    python benchmarks/explain_accuracy.py --set heldout   # the held-out fifth (tests/logs/HELDOUT.txt)
    python benchmarks/explain_accuracy.py --set train     # the other four fifths

A log counts as right when the first diagnosis is the rule its `# expect:` header names. Prints one line per miss and
the share right; docs/explain.md records the figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddplab.explain.matcher import explain_text

TESTS = Path(__file__).resolve().parent.parent / "tests" / "explain"
sys.path.insert(0, str(TESTS))
from test_explain_corpus import HELD_OUT, LOGS, read_quoted  # noqa: E402  the corpus's one reader


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("all", "heldout", "train"), default="all")
    args = parser.parse_args(argv)
    held = HELD_OUT
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
