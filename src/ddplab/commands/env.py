"""`ddplab env`: the report a user pastes into a bug report, with a verdict."""

from __future__ import annotations

from rich.table import Table

from ddplab import report


def add_parser(sub) -> None:
    p = sub.add_parser("env", help="what is installed, what is visible, what is wrong with it")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(run=run)


def run(args) -> int:
    from ddplab import envinfo

    result = envinfo.collect()
    report.emit(result, args.json, render)
    return 0 if result.ok else 1  # a problem to fix is a failed check (exit codes in cli.py)


def render(con, r) -> None:
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    tv = r.torch
    t.add_row("python", f"{r.python['version']} ({r.python['executable']})")
    t.add_row("platform", f"{r.platform['system']} {r.platform['release']} {r.platform['machine']}")
    t.add_row(
        "torch",
        f"{tv['version']} — {tv['build']}"
        + (f", cuDNN {tv['cudnn']}" if tv["cudnn"] else "")
        + (f", NCCL {tv['nccl']}" if tv["nccl"] else ""),
    )
    t.add_row("backends", ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in r.backends.items()))
    t.add_row("driver", r.driver or "no NVIDIA driver")
    if r.devices:
        for d in r.devices:
            t.add_row(f"cuda:{d['index']}", f"{d['name']}, {d['total_memory_gib']} GiB, sm {d['compute_capability']}")
    else:
        t.add_row("devices", "no GPU visible: ddplab simulates devices with CPU processes on gloo")
    t.add_row("cpu", f"{r.cpu['physical_cores']} cores ({r.cpu['logical_cores']} logical)")
    t.add_row("memory", f"{r.memory['total_gib']} GiB RAM, /dev/shm {r.memory['shm_mib']} MiB")
    for k, v in r.env_vars.items():
        t.add_row(k, v)
    if not r.env_vars:
        t.add_row("variables", "none of RANK, WORLD_SIZE, MASTER_*, NCCL_*, TORCH_* ... are set")
    con.print(t)
    for w in r.warnings:
        report.finding(con, "WARN", w["problem"], w["fix"])
    n = len(r.warnings)
    con.print(
        report.text("verdict: ", report.styled("OK"), " nothing wrong found")
        if r.ok
        else report.text(
            "verdict: ",
            report.styled("FAIL"),
            f" {n} {'problem' if n == 1 else 'problems'} to fix before a distributed run",
        )
    )
