"""The Kubernetes writer: a Kubeflow Trainer (v2) TrainJob on the torch-distributed runtime, whose container runs
`ddplab launch` on every node with the PET_* variables the runtime injects (PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT: torchrun's own environment names for its flags).
"""

from __future__ import annotations

from dataclasses import dataclass

from ddplab.engines import yamltext
from ddplab.engines.job import Job, Vars

VARS = Vars(
    nnodes="$PET_NNODES",
    nproc="$PET_NPROC_PER_NODE",
    node_rank="$PET_NODE_RANK",
    head="$PET_MASTER_ADDR",
    job_id="$TRAINJOB_NAME",
    port="$PET_MASTER_PORT",
)
RUNTIME = "torch-distributed"  # kubeflow/trainer manifests/base/runtimes/torch_distributed.yaml


@dataclass
class K8sSpec:
    image: str  # holds torch, ddplab and the script: a pod installs nothing at each (re)start


def trainjob(job: Job, spec: K8sSpec) -> dict:
    script = [
        "set -uo pipefail",
        'echo "ddplab: node $PET_NODE_RANK of $PET_NNODES, node 0 at $PET_MASTER_ADDR:$PET_MASTER_PORT"',
        job.node_command(VARS),
        "rc=$?",
        *job.outcome_lines(
            requeue="the pod ends with 4; what starts it again is the runtime's JobSet failurePolicy (see the header)",
            hang="the pod ends with 3",
        ),
        'exit "$rc"',
    ]
    resources = {"cpu": str(max(1, job.nproc_per_node))} if job.cpu else {"nvidia.com/gpu": str(job.gpus)}
    trainer = {
        "image": spec.image,
        "command": ["bash", "-c"],
        "args": [yamltext.Literal("\n".join(script) + "\n")],
        "env": [{"name": "TRAINJOB_NAME", "value": job.name}],
        "numNodes": job.nnodes,
        "numProcPerNode": job.nproc_per_node,
        "resourcesPerNode": {"limits": resources, "requests": resources},
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": job.name},
        "spec": {"runtimeRef": {"name": RUNTIME}, "trainer": trainer},
    }


def render(job: Job, spec: K8sSpec, command: str, outfile: str) -> str:
    where = (
        f"{job.checkpoint_dir} must be a volume every pod sees and keeps across restarts (a PVC or a bucket mount "
        "in the runtime): a pod's own disk goes with the pod"
        if job.checkpoint_dir
        else "no --checkpoint-dir: a restarted job starts over"
    )
    head = [
        f"# Written by `ddplab k8s {command}`. Submit with: kubectl create -f {outfile}",
        f"# Checkpoints: {where}.",
        f"# The image ({spec.image}) holds torch, ddplab and the script; {job.target} is run from its working folder.",
        "# Restarts: a pod that exits 4 (preempted, saved) or 3 (hang) is started again only as the runtime's JobSet",
        "# says: its failurePolicy.maxRestarts recreates every node together, each resuming from the checkpoint",
        "# (a TrainJob cannot patch failurePolicy). The torch-distributed runtime as shipped sets none: the TrainJob",
        "# fails, and `kubectl delete -f` + `kubectl create -f` again resumes it.",
    ]
    return "\n".join(head) + "\n" + yamltext.dump(trainjob(job, spec))
