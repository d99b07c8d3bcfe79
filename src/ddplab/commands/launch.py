"""`ddplab launch [--hang-timeout S] [--no-lint] [--json] [torchrun options] SCRIPT [script args]`: torchrun with a
safety net. A drop-in swap: every torchrun option means what it means to torchrun, because torchrun's own parser
(torch.distributed.run.get_args_parser) reads them and torchrun's own launch path (torch.distributed.run.run)
starts the workers; `-m module` works too.

Around torchrun it adds:
- before starting: `ddplab lint` on the script (warnings only) and preflight checks: a busy port on a single node
  is swapped for a free one (and said so); nccl hard-coded with more processes than GPUs stops here, exit 2;
- per-rank logs (torchrun's --log-dir/--redirects/--tee) always kept, in a directory it names;
- when a rank fails: the first failure (rank, exit code, traceback tail), then `ddplab explain`'s diagnosis, exit 1;
- --hang-timeout S: no progress for S seconds -> every rank's Python stack (py-spy), where each one is stuck,
  related lint findings, every worker ended, exit 3.

The agent (torchrun) runs in a process group of its own, so that every worker can always be ended.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

from ddplab import report
from ddplab.errors import DdplabError


def add_parser(sub) -> None:
    # torchrun's parser reads the arguments inside run(): importing it costs a torch import that `ddplab --help`
    # must not pay. A NUL prefix char means argparse sees no option here and hands every argument over untouched.
    p = sub.add_parser("launch", help="run any script under torchrun with preflight checks and a hang watchdog",
                       add_help=False, prefix_chars="\0",
                       usage="ddplab launch [--hang-timeout S] [--no-lint] [--json] [torchrun options] SCRIPT [args]")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(run=run)


def build_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "ddplab launch"
    parser.description = ("torchrun with a safety net: lint and preflight before, per-rank logs, root cause and "
                          "diagnosis after a failure, stacks of every rank on a hang. Takes torchrun's options.")

    def error(message: str):
        raise DdplabError(f"{message} (see `ddplab launch --help`)")

    parser.error = error
    group = parser.add_argument_group("ddplab")
    group.add_argument("--hang-timeout", type=float, default=None, metavar="S",
                       help="no output for S seconds and idle CPU (or every rank waiting in a rendezvous or "
                            "collective): dump every rank's stack, end all workers, exit 3")
    group.add_argument("--no-lint", action="store_true", help="skip `ddplab lint` on the script before starting")
    group.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout "
                                                           "(the script's own output goes to stderr)")
    parser.add_argument("--nproc", dest="nproc_per_node", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def run(args) -> int:
    started = time.time()  # the hang clock includes start-up: nothing printed since launch counts
    argv = list(args.argv)
    parser = build_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help(sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    ns = parser.parse_args(argv)
    hang_timeout, lint, as_json = ns.hang_timeout, not ns.no_lint, ns.json
    for name in ("hang_timeout", "no_lint", "json"):
        delattr(ns, name)
    if hang_timeout is not None and hang_timeout <= 0:
        raise DdplabError(f"--hang-timeout {hang_timeout:g}: give a positive number of seconds")
    script_pos = argv.index(ns.training_script) if ns.training_script in argv else len(argv)
    from ddplab.launcher.script import run_script
    from ddplab.userscript.analysis import analyse
    from ddplab.userscript.plan import preflight

    plan = preflight(ns, argv[:script_pos], lint)
    for note in plan.notes:
        report.log(f"ddplab launch: {note}")
    report.log(f"ddplab launch: per-rank logs in {plan.log_dir}")
    ran = run_script(vars(ns), plan.log_dir, hang_timeout, since=started, output=sys.stderr if as_json else sys.stdout)
    result = analyse(ns, plan, ran, hang_timeout)
    report.emit(result, as_json, render)
    return result.exit_code


def render(con, r) -> None:
    from rich.markup import escape

    from ddplab.diagnose.explain import render as render_explanation

    status = {"ok": "PASS", "failed": "FAIL", "hang": "TIMEOUT", "interrupted": "WARN"}[r.status]
    con.print(f"ddplab launch: {report.styled(status)} {escape(r.summary)}")
    if r.status == "hang":
        for rank in r.ranks:
            who = f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"
            con.print(f"  {who} (pid {rank.pid}): " + escape(f"in {rank.stuck_in or 'no distributed call'} at "
                                                            f"{rank.where or '?'}"))
            if rank.stack:
                con.print(_brief(rank.stack), markup=False)
        _render_flight(con, r.flight)
        for f in r.related_lint:
            con.print(escape(f"  likely cause — {f.path + ':' if f.path else 'line '}{f.line}: {f.message}"))
            con.print(escape(f"      fix: {f.fix}"))
        con.print(f"  every worker was ended; per-rank logs: {escape(r.log_dir)}")
    elif r.status == "failed":
        root = next((rank for rank in r.ranks if rank.rank == r.root_cause), None)
        if root is not None and root.traceback:
            con.print(f"  rank {root.rank}'s last lines ({escape(root.log or '')}/stderr.log):")
            con.print("\n".join(f"    {line}" for line in root.traceback.splitlines()), markup=False)
        for rank in r.ranks:
            if rank is not root:
                con.print(escape(f"  rank {rank.rank}: exit code {rank.exitcode}"
                                 + (f": {rank.error}" if rank.error else "")))
        _render_flight(con, r.flight)
        if r.explanation is not None:
            con.print("[bold]diagnosis[/] (ddplab explain):")
            render_explanation(con, r.explanation, show_root=False)
        con.print(f"  per-rank logs: {escape(r.log_dir)}")
    else:
        con.print(f"  per-rank logs: {escape(r.log_dir)}")


def _render_flight(con, report) -> None:
    if report is not None and report.available:
        from ddplab.diagnose.flight import render as render_flight

        con.print(render_flight(report), markup=False, highlight=False)


def _brief(stack: str) -> str:
    """The script's own frames as they are; torch's frames below them folded into one line of names."""
    out, inside = [], []
    for line in stack.splitlines():
        m = re.match(r'\s*File "(.*)", line \d+, in (.*)', line)
        if m and f"{os.sep}torch{os.sep}" in m.group(1):
            name = m.group(2).rsplit(".", 1)[-1]
            if name != "wrapper":  # torch's logging decorators
                inside.append(name)
            continue
        if inside:
            out.append(f"      in torch: {' > '.join(inside)}")
            inside = []
        out.append(f"    {line.strip()}")
    if inside:
        out.append(f"      in torch: {' > '.join(inside)}")
    return "\n".join(out)
