"""Render the raw outputs of benchmarks/gpu_validate.sh (a folder) as docs/gpu-results.md.

    python benchmarks/gpu_report.py WORK_DIR docs/gpu-results.md --gpus N --seconds S

Every figure is read from a command's own --json output (or pytest's junit XML) in WORK_DIR; a step that failed,
timed out or was not run is said as such, with the last line it printed. Output from outside is data: it goes into
the Markdown inside code spans with backticks removed, never as markup.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path


def code(text) -> str:
    """Outside text as a Markdown code span on one line (backticks and pipes would break the span or the table)."""
    return "`" + " ".join(str(text).split()).replace("`", "'").replace("|", "/") + "`"


def load(work: Path, name: str):
    try:
        return json.loads((work / f"{name}.out").read_text())
    except (OSError, ValueError):
        return None


def last_line(work: Path, name: str) -> str:
    try:
        lines = [line for line in (work / f"{name}.err").read_text().splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def outcome(step: dict | None) -> str:
    if step is None:
        return "not run"
    rc = step["rc"]
    if rc == "skipped":
        return "not run (budget spent)"
    return {"0": "exit 0", "124": f"TIMEOUT after {step['limit']} s", "137": f"killed after {step['limit']} s"}.get(
        rc, f"exit {rc}")


def gib(nbytes) -> str:
    return "-" if nbytes is None else f"{nbytes / 2**30:.2f} GiB"


def render(work: Path, gpus: int, seconds: int) -> str:
    with open(work / "steps.tsv") as f:
        steps = {row["name"]: row for row in csv.DictReader(f, delimiter="\t")}
    out = ["# ddplab on a GPU: validation results", "",
           f"Written by `benchmarks/gpu_validate.sh` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} in "
           f"{seconds} s, world size {gpus} (the visible GPUs). Every figure below is read from the commands' own "
           "`--json` output.", ""]

    env = load(work, "env")
    if env:
        names = sorted({d["name"] for d in env.get("devices", [])})
        out += ["## Machine", "",
                f"- GPUs: {gpus} × {', '.join(code(n) for n in names) or '?'}; driver {code(env.get('driver'))}",
                f"- torch {code(env['torch']['version'])} ({env['torch']['build']}), NCCL {code(env['torch'].get('nccl'))}",
                f"- warnings from `ddplab env`: {len(env.get('warnings', []))}", ""]

    out += ["## Steps", "", "| step | result | seconds |", "|---|---|---|"]
    for name, row in steps.items():
        out.append(f"| {name} | {outcome(row)} | {row['seconds']} |")
    out.append("")

    out += _tests(work, steps.get("gpu_tests"))
    out += _check(work, steps)
    out += _bench(work, steps.get("bench"))
    out += _memory_and_mfu(work, steps)
    return "\n".join(out) + "\n"


def _missing(work: Path, name: str, step) -> list[str]:
    return [f"No result ({outcome(step)}): {code(last_line(work, name) or 'no output')}", ""]


def _tests(work: Path, step) -> list[str]:
    out = ["## The GPU test group (`python -m pytest -m gpu`)", ""]
    try:
        suite = ET.parse(work / "gpu_tests.xml").getroot()
    except (OSError, ET.ParseError):
        return out + _missing(work, "gpu_tests", step)
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    out.append(f"{passed} passed, {counts['failures']} failed, {counts['errors']} errors, {counts['skipped']} "
               f"skipped of {counts['tests']} ({outcome(step)}).")
    out.append("")
    for case in suite.iter("testcase"):
        for kind in ("failure", "error"):
            bad = case.find(kind)
            if bad is not None:
                out.append(f"- {kind}: {code(case.get('name'))}: {code((bad.get('message') or '')[:300])}")
    return out + [""]


def _check(work: Path, steps: dict) -> list[str]:
    out = ["## check", ""]
    for name, title in (("check", "on every GPU (NCCL)"), ("check_tf32", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1"),
                        ("check_cpu2", "2 CPU ranks beside the GPU (gloo)"),
                        ("check_2on1", "2 NCCL ranks on one GPU (preflight must refuse: exit 1)")):
        if name not in steps:
            continue
        result = load(work, name)
        out.append(f"### {title}")
        out.append("")
        if not result:
            out += _missing(work, name, steps[name])
            continue
        out.append(f"verdict: {code(result['verdict'])} ({outcome(steps[name])})")
        out.append("")
        out += ["| stage | status | result |", "|---|---|---|"]
        for s in result["stages"]:
            text = s.get("figure") or ""
            if s["status"] != "PASS" and s.get("cause"):
                text = f"{s['cause']} (fix: {s.get('fix', '')})"
            out.append(f"| {s['name']} | {s['status']} | {code(text)} |")
        out.append("")
    if len(out) == 2:
        out += ["No check step ran.", ""]
    return out


def _bench(work: Path, step) -> list[str]:
    out = ["## bench (all ops, 1K to 1G)", ""]
    result = load(work, "bench")
    if not result:
        return out + _missing(work, "bench", step)
    out += [f"{result['world_size']} rank(s), {result['backend']}, {result['dtype']}; wrong elements: "
            f"{result['wrong']}; average busbw {result['avg_busbw'] or 0:.2f} GB/s", "",
            "| op | peak busbw (GB/s) | at size | time there (µs) |", "|---|---|---|---|"]
    for op in dict.fromkeys(r["op"] for r in result["rows"]):
        best = max((r for r in result["rows"] if r["op"] == op), key=lambda r: r["busbw"])
        out.append(f"| {op} | {best['busbw']:.2f} | {best['size']} | {best['time_us']:.1f} |")
    out += [""] + [f"- note: {code(n)}" for n in result.get("notes", [])] + [""]
    return out


def _memory_and_mfu(work: Path, steps: dict) -> list[str]:
    out = ["## Memory predicted against measured; tokens/s and MFU (gpt small, bf16, 8 × 1024 tokens per rank)", ""]
    memory = load(work, "memory")
    predicted = {p["strategy"]: p["peak_bytes"] for p in memory["predictions"]} if memory else {}
    if not memory:
        out += _missing(work, "memory", steps.get("memory"))
    out += ["| strategy | predicted peak | measured allocator peak | measured process peak | tokens/s | MFU | |",
            "|---|---|---|---|---|---|---|"]
    for strategy in ("ddp", "zero1", "fsdp"):
        name = f"train_{strategy}"
        result = load(work, name)
        if not result:
            out.append(f"| {strategy} | {gib(predicted.get(strategy))} | - | - | - | - | {outcome(steps.get(name))}: "
                       f"{code(last_line(work, name) or 'no output')} |")
            continue
        r0 = result["ranks"][0]
        allocator = r0.get("allocator_peak_mb")
        mfu = "-" if result.get("mfu") is None else f"{100 * result['mfu']:.1f} %"
        out.append(f"| {strategy} | {gib(predicted.get(strategy))} | "
                   f"{'-' if allocator is None else gib(allocator * 2**20)} | {gib(r0['peak_memory_mb'] * 2**20)} | "
                   f"{result.get('tokens_per_sec') or 0:,.0f} | {mfu} | {code(result.get('mfu_note', ''))} |")
    return out + [""]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--gpus", type=int, required=True)
    p.add_argument("--seconds", type=int, default=0)
    args = p.parse_args()
    args.out.write_text(render(args.work, args.gpus, args.seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
