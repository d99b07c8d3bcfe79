"""`ddplab sky`: a SkyPilot task YAML that runs a recipe or a script on several (spot) nodes under `ddplab launch`.

    ddplab sky --nnodes 2 --nproc-per-node 8 --accelerator H100 --checkpoint-dir /ckpt --bucket s3://me/ckpt train.py

Submit it with `sky jobs launch FILE`: a managed job, which SkyPilot brings back after a spot preemption and restarts
on ddplab's exit codes 4 (saved) and 3 (hang); each node's `ddplab launch` meets node 0 (SKYPILOT_NODE_IPS' first).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ddplab import cliargs, report
from ddplab.engines import job as jobs
from ddplab.engines import sky as writer


def _add_own(p, defaults: bool = True) -> None:
    def d(value):
        return value if defaults else argparse.SUPPRESS

    cliargs.engine_flags(p, defaults)
    p.add_argument("--accelerator", default=d("H100"), help="the GPU's name as SkyPilot spells it (default H100)")
    p.add_argument("--on-demand", action="store_true", default=d(False), help="on-demand instances, not spot")
    p.add_argument("--bucket", default=d(None), help="s3://... or gs://...: mounted at --checkpoint-dir on every node")
    p.add_argument(
        "--autostop", type=cliargs.positive_int, default=d(10), help="idle minutes before a cluster stops (default 10)"
    )


def add_parser(sub) -> None:
    cliargs.add_engine_parser(sub, "sky", "a SkyPilot task", __doc__.split("\n\n")[0], _add_own, run)


def run(args) -> int:
    cliargs.take_engine_flags(args, "sky", _add_own)
    job = jobs.from_args(args, "sky")
    out = Path(args.output) if args.output else jobs.default_output(job, ".sky.yaml")
    spec = writer.SkySpec(spot=not args.on_demand, bucket=args.bucket, autostop=args.autostop)
    jobs.write(out, writer.render(job, spec, jobs.command_line(args), str(out)), args.force)
    result = jobs.Written("sky", str(out), f"sky jobs launch {shlex.quote(str(out))}", job.nnodes, job.nproc_per_node)
    report.emit(result, getattr(args, "json", False), jobs.render)
    return 0
