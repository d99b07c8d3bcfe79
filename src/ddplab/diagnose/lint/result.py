"""What `ddplab lint` returns: findings and the verdict for one script."""

from __future__ import annotations

from dataclasses import dataclass, field

ERROR, WARNING = "error", "warning"


@dataclass
class Finding:
    line: int
    rule: str
    level: str  # error | warning
    message: str
    fix: str
    also: list[int] = field(default_factory=list)  # further lines with the same mistake (unguarded-print)


@dataclass
class LintResult:
    script: str
    findings: list[Finding]
    errors: int = 0
    warnings: int = 0
    backend: str | None = None  # the backend init_process_group is given as a literal, if any
    backend_line: int | None = None
    ok: bool = True  # no error-level finding
