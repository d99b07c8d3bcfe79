"""`ddplab launch [--hang-timeout S] [--no-lint] [--json] [torchrun options] SCRIPT [script args]`: torchrun with a
safety net. A drop-in swap: every torchrun option means what it means to torchrun, because torchrun's own parser
(torch.distributed.run.get_args_parser) reads them and torchrun's own launch path (torch.distributed.run.run)
starts the workers; `-m module` works too.

Around torchrun it adds:
- before starting: `ddplab lint` on the script (warnings only) and preflight checks: a busy port on a single node
  is swapped for a free one (and said so); nccl hard-coded with more processes than GPUs stops here, exit 2;
- the ranks: one per visible GPU, else 2 CPU ranks, as every ddplab command (torchrun's default is 1);
- per-rank logs (torchrun's --log-dir/--redirects/--tee): kept in --log-dir when given; otherwise in a temporary
  folder that is removed when the run passes and kept when it fails; the last line says which (`logs: PATH`, a
  folder `ddplab explain PATH` reads);
- when a rank fails: the first failure (rank, exit code, traceback tail), then `ddplab explain`'s diagnosis, exit 1;
- `--profile [STEPS]`: torch.profiler over STEPS optimizer steps in every rank (no change to the script): each
  rank's step split into its parts, the straggler, the causes of lost speed ranked with fix and expected gain,
  Chrome traces and a PNG in the run's folder, which is kept (docs/profile.md);
- the sanitizer, on by default (--sanitize-steps 50; 0 turns it off): every rank's first N optimizer steps watched
  for DDP mistakes (the same samples on several ranks, an epoch repeating the last one's order, parameters that
  differ between ranks after a step, several ranks writing one file); what it saw comes after the verdict, with the
  evidence, the line and the fix (docs/sanitize.md);
- a hang watchdog, on by default (--hang-timeout 60; 0 turns it off): no output for that long, confirmed by idle
  CPU or every rank seen in the same distributed wait twice -> every rank's Python stack (py-spy), where each one
  is stuck, related lint findings, every worker ended, exit 3;
- the machine taken away: SIGTERM/SIGUSR1/SIGUSR2 to ddplab is passed to every rank as SIGTERM; a script using
  ddplab.resume saves at the same step on every rank within --grace S (default 30), then everything is ended:
  "preempted (SIGTERM), state saved at step N", exit 4 (nothing saved: exit 1). A rank still running 3 s after
  the save is named with what it was doing, then ended. `--preemption-notice aws|gcp|URL` also polls the
  machine's metadata for a notice that comes as no signal (AWS's two-minute warning) and stops the same way;
- `--budget AMOUNT --price P` (per GPU-hour; or --gpu/--provider from the price table): once the job has cost that
  much since the launch (P x this machine's ranks, or its GPUs in whole boxes), it stops the same way: saved, exit 4,
  resumable; a warning at 80 %. The budget is per launch: the resumed run counts afresh.

The agent (torchrun) runs in a process group of its own, so that every worker can always be ended.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ddplab import cliargs, report
from ddplab.errors import DdplabError
from ddplab.perf import spend

USAGE = (
    "ddplab launch [--hang-timeout S] [--grace S] [--no-lint] [--json] [--profile [STEPS]] [--sanitize-steps N] "
    "[--preemption-notice aws|gcp|URL] [--budget AMOUNT --price P] [torchrun options] SCRIPT [args]"
)


def add_parser(sub) -> None:
    # torchrun's parser reads the arguments inside run(): importing it costs a torch import that `ddplab --help`
    # must not pay. A NUL prefix char means argparse sees no option here and hands every argument over untouched.
    p = sub.add_parser(
        "launch",
        help="run any script under torchrun with preflight checks and a hang watchdog",
        add_help=False,
        prefix_chars="\0",
        usage=USAGE,
    )
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(run=run)


def build_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.prog = "ddplab launch"
    parser.usage = USAGE  # torchrun's generated usage lists its ~25 options before ddplab's own
    parser.description = (
        "torchrun with a safety net: lint and preflight before, per-rank logs, root cause and "
        "diagnosis after a failure, stacks of every rank on a hang. Takes torchrun's options."
    )

    def error(message: str):
        raise DdplabError(f"{message} (see `ddplab launch --help`)")

    parser.error = error
    group = parser.add_argument_group("ddplab")
    cliargs.add_hang_timeout(
        group,
        "launch",
        off=True,
        extra="; a script's progress is its output, and its silence counts only once idle "
        "CPU or every rank seen in the same distributed wait twice confirms it",
    )
    cliargs.add_grace(group)
    cliargs.add_budget(group, "this job, counted from the launch: it saves and ends as on a preemption (exit 4)")
    cliargs.add_preemption_notice(group)
    group.add_argument("--no-lint", action="store_true", help="skip `ddplab lint` on the script before starting")
    group.add_argument(
        "--json",
        action="store_true",
        help="print the result as one JSON object on stdout (the script's own output goes to stderr)",
    )
    cliargs.add_profile(group)
    cliargs.add_sanitize(group)
    # ddplab's own options first in --help: torchrun's ~60 lines come after, for those who need them.
    groups = parser._action_groups
    groups.insert(0, groups.pop(groups.index(group)))
    for g in groups[1:]:
        if g.title in ("options", "optional arguments"):
            g.title = "torchrun's options (they mean what they mean to torchrun)"
    parser.add_argument("--nproc", dest="nproc_per_node", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    for action in parser._actions:
        if action.dest == "nproc_per_node" and action.help != argparse.SUPPRESS:
            # Every ddplab command starts one rank per GPU, else 2 CPU ranks: one rank is not distributed training.
            # torchrun's own default (1) still comes from PET_NPROC_PER_NODE when that is set.
            action.help += " ddplab: default one per visible GPU, else 2 CPU ranks (torchrun's is 1)."
            if "PET_NPROC_PER_NODE" not in os.environ:
                action.default = None
        if action.dest == "log_dir":
            action.help = (
                "keep every rank's stdout/stderr here (DIR/RUN_ID/attempt_N/LOCAL_RANK/std*.log); "
                "ddplab: without it they are kept in a temporary folder only when the run fails"
            )
    return parser


def run(args) -> int:
    started = time.time()  # the hang clock includes start-up: nothing printed since launch counts
    argv = list(args.argv)
    if not argv or argv[0] in ("-h", "--help"):
        build_parser().print_help(sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    from ddplab.launcher.script import EarlyAgent, run_script
    from ddplab.perf import profhook  # each rank is told where --profile's config would be; read only if written
    from ddplab.sanitize import readout as sanitizer  # and the sanitizer's

    # The agent first: it imports torch (seconds; this process never does) and reads the options with torchrun's parser.
    early = EarlyAgent(rank_folders={profhook.DIR_ENV: "profile", sanitizer.DIR_ENV: "sanitize"})
    try:
        ns, hang_timeout, lint, as_json, grace, profile_steps, sanitize_steps, pricing, notice_source = _options(
            early.parser(build_parser), argv
        )
        asked_logs = ns.log_dir is not None  # torchrun's --log-dir (or PET_LOG_DIR): the user keeps them there
        if not asked_logs:
            ns.log_dir = str(early.folder)
        script_pos = argv.index(ns.training_script) if ns.training_script in argv else len(argv)
        from ddplab.userscript.plan import preflight

        plan = preflight(ns, argv[:script_pos], lint, early)
        if plan.max_nodes > 1:  # several nodes: the cross-node preflight, before any rank (imports torch)
            from ddplab.checks.crossnode import for_launch

            for_launch(ns, plan.nproc, plan.max_nodes)
    except BaseException:  # bad input, --help after other options, Ctrl-C: the early agent must not outlive this
        early.cancel()
        raise
    from ddplab.userscript.analysis import analyse

    for note in plan.notes:
        report.log(f"ddplab launch: {note}")
    if hang_timeout is None:
        report.log("ddplab launch: hang watchdog off (--hang-timeout 0)")
    if profile_steps:
        from ddplab.perf import profile

        profile.request(early.folder / "profile", profile_steps)
    sanitizer.request(early.folder / "sanitize", sanitize_steps)  # the findings: analyse() reads them
    budget = spend.budget(pricing, plan.nproc, since=started)  # this machine's ranks, from the command's start
    if budget is not None:
        report.log(f"ddplab launch: {budget.announce()}")
    ran = run_script(
        early,
        vars(ns),
        plan.log_dir,
        hang_timeout,
        since=started,
        output=sys.stderr if as_json else sys.stdout,
        grace=grace,
        budget=budget,
        notice_source=notice_source,
        port_may_move=plan.port_may_move,
    )
    if ran.status == "preempted":  # the machine is being taken away: say where the state is, nothing more
        from ddplab.launcher.preempt import outcome
        from ddplab.stamps import stamp

        stopped = outcome(ran.preempted["signal"], grace, ran.note, ran.lingering)
        _clean(plan.log_dir, asked_logs, keep=False)
        report.emit(stopped, as_json, lambda con, r: con.print("ddplab launch: " + "\n".join(r.lines()), markup=False))
        stamp("launch", "said")
        return stopped.exit_code
    if ran.status == "failed" and ran.note.get("refused"):  # ddplab.resume stopped every rank on bad input
        _clean(plan.log_dir, asked_logs, keep=False)
        raise DdplabError(ran.note["refused"])
    result = analyse(ns, plan, ran, hang_timeout)
    if profile_steps:  # the traces and the picture are the point of the run: its folder is kept
        result.profile, asked_logs = profile.analyse(Path(plan.log_dir) / "profile"), True
        result.log_dir = str(plan.log_dir)
    # A run that passed leaves nothing behind unless the user asked for its logs; a failed one keeps them.
    if _clean(plan.log_dir, asked_logs, keep=result.status != "ok"):
        result.log_dir = None
        for rank in result.ranks:
            rank.log = None
    report.emit(result, as_json, render)
    return result.exit_code


BUDGET_FLAGS = ("budget", "price", "currency", "gpu", "provider", "tier")  # cliargs.add_budget's


def _options(parser, argv: list[str]):
    """torchrun's options (for the agent) and ddplab's own, apart; the rank count defaults as every command's."""
    ns = parser.parse_args(_bare_profile(argv, len(argv)))
    if ns.training_script in argv:  # a `--profile` among the script's own arguments is the script's
        ns = parser.parse_args(_bare_profile(argv, argv.index(ns.training_script)))
    from ddplab.launcher import notice  # its endpoint must answer now, or the run would never hear of its end

    pricing = argparse.Namespace(**{name: getattr(ns, name) for name in BUDGET_FLAGS})
    spend.rate(pricing)  # bad input before anything starts
    ours = (
        ns.hang_timeout,
        not ns.no_lint,
        ns.json,
        ns.grace,
        ns.profile,
        ns.sanitize_steps,
        pricing,
        notice.checked(ns.preemption_notice),
    )
    for name in (
        "hang_timeout",
        "no_lint",
        "json",
        "grace",
        "profile",
        "sanitize_steps",
        *BUDGET_FLAGS,
        "preemption_notice",
    ):
        delattr(ns, name)
    if ns.nproc_per_node is None:
        from ddplab.envinfo import cuda_available

        ns.nproc_per_node = "gpu" if cuda_available() else "2"
    return (ns, *ours)


def _bare_profile(argv: list[str], end: int) -> list[str]:
    """`--profile` takes an optional STEPS: a bare one followed by anything but a number means the default (argparse
    would read the script's path as STEPS)."""

    def bare(i: int) -> bool:
        return i < end and argv[i] == "--profile" and not (i + 1 < len(argv) and argv[i + 1].isdigit())

    return [f"--profile={cliargs.PROFILE_STEPS}" if bare(i) else a for i, a in enumerate(argv)]


def _clean(log_dir, asked: bool, keep: bool) -> bool:
    """Remove the run's own temporary folder unless it is to be kept; True when it was removed."""
    import shutil

    if asked or keep:
        return False
    shutil.rmtree(log_dir, ignore_errors=True)
    return True


def render(con, r) -> None:
    from ddplab.sanitize.readout import render as render_sanitize

    status = {"ok": "PASS", "failed": "FAIL", "hang": "TIMEOUT", "interrupted": "WARN"}[r.status]
    con.print(report.text("ddplab launch: ", report.styled(status), f" {r.summary}"))
    sanitized = render_sanitize(r.sanitize)  # after the verdict; first when the run failed on what it saw
    if sanitized and r.sanitize.leading:
        con.print(sanitized, markup=False, highlight=False)
    # A failure leads with its answer (issue 42 point 4): what failed (the verdict), why and the fix, the warning that
    # foretold it; the evidence after it (stacks, the other ranks, the Flight Recorder), each once.
    if r.status == "hang":
        from ddplab.launcher.stacks import brief

        _render_lint(con, r.related_lint, "likely cause", r.command)
        if r.fix:
            con.print(f"  fix: {r.fix}", markup=False)
        for rank in r.ranks:
            who = f"rank {rank.rank}" if rank.rank is not None else f"pid {rank.pid}"
            con.print(f"  {who} (pid {rank.pid}): in {rank.stuck_in or 'no distributed call'} at {rank.where or '?'}")
            if rank.stack:
                con.print(brief(rank.stack), markup=False)
        _render_flight(con, r.flight)
        con.print("  every worker was ended")
    elif r.status == "failed":
        _render_failure(con, r)
    if r.profile is not None:
        from ddplab.perf.profile import render as render_profile

        render_profile(con, r.profile)
    if sanitized and not r.sanitize.leading:
        con.print(sanitized, markup=False, highlight=False)
    # One line, last, that `ddplab explain` takes as it is: a folder of per-rank logs.
    con.print(
        f"  logs: {r.log_dir}"
        if r.log_dir
        else "  logs: none kept (the run passed; --log-dir DIR keeps every rank's output)"
    )


def _render_failure(con, r) -> None:
    root = next((rank for rank in r.ranks if rank.rank == r.root_cause), None)
    if r.cause is not None:
        con.print(f"  cause: {r.cause.text}:")
        con.print(f"    {r.cause.code}", markup=False)
    _render_lint(con, r.related_lint, "lint saw it before the run", r.command)
    if r.explanation is not None:
        from ddplab.explain.matcher import render as render_explanation  # 0.3 s: only when there is one

        con.print(report.text(report.bold("diagnosis"), " (ddplab explain):"))
        render_explanation(con, r.explanation, show_root=False)
    if root is not None and root.traceback:
        where = f"{root.log or ''}/stderr.log"
        if r.echoed:  # the console showed it as it came: once is enough
            con.print(f"  rank {root.rank}'s traceback: above, as it printed it, and in {where}", markup=False)
        else:
            con.print(f"  rank {root.rank}'s last lines ({where}):", markup=False)
            con.print("\n".join(f"    {line}" for line in root.traceback.splitlines()), markup=False)
    for rank in r.ranks:
        if rank is not root:
            con.print(f"  rank {rank.rank}: exit code {rank.exitcode}" + (f": {rank.error}" if rank.error else ""))
    _render_flight(con, r.flight)


def _render_lint(con, findings, title: str, command: list[str]) -> None:
    script = Path(command[0]).name if command else ""
    for f in findings:
        where = (
            f"{f.path}:{f.line}" if getattr(f, "path", None) else f"{script}:{f.line}" if script else f"line {f.line}"
        )
        con.print(f"  {title} — {where}: {f.message} [{f.rule}]")
        con.print(f"      fix: {f.fix}")


def _render_flight(con, report) -> None:
    if report is not None and report.available:
        from ddplab.flight.reader import render as render_flight

        con.print(render_flight(report), markup=False, highlight=False)
