"""The launcher's side of the sanitizer: ask the ranks to watch (request), read what each observed and let every
check judge it (read), say so (render), and tell whether a failed run failed on a finding (lead)."""

from __future__ import annotations

import importlib
import json
import linecache
import os
from dataclasses import dataclass, field
from pathlib import Path

from ddplab.sanitize import CHECKS, CONFIG, DEFAULT_STEPS, DIR_ENV, Finding, ranks_text, short

__all__ = ["DEFAULT_STEPS", "DIR_ENV", "SanitizeReport", "lead", "read", "render", "request"]


@dataclass
class SanitizeReport:
    steps: int  # the window asked: the first N optimizer steps of every rank
    ranks: list[int]  # the ranks whose observations were read
    steps_seen: int  # optimizer steps the ranks observed (the most of any rank)
    findings: list[Finding] = field(default_factory=list)
    off: dict[str, str] = field(default_factory=dict)  # "rank R: check" -> why that check turned itself off
    leading: bool = False  # the run failed, and a finding names the file or the line it failed on
    # findings said only when the run failed on them (evidence "only_when_failed": a folder two ranks made, which a
    # script may handle by catching FileExistsError): held back until lead() finds them in the failure
    held: list[Finding] = field(default_factory=list)


def request(folder: Path, steps: int) -> None:
    """Ask the ranks (before they start) to watch their first `steps` optimizer steps; 0 asks nothing."""
    if steps > 0:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG).write_text(json.dumps({"steps": steps}))


def read(folder: str | os.PathLike) -> SanitizeReport | None:
    """The findings from what the ranks wrote in `folder`; None when the sanitizer was not asked for."""
    folder = Path(folder)
    try:
        steps = int(json.loads((folder / CONFIG).read_text())["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    records: dict[int, dict] = {}
    for path in folder.glob("rank*.json"):
        try:
            record = json.loads(path.read_text())
            records[int(record["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a file being replaced as the rank was killed, or not one of ours
    report = SanitizeReport(steps, sorted(records), max((r.get("steps", 0) for r in records.values()), default=0))
    world = max((r.get("world_size", 1) for r in records.values()), default=1)
    for rank, record in sorted(records.items()):
        report.off.update({f"rank {rank}: {check}": why for check, why in record.get("off", {}).items()})
    for name in CHECKS:
        module = importlib.import_module(f"ddplab.sanitize.{name}")
        seen = {rank: r["checks"][module.ID] for rank, r in records.items() if module.ID in r.get("checks", {})}
        try:
            report.findings += module.judge(seen, world)
        except Exception as e:  # noqa: BLE001 - a reader's bug must not cost the run's own report
            report.off[f"reader: {module.ID}"] = f"{type(e).__name__}: {e}"
    for finding in report.findings:
        finding.code = _source(finding.where)
    report.held = [f for f in report.findings if f.evidence.get("only_when_failed")]
    report.findings = [f for f in report.findings if f not in report.held]
    return report


def _source(where: str | None) -> str | None:
    if not where:
        return None
    path, _, line = where.rpartition(":")
    if not line.isdigit():
        return None
    return linecache.getline(path, int(line)).strip() or None


def lead(report: SanitizeReport, failure: str) -> None:
    """The run failed with `failure` (the root-cause rank's last lines): a finding whose file or line appears there
    is what it failed on; such findings go first and the report leads."""

    def names(f: Finding) -> bool:
        paths = f.evidence.get("paths") or [f.evidence.get("path")]
        if any(path and os.path.basename(path) in failure for path in paths):
            return True
        if f.where:
            file, _, line = f.where.rpartition(":")
            return f'"{file}", line {line}' in failure
        return False

    first = [f for f in report.held + report.findings if names(f)]
    if first:
        report.leading = True
        report.findings = first + [f for f in report.findings if f not in first]


def render(report: SanitizeReport | None) -> str:
    """The findings as text; "" when there is none (a script written right hears nothing from the sanitizer)."""
    if report is None or not report.findings:
        return ""
    n = len(report.findings)
    head = "the run failed on what the sanitizer saw" if report.leading else f"{n} DDP mistake{'s' * (n > 1)} seen"
    seen = min(report.steps, report.steps_seen)
    watched = f"optimizer steps 1-{seen}" if seen > 1 else "optimizer step 1" if seen else "no optimizer step"
    out = [f"  sanitizer (ranks {ranks_text(report.ranks)}, {watched} watched): {head}"]
    for i, f in enumerate(report.findings, 1):
        out.append(f"  {i}. [{f.check}] {f.observed}")
        if f.where:
            out.append(f"       at {short(f.where)}" + (f": {f.code}" if f.code else ""))
        out.append(f"       fix: {f.fix}")
    return "\n".join(out)
