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


class _OwnFlags(argparse.ArgumentParser):
    """slurm's own flags found after the target: bad values are one line, exit 2, as before the target."""

    def error(self, message: str):
        raise DdplabError(f"{message}: see `ddplab slurm --help`")


def _add_own(p, defaults: bool = True) -> None:
    """slurm's own flags. --nodes and --gpus-per-node are required, but checked in run(): they may come after the
    target (`ddplab slurm mlp --nodes 2 --gpus-per-node 4`), where argparse's REMAINDER has already taken them.
    defaults=False: a flag not given after the target must not reset the value given before it."""

    def default(value):
        return value if defaults else argparse.SUPPRESS

    p.add_argument("--nodes", type=cliargs.positive_int, default=default(None), help="nodes to allocate (required)")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=default(None),
        help="GPUs per node = workers per node (0: CPU nodes, one worker per node on gloo) (required)",
    )
    p.add_argument(
        "--cpus-per-node", type=cliargs.positive_int, default=default(8), help="CPU cores per node (default 8)"
    )
    p.add_argument("--time", type=_time, default=default("01:00:00"), help="wall-clock limit (default 01:00:00)")
    p.add_argument("--partition", default=default(None), help="Slurm partition (default: the cluster's)")
    p.add_argument("--max-restarts", type=int, default=default(0), help="torchrun's restarts after a worker fails")
    p.add_argument(
        "--rdzv-port",
        type=cliargs.port,
        default=default(29500),
        help="port of the rendezvous on the first node (default 29500, torchrun's customary one)",
    )
    p.add_argument("--log-dir", default=default("logs"), help="where the per-node logs go (default logs/)")
    p.add_argument("-o", "--output", default=default(None), help="write the script here (default: print it)")
    p.add_argument("--force", action="store_true", default=default(False), help="overwrite --output if it exists")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "slurm",
        help="write an sbatch script that runs a recipe or script on several nodes",
        description=__doc__.split("\n\n")[0],
        epilog="slurm's own flags may come before or after the target; every other argument goes "
        "to the target. To pass the target a flag of the same name as one of slurm's, put "
        "it after `--`.",
    )
    _add_own(p)
    p.add_argument("target", help=f"a recipe ({', '.join(recipes.names())}) or a training script's path")
    p.add_argument("target_args", nargs=argparse.REMAINDER, help="arguments for the recipe or script")
    p.set_defaults(run=run)


def take_own_flags(args) -> None:
    """Move slurm's own flags out of the target's arguments (those after `--` stay the target's), then require
    --nodes and --gpus-per-node wherever they were given."""
    rest = list(args.target_args)
    after = []
    if "--" in rest:
        cut = rest.index("--")
        rest, after = rest[:cut], rest[cut + 1 :]
    own = _OwnFlags(prog="ddplab slurm", add_help=False, allow_abbrev=False)
    _add_own(own, defaults=False)
    found, rest = own.parse_known_args(rest)
    vars(args).update(vars(found))
    args.target_args = rest + after
    missing = [
        flag for flag, value in (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node)) if value is None
    ]
    if missing:
        raise DdplabError(
            f"missing {' and '.join(missing)}: e.g. ddplab slurm --nodes 2 --gpus-per-node 4 {args.target}"
        )


def build(args) -> str:
    if args.gpus_per_node < 0 or args.max_restarts < 0:
        raise DdplabError("--gpus-per-node and --max-restarts must be 0 or more")
    known = recipes.names()
    if args.target in known:
        entry = ["-m", f"ddplab.recipes.{args.target}"]
    elif Path(args.target).is_file():
        entry = [args.target]
    else:
        raise DdplabError(
            f"{args.target!r} is neither a recipe ({', '.join(known)}) nor an existing script: "
            "give a recipe name or the path of your training script"
        )
    name = Path(args.target).stem if args.target not in known else args.target
    outfile = args.output or f"{name}.sbatch"
    return TEMPLATE.format(
        command=shlex.join(
            ["--nodes", str(args.nodes), "--gpus-per-node", str(args.gpus_per_node), args.target, *args.target_args]
        ),
        outfile=outfile,
        job_name=f"ddplab-{name}",
        nodes=args.nodes,
        gpus=args.gpus_per_node,
        cpus=args.cpus_per_node,
        time=args.time,
        log_dir=shlex.quote(args.log_dir),
        partition=f"#SBATCH --partition={args.partition}\n" if args.partition else "",
        procs=max(1, args.gpus_per_node),
        port=args.rdzv_port,
        max_restarts=args.max_restarts,
        entry=shlex.join([*entry, *args.target_args]),
    )


def run(args) -> int:
    take_own_flags(args)
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
