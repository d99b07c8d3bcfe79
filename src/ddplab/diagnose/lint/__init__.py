"""Static checks of a DDP training script (Python ast): the mistakes that make multi-GPU runs hang, crash, or train
on the wrong data without saying so. Each finding has a line, a rule id, a level, a message and a fix.

Errors break or hang a distributed run for certain; warnings are mistakes with a cost (wrong data, lost or
unloadable checkpoints, a script that runs on GPUs only). Checks are heuristics over names and one file: reading.py
follows rank guards as a reader does, rules.py holds the checks; docs/lint.md lists them and how often they are
right on public scripts.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ddplab.diagnose.lint.result import ERROR, WARNING, Finding, LintResult
from ddplab.diagnose.lint.rules import Checks
from ddplab.errors import DdplabError

__all__ = ["ERROR", "WARNING", "Finding", "LintResult", "lint_file", "lint_source"]


def lint_file(path: str | Path) -> LintResult:
    path = Path(path)
    if not path.is_file():
        raise DdplabError(f"{path}: no such file: pass the path of a Python training script")
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise DdplabError(f"{path}: cannot read it ({e.strerror}): check its permissions") from None
    return lint_source(source, str(path))


def lint_source(source: str, script: str = "<script>") -> LintResult:
    try:
        tree = ast.parse(source, filename=script)
    except SyntaxError as e:
        raise DdplabError(f"{script}:{e.lineno}: not valid Python ({e.msg}): fix the syntax, then lint again") from None
    linter = Checks(tree)
    linter.run()
    findings = sorted(linter.findings, key=lambda f: (f.line, f.rule))
    errors = sum(f.level == ERROR for f in findings)
    return LintResult(script=script, findings=findings, errors=errors, warnings=len(findings) - errors,
                      backend=linter.backend, backend_line=linter.backend_line, ok=errors == 0)
