"""The Slurm writer: an sbatch script that runs `ddplab launch` on every node of the allocation through srun.

Preemption: `--signal=B:USR1@GRACE` has Slurm signal the batch shell GRACE seconds before it ends the job (time
limit, preemption); the shell passes it on to every node's `ddplab launch` (`scancel --signal=USR1`, which reaches
the job's steps), whose ranks save at one agreed step and exit 4; the script then requeues the job (`--requeue`,
`scontrol requeue`), and the next start resumes from the checkpoint folder. Exit 3 (a hang) is said in the job's log
and ends the job: starting it again would meet the same hang.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ddplab.engines.job import Job, Vars

VARS = Vars(
    nnodes="$SLURM_NNODES",
    nproc="$nproc",
    node_rank="$SLURM_NODEID",
    head="$head_addr",
    job_id="$SLURM_JOB_ID",
)


@dataclass
class SlurmSpec:
    """What only Slurm asks for."""

    time: str = "01:00:00"
    partition: str | None = None
    cpus_per_node: int = 8
    log_dir: str = "logs"


def render(job: Job, spec: SlurmSpec, command: str, outfile: str) -> str:
    log = shlex.quote(spec.log_dir)
    lines = [
        "#!/bin/bash",
        f"# Written by `ddplab slurm {command}`. Submit with: sbatch {shlex.quote(outfile)}",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --nodes={job.nnodes}",
        "#SBATCH --ntasks-per-node=1",
        *([] if job.cpu else [f"#SBATCH --gpus-per-node={job.gpus}"]),
        f"#SBATCH --cpus-per-task={spec.cpus_per_node}",
        f"#SBATCH --time={spec.time}",
        *([f"#SBATCH --partition={spec.partition}"] if spec.partition else []),
        f"#SBATCH --output={log}/%x-%j.out",
        "#SBATCH --open-mode=append",
        f"#SBATCH --signal=B:USR1@{job.grace}",
        "#SBATCH --requeue",
        "",
        "set -uo pipefail",
        f"mkdir -p {log}",
        'echo "ddplab: job $SLURM_JOB_ID start ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST"',
        "",
        "# Node 0 (the allocation's first node) hosts torchrun's c10d rendezvous, at the address Slurm itself uses",
        "# for it (NodeAddr). Its store is unauthenticated: this works because the port is reachable only on the",
        "# cluster's private network. sed, not `head -n 1`: head stops reading early, and pipefail would fail on it.",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        "head_addr=$(scontrol show node \"$head_node\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        f"export head_addr nproc={job.nproc_per_node}  # read by every node's command below",
        "export OMP_NUM_THREADS=$(( SLURM_CPUS_PER_TASK / nproc > 0 ? SLURM_CPUS_PER_TASK / nproc : 1 ))",
        "",
        "# Slurm signals only this shell (B:): pass it on to every node's ddplab launch, whose ranks save and exit 4.",
        "# (scancel without --batch reaches the job's steps, not this shell.)",
        'trap \'echo "ddplab: Slurm signalled the job: every node saves within the grace"; '
        'scancel --signal=USR1 "$SLURM_JOB_ID"\' USR1',
        "",
        "# One task per node: each is a ddplab launch that starts $nproc rank(s) on its node; SLURM_NODEID is its node",
        "# rank. Never set MASTER_ADDR/MASTER_PORT in the training script: torchrun sets them for every rank.",
        "# No --kill-on-bad-exit: srun exits with its tasks' highest code, and a task it killed would read 137 or 143",
        "# instead of 4 (saved) or 3 (hang); each node's ddplab launch ends its ranks itself when a peer is gone.",
        f"srun --open-mode=append --output={log}/%x-%j-node%n.out bash -c '",
        "  " + job.node_command(VARS).replace("'", "'\\''").replace("\n", "\n  ") + "' &",
        "srun_pid=$!",
        "# wait returns early when the trap runs: wait again until srun is gone, then take its exit code",
        'while kill -0 "$srun_pid" 2>/dev/null; do wait "$srun_pid"; done',
        'wait "$srun_pid"; rc=$?',
        *job.outcome_lines(
            requeue="requeued; the next start resumes at the saved step",
            hang="not requeued (it would hang again)",
            then='scontrol requeue "$SLURM_JOB_ID"',
        ),
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"
