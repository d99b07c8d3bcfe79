"""`ddplab lint --format sarif`: the findings as a SARIF 2.1.0 log, the format code-scanning services read (GitHub's
upload-sarif action, GitLab, IDE viewers). One run; the rules table is the rule modules' docs, each result a finding
at its file and line."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from ddplab.lint.findings import LintResult
from ddplab.lint.rules import MINOR, all_rules

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _uri(path: str) -> str:
    """A relative path as a URI reference (SARIF's artifactLocation.uri): forward slashes, odd characters escaped."""
    return quote(Path(path).as_posix())


def to_sarif(results: list[LintResult]) -> dict:
    rules = all_rules()
    index = {r.id: n for n, r in enumerate(rules)}
    out = []
    for result in results:
        for f in result.findings:
            message = f"{f.message}. Fix: {f.fix}" + (f" (not sure: {f.why})" if f.confidence == "possible" else "")
            out.append(
                {
                    "ruleId": f.rule,
                    "ruleIndex": index[f.rule],
                    # a finding lint is not sure of is a note: code scanning shows it without failing a check on it
                    "level": "note" if f.confidence == "possible" else f.level,
                    "message": {"text": message},
                    "locations": [
                        {
                            "physicalLocation": {
                                "artifactLocation": {"uri": _uri(f.path or result.script)},
                                "region": {"startLine": max(f.line, 1)},
                            }
                        }
                    ],
                }
            )
    driver_rules = [
        {
            "id": r.id,
            "name": "".join(w.capitalize() for w in r.id.split("-")),
            "shortDescription": {"text": r.what},
            "fullDescription": {"text": r.why},
            "help": {"text": f"{r.fix}\n\nExample of the mistake:\n{r.example}"},
            "defaultConfiguration": {"level": "warning" if r.severity == MINOR else "error"},
            "properties": {"severity": r.severity},
        }
        for r in rules
    ]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "ddplab lint", "rules": driver_rules}},
                "results": out,
            }
        ],
    }
