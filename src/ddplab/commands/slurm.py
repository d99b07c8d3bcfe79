"""`ddplab slurm`: an sbatch script that runs a recipe or a script on several nodes, each under `ddplab launch`.

    ddplab slurm --nnodes 4 --nproc-per-node 8 --checkpoint-dir ckpt gpt --layers 12

srun starts one `ddplab launch` per node; they meet through torchrun's c10d rendezvous on the allocation's first
node; each starts one rank per GPU and writes its own log. Slurm's signal before the end (`--signal`) is passed to
every node: the ranks save, exit 4, and the script requeues the job, which resumes where it stopped.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

from ddplab import cliargs, report
from ddplab.engines import job as jobs
from ddplab.engines import slurm as writer
from ddplab.errors import DdplabError

TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")  # Slurm's forms: MM, HH:MM:SS, D-HH, D-HH:MM:SS ...


def _time(text: str) -> str:
    if not TIME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm time limit: use HH:MM:SS or D-HH:MM:SS")
    return text


def _add_own(p, defaults: bool = True) -> None:
    def d(value):
        return value if defaults else argparse.SUPPRESS

    cliargs.engine_flags(p, defaults, nodes_alias=True)
    p.add_argument("--cpus-per-node", type=cliargs.positive_int, default=d(8), help="CPU cores per node (default 8)")
    p.add_argument("--time", type=_time, default=d("01:00:00"), help="wall-clock limit (default 01:00:00)")
    p.add_argument("--partition", default=d(None), help="Slurm partition (default: the cluster's)")
    p.add_argument("--log-dir", default=d("logs"), help="where the job's and the nodes' logs go (default logs/)")


def add_parser(sub) -> None:
    cliargs.add_engine_parser(sub, "slurm", "an sbatch script", __doc__.split("\n\n")[0], _add_own, run)


def run(args) -> int:
    cliargs.take_engine_flags(args, "slurm", _add_own)
    job = jobs.from_args(args, "slurm")
    out = Path(args.output) if args.output else jobs.default_output(job, ".sbatch")
    command = jobs.command_line(args)
    spec = writer.SlurmSpec(args.time, args.partition, args.cpus_per_node, args.log_dir)
    text = writer.render(job, spec, command, str(out))
    jobs.write(out, text, args.force, 0o755)
    try:  # Slurm opens --output before the script runs: a missing folder fails the job with no log at all
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DdplabError(f"cannot create --log-dir {args.log_dir}: {e.strerror}: choose a writable folder") from None
    result = jobs.Written("slurm", str(out), f"sbatch {shlex.quote(str(out))}", job.nnodes, job.nproc_per_node)
    report.emit(result, getattr(args, "json", False), jobs.render)
    return 0
