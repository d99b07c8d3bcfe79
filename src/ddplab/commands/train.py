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

# The ranks' process-group timeout exceeds the stall timeout by this much: the stall detector names the hang (stacks,
# Flight Recorder) before a collective gives up (gloo: an error on one rank; NCCL: an abort), as check and bench do.
GROUP_TIMEOUT_MARGIN_S = 60.0


def group_timeout_s(stall_timeout: float) -> float:
    """The ranks' process-group timeout for a stall timeout: never below torch's default, always past the stall
    timeout (the group's 60 s once ended a `--stall-timeout 70` run first, with gloo's message instead of the hang)."""
    from ddplab.dist import DEFAULT_TIMEOUT_S

    return max(stall_timeout + GROUP_TIMEOUT_MARGIN_S, DEFAULT_TIMEOUT_S)


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


def _guess(argv: list[str]):
    """The launcher flags, when they already say how many ranks: the agent can start (and import torch, ~2 s)
    before this process imports torch and checks the rest."""
    if "-h" in argv or "--help" in argv:
        return None
    quick = argparse.ArgumentParser(add_help=False)
    launcher_arguments(quick)
    try:
        launch, _ = quick.parse_known_args(argv)
        launch.nodes = cliargs.nodes_from(launch)
    except (SystemExit, DdplabError):  # bad flags: the full parse below says what is wrong
        return None
    if launch.nproc is None or launch.nproc < 1 or launch.max_restarts < 0:
        return None
    return launch


def run(args) -> int:
    from ddplab.launcher import startup
    from ddplab.perf import profhook, profile
    from ddplab.sanitize import readout as sanitizer
    from ddplab.train.ranks import start_ranks

    early = launch = _guess(args.args)  # the same flags the full parse reads, when they parse
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

    with startup.early(start, early.nproc if early else None) as ranks:
        cfg, ns, nproc, device = _checked(args)
        if ns.profile:
            profile.request(args.profile_dir, ns.profile)
        ns.profile_dir, ns.sanitize_dir = args.profile_dir, args.sanitize_dir
        if early is None:
            ns.nodes, launch = cliargs.nodes_from(ns), ns
        if launch.nodes is not None:  # several nodes: the cross-node preflight, before any rank (checks/crossnode.py)
            from ddplab.checks import crossnode

            crossnode.require(crossnode.own_ranks(launch.nodes, "nccl" if device == "cuda" else "gloo", nproc))
        from ddplab.train.loop import PREDICTION_GRACE_S

        pending = ranks.get(nproc)
        # `ddplab memory`'s prediction of the run's peak, traced while the ranks start and train, in a fork of their
        # agent, which has imported torch._dynamo and the recipe already (here, the trace's import of them cost
        # ~1.9 CPU s a run). A fork, not a thread: on GPUs a fake CUDA tensor makes a real one on the current GPU
        # (torch/_subclasses/fake_tensor.py, init_gpu_context), and the tracer holds that CUDA context, on rank 0's
        # GPU, until its process ends; the fork ends with its answer.
        world = nproc * (launch.nodes.count if launch.nodes is not None else 1)
        request = {"recipe": args.recipe, "config": cfg.to_dict(), "strategy": cfg.strategy, "nproc": world}
        predicting = pending.fork(
            "ddplab.perf.memory:predicted_peak",
            {**request, "device": device},
            wait_s=PREDICTION_GRACE_S,
            on_wait=lambda: report.log("waiting for the memory prediction (`ddplab memory`'s trace of this run) ..."),
        )
        sanitizer.request(args.sanitize_dir, ns.sanitize_steps)
        try:
            return _run(pending, args.recipe, cfg, ns, predicting)
        finally:
            predicting.cancel()
            shutil.rmtree(args.sanitize_dir, ignore_errors=True)


def _checked(args):
    """Every check that needs no worker: flags, device, checkpoint directory, a --resume that cannot fit."""
    import torch

    from ddplab import ckptfile
    from ddplab.train import loop
    from ddplab.train.config import from_arguments, parser

    recipe = loop.load_recipe(args.recipe)
    ns = parser(
        recipe.config,
        f"ddplab train {args.recipe}",
        kind=cliargs.Parser,
        before=launcher_arguments,
        title=f"{args.recipe} recipe",
    ).parse_args(args.args)
    cfg = from_arguments(recipe.config, ns)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nproc = ns.nproc if ns.nproc is not None else (gpus or 2)
    if nproc < 1:
        raise DdplabError(f"--nproc {nproc}: need at least 1 rank")
    device = "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and gpus) else "cpu"
    if device == "cuda" and nproc > gpus:
        raise DdplabError(f"--nproc {nproc} but {gpus} GPU(s) are visible: use --nproc {gpus or 1}, or --device cpu")
    if ns.max_restarts < 0:
        raise DdplabError(f"--max-restarts {ns.max_restarts}: must be 0 or more")
    loop.preflight(cfg)
    cfg.check_device(device)
    if device == "cpu":  # the ranks share this machine's RAM: refuse what cannot fit before any rank starts
        from ddplab.train.hostfit import require_fits

        require_fits(args.recipe, cfg, nproc)
    _environment(nproc, device)
    if cfg.resume:  # a checkpoint of another recipe or shape fails now rather than after the workers start
        newest = ckptfile.listed(cfg.checkpoint_path)[0][1]
        state = ckptfile.peek(newest)
        if state is not None:
            loop.check_compatible(state, args.recipe, cfg, newest)
    return cfg, ns, nproc, device


def _environment(nproc: int, device: str) -> None:
    """`ddplab check`'s environment preflight (interface names, CUDA_VISIBLE_DEVICES, threads ...) before any
    rank starts: a failure is bad input, a warning is shown on stderr."""
    from ddplab.checks.preflight import environment_findings

    for f in environment_findings(nproc, device, "nccl" if device == "cuda" else "gloo", ranks_vs_devices=False):
        if f.level == "fail":
            raise DdplabError(f"{f.what}: {f.fix}")
        if f.level == "warn":
            report.log(f"WARN {f.what}\n      fix: {f.fix}")


def _run(pending, recipe: str, cfg, ns, predicting) -> int:
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
                "config": cfg.to_dict(),
                "group_timeout": group_timeout_s(ns.stall_timeout),
            },
            stall_timeout=ns.stall_timeout,
            on_event=on_event,
            grace=ns.grace,
        )
    finally:
        view.close()
    if outcome.ok and all(r.rank != 0 for r in outcome.ranks):  # another node holds rank 0 and its result
        report.emit(NodeDone([r.rank for r in outcome.ranks], outcome.seconds), cfg.json, render_node)
        return 0
    if outcome.ok and "preempted" in outcome.rank(0).result:  # every rank stopped after the same step, saved
        from ddplab.stamps import stamp
        from ddplab.train.loop import Preempted

        stopped = Preempted(**outcome.rank(0).result["preempted"])
        report.emit(stopped, cfg.json, lambda con, r: con.print(r.line(), markup=False, soft_wrap=True))
        stamp("launch", "said")
        # Every rank has ended and the line is out; the machine is going away. This process imported torch: its
        # interpreter teardown took 3.1 s of the 3.6 s from the signal to the exit here (load ~10, 2 cores;
        # ddplab/stamps.py). So: flushed, then gone, as launch's ranks leave.
        sys.stdout.flush()
        sys.stderr.flush()
        predicting.cancel()
        shutil.rmtree(ns.sanitize_dir, ignore_errors=True)  # what the caller's `finally` would have removed
        os._exit(stopped.exit_code)
    if outcome.ok:
        result = TrainResult.from_dict(outcome.rank(0).result)
        _add_prediction(result, predicting)
        if ns.profile:
            from ddplab.perf import profile

            result.profile = profile.analyse(ns.profile_dir)
        from ddplab.sanitize import readout

        result.sanitize = readout.read(ns.sanitize_dir)
        report.emit(result, cfg.json, render)
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
    report.emit(failure, cfg.json, render_failure)
    return {"hang": 3, "interrupted": 130}.get(outcome.status, 1)


def _add_prediction(result, predicting) -> None:
    """The traced prediction next to each rank's measured peak (one per run: the rank that needs most)."""
    from ddplab.train.loop import PREDICTION_GRACE_S
    from ddplab.train.memory import PredictedPeak

    if not predicting.done():  # run() waited this long for it after the ranks were done
        result.notes.append(
            f"no memory prediction: the trace took longer than the training plus {PREDICTION_GRACE_S:.0f}s; "
            "run `ddplab memory` for it"
        )
        return
    try:
        mib = PredictedPeak(predicting.result()["peak_bytes"]).peak_mib
    except DdplabError as e:
        result.notes.append(f"no memory prediction: memory prediction failed: {e}")
        return
    for r in result.ranks:
        r.predicted_peak_mb = mib
