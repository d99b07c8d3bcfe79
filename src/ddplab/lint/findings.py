"""What `ddplab lint` returns: findings and the verdict for one script."""

from __future__ import annotations

from dataclasses import dataclass, field

ERROR, WARNING = "error", "warning"
SURE, POSSIBLE = "sure", "possible"


@dataclass
class Finding:
    line: int
    rule: str
    level: str  # error | warning
    message: str
    fix: str
    also: list[int] = field(default_factory=list)  # further lines with the same mistake (unguarded-print)
    confidence: str = SURE  # sure: shown by default; possible: shown with --all
    why: str = ""  # what makes lint sure, or what it could not see
    path: str | None = None  # the file, when it is not the script linted (a module it imports, a file of a folder)
    severity: str = "bug"  # the rule's: bug (hangs, crashes, wrong results, wasted GPUs) or minor (noise, hygiene)


@dataclass
class LintResult:
    script: str
    findings: list[Finding]
    errors: int = 0
    warnings: int = 0
    backend: str | None = None  # the backend init_process_group is given as a literal, if any
    backend_line: int | None = None
    ok: bool = True  # no error-level finding
    possible: int = 0  # findings lint is not sure of, left out unless --all
    possible_rules: list[str] = field(default_factory=list)  # their rules
    files: int = 1  # the files read (the script and the local modules it imports, or a folder's)
    unread: list[str] = field(default_factory=list)  # "path: why" for project files that could not be read
    notes: list[str] = field(default_factory=list)  # what lint could not take into account here, one line each
