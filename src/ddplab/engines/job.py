"""One job description for every engine, and the one command each node runs.

Every engine starts the same thing on each node: `ddplab launch` (preflight, watchdog, per-rank logs, root cause,
the preemption grace) with torchrun's c10d rendezvous on node 0. What differs is where each engine says how many
nodes there are, which one this is and where node 0 is: a `Vars` of shell expressions per engine.

Exit codes the engines' recovery keys on (shared/design.md): 4 = preempted after saving (start it again and it
resumes), 3 = a hang (the watchdog ended it). Slurm's script requeues on 4 and ends on 3, saying so; SkyPilot's
job_recovery and the Kubeflow job restart on both (a hang on a rented machine is often the machine).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ddplab import recipes
from ddplab.errors import DdplabError

PREEMPTED_EXIT = 4  # saved after a signal: start the job again and it resumes at the saved step
HANG_EXIT = 3  # the watchdog found no progress and ended the run
RECOVER_EXIT_CODES = (HANG_EXIT, PREEMPTED_EXIT)  # what SkyPilot's and Kubeflow's recovery restart on
NAME = re.compile(r"[^a-z0-9-]+")


@dataclass
class Vars:
    """Shell expressions, in the engine's own variables, for what every node needs to know."""

    nnodes: str
    nproc: str
    node_rank: str
    head: str  # node 0's address
    job_id: str
    port: str | None = None  # the rendezvous port where the engine names one (Kubeflow); else the job's --rdzv-port


@dataclass
class Job:
    nnodes: int
    nproc_per_node: int  # processes per node = GPUs per node (CPU nodes: gloo ranks)
    target: str  # a recipe's name or a script's path
    target_args: list[str] = field(default_factory=list)
    cpu: bool = False  # CPU nodes: no accelerator is asked for
    accelerator: str = "H100"  # SkyPilot needs the GPU's name; Slurm and Kubernetes count GPUs only
    checkpoint_dir: str | None = None  # given to the target as --checkpoint-dir; where a restart resumes from
    grace: int = 30  # seconds from the signal to the end: the ranks save in it
    hang_timeout: int | None = None  # ddplab launch's watchdog (None: its default)
    rdzv_port: int = 29500  # torchrun's customary port, on node 0
    name: str = ""

    @property
    def is_recipe(self) -> bool:
        return self.target in recipes.names()

    @property
    def gpus(self) -> int:
        return 0 if self.cpu else self.nproc_per_node

    def entry(self) -> list[str]:
        """What `ddplab launch` runs on each node, with the target's arguments."""
        head = ["-m", f"ddplab.recipes.{self.target}"] if self.is_recipe else [self.target]
        ckpt = ["--checkpoint-dir", self.checkpoint_dir] if self.checkpoint_dir else []
        return [*head, *self.target_args, *ckpt]

    def node_command(self, v: Vars) -> str:
        """`ddplab launch` for one node; node 0 hosts the rendezvous store (is_host from the node rank, not from
        torch's hostname guess, which two nodes on one machine would both pass)."""
        lines = [
            "ddplab launch",
            f'--nnodes="{v.nnodes}"',
            f'--nproc-per-node="{v.nproc}"',
            "--rdzv-backend=c10d",
            f'--rdzv-endpoint="{v.head}:{v.port or self.rdzv_port}"',
            f'--rdzv-id="{v.job_id}"',
            f'--rdzv-conf="is_host=$(( {v.node_rank} == 0 ))"',
            f"--grace={self.grace}",
            *([f"--hang-timeout={self.hang_timeout}"] if self.hang_timeout is not None else []),
            shlex.join(self.entry()),
        ]
        return " \\\n    ".join(lines)

    def outcome_lines(self, requeue: str, hang: str, then: str = "") -> list[str]:
        """The shell that says what the exit code means, after the nodes' command set $rc; `then`: what the script
        itself does on exit 4 (Slurm's requeue)."""
        return [
            f'if [ "$rc" -eq {PREEMPTED_EXIT} ]; then',
            f'  echo "ddplab: preempted and saved (exit {PREEMPTED_EXIT}): {requeue}"',
            *([f"  {then}"] if then else []),
            f'elif [ "$rc" -eq {HANG_EXIT} ]; then',
            f'  echo "ddplab: the run hung (exit {HANG_EXIT}): the node logs name the stuck rank and line; {hang}"',
            "fi",
        ]


def from_args(args, engine: str) -> Job:
    missing = [flag for flag, v in (("--nnodes", args.nnodes), ("--nproc-per-node", args.nproc_per_node)) if v is None]
    if missing:
        raise DdplabError(
            f"missing {' and '.join(missing)}: e.g. ddplab {engine} --nnodes 2 --nproc-per-node 8 {args.target}"
        )
    known = recipes.names()
    if args.target not in known and not Path(args.target).is_file():
        raise DdplabError(
            f"{args.target!r} is neither a recipe ({', '.join(known)}) nor an existing script: "
            "give a recipe name or the path of your training script"
        )
    stem = args.target if args.target in known else Path(args.target).stem
    return Job(
        nnodes=args.nnodes,
        nproc_per_node=args.nproc_per_node,
        target=args.target,
        target_args=list(args.target_args),
        cpu=args.cpu,
        accelerator=getattr(args, "accelerator", "H100"),
        checkpoint_dir=args.checkpoint_dir,
        grace=args.grace,
        hang_timeout=args.hang_timeout,
        rdzv_port=args.rdzv_port,
        name=NAME.sub("-", f"ddplab-{stem}".lower()).strip("-")[:50],
    )


def default_output(job: Job, suffix: str) -> Path:
    """Beside the script (a recipe: in the current folder), named after it."""
    if job.is_recipe:
        return Path(f"{job.target}{suffix}")
    script = Path(job.target)
    return script.with_name(script.stem + suffix)


def write(path: Path, text: str, force: bool, mode: int = 0o644) -> None:
    if path.exists() and not force:
        raise DdplabError(f"{path} exists: pass --force to overwrite it, or choose another -o")
    try:
        path.write_text(text)
        path.chmod(mode)
    except OSError as e:
        raise DdplabError(f"cannot write {path}: {e.strerror}: choose a writable path with -o") from None


@dataclass
class Written:
    """What every engine command returns: the file it wrote and the one command that submits it."""

    engine: str
    path: str
    submit: str
    nnodes: int
    nproc_per_node: int


def render(con, r: Written) -> None:
    con.print(f"wrote {r.path}: {r.nnodes} node(s) × {r.nproc_per_node} rank(s), each node under ddplab launch")
    con.print(f"submit it with: {r.submit}")


def command_line(args) -> str:
    """How the user asked for it (as typed, past the command's name), for the file's first line."""
    typed = getattr(args, "typed", None)
    if typed:
        return shlex.join(typed[1:])
    return shlex.join(
        ["--nnodes", str(args.nnodes), "--nproc-per-node", str(args.nproc_per_node), args.target, *args.target_args]
    )
