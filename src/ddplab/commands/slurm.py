"""`ddplab slurm`: an sbatch script that runs a recipe or a script on several nodes, in the standard pattern.

    ddplab slurm --nodes 4 --gpus-per-node 8 -o gpt.sbatch gpt --layers 12 --width 768

srun starts one torchrun per node; the torchruns meet through the c10d rendezvous on the job's first node (from
`scontrol show hostnames`); torchrun starts one worker per GPU; each node writes its own log.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ddplab import cliargs, recipes, report
from ddplab.errors import DdplabError

TIME = re.compile(r"^(\d+-)?\d{1,2}(:\d{2}){0,2}$")  # Slurm's forms: MM, HH:MM:SS, D-HH, D-HH:MM:SS ...

TEMPLATE = """\
#!/bin/bash
# Written by `ddplab slurm {command}`. Submit with: sbatch {outfile}
#SBATCH --job-name={job_name}
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={gpus}
#SBATCH --cpus-per-task={cpus}
#SBATCH --time={time}
{partition}#SBATCH --output={log_dir}/%x-%j.out

set -euo pipefail
mkdir -p {log_dir}

# The first node of the allocation hosts torchrun's c10d rendezvous. Its store is unauthenticated:
# this works because the port is reachable only on the cluster's private network.
# sed, not `head -n 1`: head stops reading after one line, and under pipefail scontrol's SIGPIPE would end the job.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)
export OMP_NUM_THREADS=$(( SLURM_CPUS_PER_TASK / {procs} > 0 ? SLURM_CPUS_PER_TASK / {procs} : 1 ))

# One task per node (--ntasks-per-node=1): each task is a torchrun that starts {procs} worker(s) on its node.
# Never set MASTER_ADDR/MASTER_PORT in the training script: torchrun sets them for every worker.
srun --kill-on-bad-exit=1 --output={log_dir}/%x-%j-node%n.out \\
    torchrun \\
    --nnodes={nodes} \\
    --nproc-per-node={procs} \\
    --rdzv-backend=c10d \\
    --rdzv-endpoint="$head_node:{port}" \\
    --rdzv-id="$SLURM_JOB_ID" \\
    --max-restarts={max_restarts} \\
    {entry}
"""


@dataclass
class SlurmResult:
    path: str | None  # where the script was written; None = printed
    script: str
    nodes: int
    gpus_per_node: int


def _time(text: str) -> str:
    if not TIME.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Slurm time limit: use HH:MM:SS or D-HH:MM:SS")
    return text


def add_parser(sub) -> None:
    p = sub.add_parser("slurm", help="write an sbatch script that runs a recipe or script on several nodes",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=cliargs.positive_int, required=True, help="nodes to allocate")
    p.add_argument("--gpus-per-node", type=int, required=True,
                   help="GPUs per node = workers per node (0: CPU nodes, one worker per node on gloo)")
    p.add_argument("--cpus-per-node", type=cliargs.positive_int, default=8, help="CPU cores per node (default 8)")
    p.add_argument("--time", type=_time, default="01:00:00", help="wall-clock limit (default 01:00:00)")
    p.add_argument("--partition", help="Slurm partition (default: the cluster's)")
    p.add_argument("--max-restarts", type=int, default=0, help="torchrun's restarts after a worker fails")
    p.add_argument("--rdzv-port", type=cliargs.port, default=29500,
                   help="port of the rendezvous on the first node (default 29500, torchrun's customary one)")
    p.add_argument("--log-dir", default="logs", help="where the per-node logs go (default logs/)")
    p.add_argument("-o", "--output", help="write the script here (default: print it)")
    p.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    # As in torchrun: options first, then what to run and its own arguments.
    p.add_argument("target", help=f"a recipe ({', '.join(recipes.names())}) or a training script's path")
    p.add_argument("target_args", nargs=argparse.REMAINDER, help="arguments for the recipe or script")
    p.set_defaults(run=run)


def build(args) -> str:
    if args.gpus_per_node < 0 or args.max_restarts < 0:
        raise DdplabError("--gpus-per-node and --max-restarts must be 0 or more")
    known = recipes.names()
    if args.target in known:
        entry = ["-m", f"ddplab.recipes.{args.target}"]
    elif Path(args.target).is_file():
        entry = [args.target]
    else:
        raise DdplabError(f"{args.target!r} is neither a recipe ({', '.join(known)}) nor an existing script: "
                          "give a recipe name or the path of your training script")
    name = Path(args.target).stem if args.target not in known else args.target
    outfile = args.output or f"{name}.sbatch"
    return TEMPLATE.format(
        command=shlex.join(["--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus_per_node),
                            args.target, *args.target_args]),
        outfile=outfile, job_name=f"ddplab-{name}", nodes=args.nodes, gpus=args.gpus_per_node,
        cpus=args.cpus_per_node, time=args.time, log_dir=shlex.quote(args.log_dir),
        partition=f"#SBATCH --partition={args.partition}\n" if args.partition else "",
        procs=max(1, args.gpus_per_node), port=args.rdzv_port, max_restarts=args.max_restarts,
        entry=shlex.join([*entry, *args.target_args]),
    )


def run(args) -> int:
    script = build(args)
    path = None
    if args.output:
        out = Path(args.output)
        if out.exists() and not args.force:
            raise DdplabError(f"{out} exists: pass --force to overwrite it, or choose another -o")
        try:
            out.write_text(script)
        except OSError as e:
            raise DdplabError(f"cannot write {out}: {e.strerror}: choose a writable path with -o") from None
        out.chmod(0o755)
        path = str(out)
    result = SlurmResult(path, script, args.nodes, args.gpus_per_node)
    report.emit(result, getattr(args, "json", False), render)
    return 0


def render(con, r: SlurmResult) -> None:
    if r.path is None:
        print(r.script, end="")
        return
    con.print(f"wrote {r.path}: {r.nodes} node(s) × {max(1, r.gpus_per_node)} worker(s); submit with: sbatch {r.path}")
