"""`ddplab train RECIPE`: a reference DDP training on N local ranks, with proof that every rank worked.

The recipe runs through ddplab.launcher (PyTorch's elastic launcher underneath), exactly as it would under
`torchrun --nproc-per-node N -m ddplab.recipes.RECIPE`: same flags, same result. Workers' own output goes to log
files, so this process draws rank 0's progress bar from the events the workers send, then prints the result.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ddplab import cliargs, recipes, report
from ddplab.errors import DdplabError
from ddplab.train import flags
from ddplab.train.result import PREDICTION_GRACE_S


def add_parser(sub) -> None:
    names = recipes.names()
    p = sub.add_parser(
        "train",
        help=f"a reference DDP training ({', '.join(names)}) with per-rank proof",
        description="Run a reference DDP training on N local ranks and show what every rank did. "
        "`ddplab train RECIPE --help` lists the recipe's flags.",
    )
    p.add_argument("recipe", choices=names, help=" | ".join(names))
    p.add_argument("args", nargs=argparse.REMAINDER, help="launcher and recipe flags (see RECIPE --help)")
    p.set_defaults(run=run)


def launcher_arguments(p: argparse.ArgumentParser) -> None:
    launch = p.add_argument_group("launcher (torchrun's names)")
    launch.add_argument(
        "--nproc-per-node",
        "--nproc",
        dest="nproc",
        type=int,
        default=None,
        metavar="N",
        help="ranks to start (default: one per visible GPU, else 2 CPU ranks)",
    )
    launch.add_argument("--master-port", type=int, default=None, help="rendezvous port (default: a free one)")
    launch.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        help="restart the group this many times after a failure (default 0); with --checkpoint-dir "
        "it resumes from the latest checkpoint, without one it starts over",
    )
    cliargs.add_hang_timeout(launch, "train", "--stall-timeout", dest="stall_timeout")
    cliargs.add_profile(launch)
    cliargs.add_sanitize(launch)
    cliargs.add_grace(launch)
    cliargs.add_nodes(p)


def launcher_flags(argv: list[str]):
    """The launcher flags alone (the recipe's are left for checked()), with `nodes` (a bad combination is a
    DdplabError); None when they do not parse or ask for help: checked()'s full parse says what is wrong."""
    if "-h" in argv or "--help" in argv:
        return None
    quick = argparse.ArgumentParser(add_help=False)
    launcher_arguments(quick)
    try:
        launch, _ = quick.parse_known_args(argv)
    except SystemExit:
        return None
    launch.nodes = cliargs.nodes_from(launch)
    return launch


def checked(request: dict) -> dict:
    """flags.check() of `ddplab train RECIPE ARGV` (request: {"recipe", "argv"}), parsed here, as JSON: what the
    early agent's fork answers (_checked)."""
    import dataclasses

    from ddplab.train import loop
    from ddplab.train.config import parser

    name = request["recipe"]
    config = loop.load_recipe(name).config
    title = f"{name} recipe"
    ns = parser(config, f"ddplab train {name}", kind=cliargs.Parser, before=launcher_arguments, title=title)
    return dataclasses.asdict(flags.check(name, config, ns.parse_args(request["argv"])))


def run(args) -> int:
    from ddplab.launcher import startup
    from ddplab.perf import profhook, profile
    from ddplab.sanitize import readout as sanitizer
    from ddplab.train.ranks import start_ranks

    launch = launcher_flags(args.args)  # the same flags the full parse reads, when they parse
    # With --nproc the agent starts at once, imports torch while this process goes on, and checks the flags in a fork
    # (_checked). Without, they are checked here first (only torch can count the GPUs): bad input starts no process.
    guess = launch.nproc if launch is not None else None
    # Where the ranks look for --profile's request (they start before the flags are read): made only if asked.
    args.profile_dir = Path(tempfile.gettempdir()) / f"ddplab-profile-{os.getpid()}-{time.time_ns()}"
    # The sanitizer watches the recipe's first steps as it watches a user's script under `ddplab launch`: ddplab's
    # own trainings must come out clean (docs/sanitize.md). Its config is written before the ranks start.
    args.sanitize_dir = Path(tempfile.gettempdir()) / f"ddplab-sanitize-{os.getpid()}-{time.time_ns()}"

    def start(nproc: int):
        return start_ranks(
            nproc,
            launch.master_port,
            launch.max_restarts,
            launch.nodes,
            flight=True,
            env={profhook.DIR_ENV: str(args.profile_dir), sanitizer.DIR_ENV: str(args.sanitize_dir)},
            hooks=(f"{profhook.__name__}:install",),  # armed only if --profile writes its request
        )

    with startup.early(start, guess if guess and guess >= 1 else None) as ranks:
        run = _checked(args, ranks.pending)  # a launch that did not parse raises here
        if run.profile:
            profile.request(args.profile_dir, run.profile)
        nodes = launch.nodes if launch is not None else None  # None: checked() refused the flags already
        if nodes is not None:  # several nodes: the cross-node preflight, before any rank (checks/crossnode.py)
            from ddplab.checks import crossnode

            crossnode.require(crossnode.own_ranks(nodes, "nccl" if run.device == "cuda" else "gloo", run.nproc))
        pending = ranks.get(run.nproc)
        # `ddplab memory`'s prediction of the run's peak, traced while the ranks start and train, in a fork of their
        # agent, which has imported torch._dynamo and the recipe already (here, the trace's import of them cost
        # ~1.9 CPU s a run). A fork, not a thread: on GPUs a fake CUDA tensor makes a real one on the current GPU
        # (torch/_subclasses/fake_tensor.py, init_gpu_context), and the tracer holds that CUDA context, on rank 0's
        # GPU, until its process ends; the fork ends with its answer.
        world = run.nproc * (nodes.count if nodes is not None else 1)
        predicting = pending.fork(
            "ddplab.perf.memory:predicted_peak",
            {
                "recipe": args.recipe,
                "config": run.config,
                "strategy": run.strategy,
                "nproc": world,
                "device": run.device,
            },
            wait_s=PREDICTION_GRACE_S,
            on_wait=lambda: report.log("waiting for the memory prediction (`ddplab memory`'s trace of this run) ..."),
            background=True,
        )
        sanitizer.request(args.sanitize_dir, run.sanitize_steps)
        try:
            return _run(pending, args.recipe, run, args, predicting)
        finally:
            predicting.cancel()
            shutil.rmtree(args.sanitize_dir, ignore_errors=True)


def _checked(args, agent) -> flags.Checked:
    """checked() in a fork of the early agent when one runs, else here (no --nproc: only torch can count the GPUs;
    --help; flags that did not parse)."""
    from ddplab.launcher.forked import in_fork_or_here

    request = {"recipe": args.recipe, "argv": args.args}
    return flags.Checked(**in_fork_or_here(agent, f"{__name__}:checked", request))


def _run(pending, recipe: str, run: flags.Checked, args, predicting) -> int:
    """args: the run's folders (profile_dir, sanitize_dir)."""
    from ddplab.train.progress import ProgressView
    from ddplab.train.result import NodeDone, TrainFailure, TrainResult, render, render_failure, render_node

    view = ProgressView()
    errors: dict[int, tuple[str, int]] = {}

    def on_event(rank: int, event: dict) -> None:
        if event.get("phase") == "train.error":
            errors[rank] = (event["message"], event["exit_code"])
        view.on_event(rank, event)

    # The ranks import torch and meet before their first step: seconds in which nothing else would be said.
    view.console.print(f"starting {pending.nproc} rank(s) ...", markup=False, highlight=False)
    try:
        outcome = pending.run(
            {
                "recipe": recipe,
                "config": run.config,
                "group_timeout": run.group_timeout,
            },
            stall_timeout=run.stall_timeout,
            on_event=on_event,
            grace=run.grace,
        )
    finally:
        view.close()
    if outcome.ok and all(r.rank != 0 for r in outcome.ranks):  # another node holds rank 0 and its result
        report.emit(NodeDone([r.rank for r in outcome.ranks], outcome.seconds), run.json, render_node)
        return 0
    if outcome.ok and "preempted" in outcome.rank(0).result:  # every rank stopped after the same step, saved
        from ddplab.stamps import stamp
        from ddplab.train.result import Preempted

        stopped = Preempted(**outcome.rank(0).result["preempted"])
        report.emit(stopped, run.json, lambda con, r: con.print(r.line(), markup=False, soft_wrap=True))
        stamp("launch", "said")
        # Every rank has ended and the line is out; the machine is going away. This process imported torch: its
        # interpreter teardown took 3.1 s of the 3.6 s from the signal to the exit here (load ~10, 2 cores;
        # ddplab/stamps.py). So: flushed, then gone, as launch's ranks leave.
        sys.stdout.flush()
        sys.stderr.flush()
        predicting.cancel()
        shutil.rmtree(args.sanitize_dir, ignore_errors=True)  # what the caller's `finally` would have removed
        os._exit(stopped.exit_code)
    if outcome.ok:
        result = TrainResult.from_dict(outcome.rank(0).result)
        _add_prediction(result, predicting)
        if run.profile:
            from ddplab.perf import profile

            result.profile = profile.analyse(args.profile_dir)
        from ddplab.sanitize import readout

        result.sanitize = readout.read(args.sanitize_dir)
        report.emit(result, run.json, render)
        return 0 if result.status == "PASS" else 1
    if outcome.status == "failed" and outcome.root_cause in errors:  # a ddplab error inside a worker: bad input
        message, code = errors[outcome.root_cause]
        if outcome.run_dir:  # the message says it all: no logs to keep
            shutil.rmtree(outcome.run_dir, ignore_errors=True)
        raise DdplabError(message, exit_code=code)
    failure = TrainFailure(
        outcome.status,
        outcome.summary(),
        outcome.root_cause,
        [
            {
                "rank": r.rank,
                "phase": r.phase,
                "exitcode": r.exitcode,
                "error": r.error,
                "output_tail": r.output_tail,
                "stack": r.stack,
            }
            for r in outcome.ranks
        ],
        outcome.flight,
        outcome.run_dir,
    )
    report.emit(failure, run.json, render_failure)
    return {"hang": 3, "interrupted": 130}.get(outcome.status, 1)


def _add_prediction(result, predicting) -> None:
    """The traced prediction next to each rank's measured peak (one per run: the rank that needs most)."""
    if not predicting.done():  # run() waited this long for it after the ranks were done
        result.notes.append(
            f"no memory prediction: the trace took longer than the training plus {PREDICTION_GRACE_S:.0f}s; "
            "run `ddplab memory` for it"
        )
        return
    try:
        mib = predicting.result()["peak_bytes"] / 2**20  # perf.memory's Prediction.peak_mib
    except DdplabError as e:
        result.notes.append(f"no memory prediction: memory prediction failed: {e}")
        return
    for r in result.ranks:
        r.predicted_peak_mb = mib
