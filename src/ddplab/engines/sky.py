"""The SkyPilot writer: a task YAML for `sky jobs launch` (a managed job: SkyPilot brings a preempted spot cluster
back and restarts the run) whose run section starts `ddplab launch` on every node.

SkyPilot sets on each node SKYPILOT_NODE_IPS (one address a line, node 0 first), SKYPILOT_NODE_RANK,
SKYPILOT_NUM_NODES and SKYPILOT_NUM_GPUS_PER_NODE (sky/skylet/constants.py). job_recovery.recover_on_exit_codes
restarts the job on ddplab's 3 (hang) and 4 (preempted after saving) as on a preemption.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddplab.engines import yamltext
from ddplab.engines.job import RECOVER_EXIT_CODES, Job, Vars

VARS = Vars(
    nnodes="$SKYPILOT_NUM_NODES",
    nproc="$nproc",
    node_rank="$SKYPILOT_NODE_RANK",
    head="$head_addr",
    job_id="$SKYPILOT_TASK_ID",
)
MAX_RESTARTS_ON_ERRORS = 3  # restarts after an exit code outside recover_on_exit_codes (a crash): a few, not forever


@dataclass
class SkySpec:
    spot: bool = True  # rented GPUs by the hour: spot is what preemption recovery is for
    bucket: str | None = None  # s3://..., gs://...: the checkpoint folder is mounted from it
    autostop: int = 10  # idle minutes before the cluster stops (sky launch); managed jobs end their cluster anyway


def task(job: Job, spec: SkySpec, command: str) -> dict:
    nproc = str(job.nproc_per_node) if job.cpu else "$SKYPILOT_NUM_GPUS_PER_NODE"
    run = [
        "set -uo pipefail",
        "# node 0's address: the first line of SKYPILOT_NODE_IPS (sed, not head: no SIGPIPE under pipefail)",
        'head_addr=$(echo "$SKYPILOT_NODE_IPS" | sed -n 1p)',
        f"nproc={nproc}",
        job.node_command(VARS),
        "rc=$?",
        *job.outcome_lines(
            requeue="SkyPilot's job_recovery restarts it (recover_on_exit_codes) and it resumes",
            hang="SkyPilot's job_recovery restarts it (recover_on_exit_codes)",
        ),
        'exit "$rc"',
    ]
    resources: dict = {"cpus": "4+"} if job.cpu else {"accelerators": f"{job.accelerator}:{job.nproc_per_node}"}
    resources["use_spot"] = spec.spot
    resources["autostop"] = spec.autostop
    resources["job_recovery"] = {
        "strategy": "EAGER_NEXT_REGION",
        "max_restarts_on_errors": MAX_RESTARTS_ON_ERRORS,
        "recover_on_exit_codes": list(RECOVER_EXIT_CODES),
    }
    out: dict = {"name": job.name, "num_nodes": job.nnodes, "resources": resources}
    out["workdir"] = "."
    if job.checkpoint_dir and spec.bucket:
        out["file_mounts"] = {job.checkpoint_dir: {"source": spec.bucket, "mode": "MOUNT"}}
    out["setup"] = yamltext.Literal("pip install ddplab\n")
    out["run"] = yamltext.Literal("\n".join(run) + "\n")
    return out


def render(job: Job, spec: SkySpec, command: str, outfile: str) -> str:
    if not job.checkpoint_dir:
        where = "no --checkpoint-dir: a restarted job starts over"
    elif spec.bucket:
        where = f"{job.checkpoint_dir} is {spec.bucket}, mounted on every node: a restart on a new cluster resumes"
    else:
        where = (
            f"{job.checkpoint_dir} is on the cluster's own disk: a restart on the same cluster resumes; one on a "
            "new cluster (a spot preemption) starts over: give --bucket s3://... or gs://..."
        )
    head = [
        f"# Written by `ddplab sky {command}`. Submit with: sky jobs launch {outfile}",
        f"# Checkpoints: {where}.",
        "# On preemption SkyPilot recovers the cluster and runs `run` again; exit 4 (saved) and 3 (hang) are restarted",
        "# too (recover_on_exit_codes); autostop applies to `sky launch` clusters (a managed job's cluster goes at its end).",
    ]
    return "\n".join(head) + "\n" + yamltext.dump(task(job, spec, command))
