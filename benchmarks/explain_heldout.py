"""First-finding accuracy of `ddplab explain` on the held-out set of real failure logs (benchmarks/explain_heldout/).

    python benchmarks/explain_heldout.py           # one line per log, then k/n
    python benchmarks/explain_heldout.py --json    # the same as one object
    python benchmarks/explain_heldout.py --set benchmarks/explain_heldout2   # another held-out set, same format

Each log there is copied verbatim from a public thread; truth.json gives its source, the cause the thread confirms and
the cause ids that count as right (`expect`), written before explain was run on it. A log counts as right when the
first finding's rule id is one of them. None of these logs is in tests/logs/ and none was used to write a rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ddplab.explain.matcher import explain_text

HELDOUT = Path(__file__).resolve().parent / "explain_heldout"


def score(heldout: Path = HELDOUT) -> list[dict]:
    rows = []
    for item in json.loads((heldout / "truth.json").read_text()):
        text = (heldout / item["log"]).read_text(encoding="utf-8", errors="replace")
        e = explain_text(text)
        got = e.matches[0].rule if e.matches else None
        rows.append({"log": item["log"], "expect": item["expect"], "got": got, "right": got in item["expect"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--set", type=Path, default=HELDOUT, metavar="DIR",
                        help="folder with the logs and truth.json (default: benchmarks/explain_heldout)")
    args = parser.parse_args(argv)
    rows = score(args.set)
    right = sum(r["right"] for r in rows)
    if args.json:
        print(json.dumps({"right": right, "total": len(rows), "logs": rows}, indent=1))
        return 0
    for r in rows:
        print(f"{'right' if r['right'] else 'miss '}  {r['log']}: expected {'/'.join(r['expect'])}, got {r['got']}")
    print(f"held-out: {right}/{len(rows)} right = {100 * right / max(len(rows), 1):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
