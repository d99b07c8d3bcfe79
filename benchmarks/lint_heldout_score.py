"""Precision and recall of `ddplab lint`'s default output on the held-out scripts in benchmarks/lint_heldout/.

    python benchmarks/lint_heldout_score.py [CORPUS_DIR]     (default /tmp/lint_heldout)
    python benchmarks/lint_heldout_score.py --set lint_heldout2 [CORPUS_DIR]   (default /tmp/lint_heldout2)

--set names the folder under benchmarks/ that holds the set's truth.json and sources.json (default lint_heldout, the
first set; lint_heldout2 is the second, measured at first sight). The scoring is the same for every set.

The held-out set: 16 public DDP scripts, each with the local modules it imports. They are public code and are not in
this repository: benchmarks/lint_heldout/sources.json lists, per script, the repository, the commit and the files;
save each file byte for byte as CORPUS_DIR/<script name>/<path in its repository>. benchmarks/lint_heldout/truth.json
was written by reading them before lint ever ran on them (what it holds: its "_about").

Judging, the same as benchmarks/lint_precision.py: a finding is right when its (file, statement, rule) is a truth
mistake (or one of its `alt` forms); an unguarded-print finding is right when every line it names is a true print
line; a mistake is found when a finding has it; the print mistake is found when the finding names at least one true
print line. Lines are compared by statement (a finding on line 59 of a call that starts on
line 58 is line 58), so a rule may point at any line of the statement.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent / "lint_heldout"  # truth.json, sources.json
ROOT = Path("/tmp/lint_heldout")  # the scripts (main() sets it from the command line)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from ddplab.lint import lint_file  # noqa: E402


def statement_starts(path: Path) -> dict[int, int]:
    """line -> first line of the innermost statement that holds it (a compound statement: its header only)."""
    tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    starts: dict[int, int] = {}
    for node in ast.walk(tree):  # outer before inner: inner statements overwrite
        if isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            end = body[0].lineno - 1 if isinstance(body, list) and body and isinstance(body[0], ast.stmt) \
                else node.end_lineno
            for line in range(node.lineno, max(end, node.lineno) + 1):
                if starts.get(line, 0) <= node.lineno:
                    starts[line] = node.lineno
    return starts


def judge(name: str, truth: dict, entry: Path) -> tuple[int, int, int, int, list[str]]:
    base = ROOT / name
    rel_entry = str(entry.relative_to(base))
    stmt_cache: dict[str, dict[int, int]] = {}

    def key(file: str, line: int, rule: str) -> tuple[str, int, str]:
        path = base / file
        if file not in stmt_cache:
            stmt_cache[file] = statement_starts(path) if path.is_file() else {}
        return file, stmt_cache[file].get(line, line), rule

    def where(f) -> str:
        path = getattr(f, "path", None)  # a finding in an imported module says which file
        return str(Path(path).resolve().relative_to(base.resolve())) if path else rel_entry

    mistakes = []  # each: set of accepted keys
    for m in truth.get("mistakes", []):
        forms = [m] + m.get("alt", [])
        mistakes.append({key(x.get("file", m.get("file", rel_entry)), x["line"], x["rule"]) for x in forms})
    prints = {key(p["file"], p["line"], "unguarded-print")[:2] if isinstance(p, dict)  # a print in an imported module
              else key(rel_entry, p, "unguarded-print")[:2] for p in truth.get("prints", [])}

    findings = lint_file(entry).findings
    notes, right, got = [], 0, set()
    for f in findings:
        file = where(f)
        if f.rule == "unguarded-print":
            lines = {key(file, line, f.rule)[:2] for line in (f.line, *f.also)}
            ok = lines <= prints
        else:
            k = key(file, f.line, f.rule)
            ok = any(k in forms for forms in mistakes)
            got.add(k)
        right += ok
        if not ok:
            notes.append(f"false alarm {file}:{f.line} {f.rule}")
    printed = {key(where(f), line, f.rule)[:2] for f in findings if f.rule == "unguarded-print"
               for line in (f.line, *f.also)}
    missed = [f"missed {sorted(forms)[0][0]}:{sorted(forms)[0][1]} {sorted(forms)[0][2]}"
              for forms in mistakes if not forms & got]
    if prints and not printed & prints:
        missed.append(f"missed unguarded-print {sorted(line for _, line in prints)}")
    expected = len(mistakes) + bool(prints)
    return len(findings), right, expected, expected - len(missed), notes + missed


def main() -> int:
    global ROOT, HERE
    argv = sys.argv[1:]
    if argv[:1] == ["--set"] and len(argv) > 1:
        HERE = HERE.parent / argv[1]
        ROOT = Path("/tmp") / argv[1]
        argv = argv[2:]
    ROOT = Path(argv[0]) if argv else ROOT
    truth = json.loads((HERE / "truth.json").read_text())
    sources = json.loads((HERE / "sources.json").read_text())
    missing = [f"{name}/{f}" for name, s in sources.items() for f in s["files"] if not (ROOT / name / f).is_file()]
    if missing:
        print(f"{ROOT}: missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: copy them from the "
              f"repositories and commits in {HERE / 'sources.json'}", file=sys.stderr)
        return 2
    n = right = expected = found = 0
    print(f"{'script':24} {'findings':>8} {'right':>5} {'expected':>8} {'found':>5}  notes")
    for name, t in truth.items():
        if name.startswith("_"):
            continue
        entry = ROOT / name / sources[name]["entry"]
        a, b, c, d, notes = judge(name, t, entry)
        print(f"{name:24} {a:8} {b:5} {c:8} {d:5}  {'; '.join(notes)}")
        n, right, expected, found = n + a, right + b, expected + c, found + d
    print(f"{HERE.name} ({len(truth) - 1} scripts): precision {right}/{n} = {right / max(n, 1):.1%}   "
          f"recall {found}/{expected} = {found / max(expected, 1):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
