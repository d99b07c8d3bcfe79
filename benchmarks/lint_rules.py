"""Per-set and per-rule precision of `ddplab lint`'s default output over every set in benchmarks/.

    python benchmarks/lint_rules.py [--all]

Runs the judging of benchmarks/lint_heldout_score.py on each held-out set (lint_heldout, lint_heldout2..6,
lint_tune5; the scripts under /tmp/<set>, fetched as that script's docstring says) and of
benchmarks/lint_precision.py on its corpus (/tmp/lintcorpus), then prints one table per set (precision, recall) and
one per rule: findings, false alarms and precision summed over all sets, and the true mistakes of that rule missed.
--all judges lint's output with the possible findings too (what `ddplab lint --all` prints).
A rule whose false alarms cannot be fixed by a general mechanism leaves the default output (docs/lint.md).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "src"))
import lint_heldout_score as heldout  # noqa: E402
import lint_precision as corpus  # noqa: E402
from ddplab import lint as lint_pkg  # noqa: E402

SETS = ["lint_heldout", "lint_heldout2", "lint_heldout3", "lint_heldout4", "lint_heldout5", "lint_heldout6",
        "lint_tune5"]
found_rules: Counter = Counter()  # rule -> findings over all sets


def recording(show_all: bool):
    def lint_file(path, **kw):
        result = lint_pkg.lint_file(path, show_all=show_all, **kw) if show_all else lint_pkg.lint_file(path, **kw)
        for f in result.findings:
            found_rules[f.rule] += 1
        return result
    return lint_file


def main() -> int:
    show_all = "--all" in sys.argv[1:]
    heldout.lint_file = corpus.lint_file = recording(show_all)
    false: Counter = Counter()
    missed: Counter = Counter()
    rows = []
    rule_of = re.compile(r"(?:false alarm|missed) \S+ (?:\S+ )?([a-z0-9-]+)$")
    for name in SETS:
        heldout.HERE, heldout.ROOT = BENCH / name, Path("/tmp") / name
        truth = json.loads((heldout.HERE / "truth.json").read_text())
        sources = json.loads((heldout.HERE / "sources.json").read_text())
        tot = [0, 0, 0, 0]
        for script, t in truth.items():
            if script.startswith("_"):
                continue
            *nums, notes = heldout.judge(script, t, heldout.ROOT / script / sources[script]["entry"])
            tot = [a + b for a, b in zip(tot, nums)]
            for note in notes:
                kind = false if note.startswith("false") else missed
                m = rule_of.search(note) if "unguarded-print [" not in note else None
                kind["unguarded-print" if m is None else m.group(1)] += 1
        rows.append((name, *tot))
    files = {p.name: p for p in Path("/tmp/lintcorpus").rglob("*.py")}
    tot = [0, 0, 0, 0]
    for script in corpus.SCRIPTS:
        *nums, notes = corpus.judge(script, files[script.name])
        tot = [a + b for a, b in zip(tot, nums)]
        for note in notes:
            kind = false if note.startswith("false") else missed
            m = rule_of.search(note) if "unguarded-print [" not in note else None
            kind["unguarded-print" if m is None else m.group(1)] += 1
    rows.append(("lint_precision corpus", *tot))
    print("| set | precision | recall |\n|---|---|---|")
    for name, n, right, expected, found in rows:
        print(f"| {name} | {right}/{n} = {right / max(n, 1):.1%} | {found}/{expected} = {found / max(expected, 1):.1%} |")
    print("\n| rule | findings | false | precision | missed |\n|---|---|---|---|---|")
    for rule in sorted(set(found_rules) | set(missed), key=lambda r: (-false[r], r)):
        n = found_rules[rule]
        print(f"| `{rule}` | {n} | {false[rule]} | {(n - false[rule]) / max(n, 1):.1%} | {missed[rule]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
