"""`ddplab k8s`: a Kubeflow Trainer TrainJob (torch-distributed runtime) running a script on several nodes under
`ddplab launch`.

    ddplab k8s --nnodes 2 --nproc-per-node 8 --image my/image:tag --checkpoint-dir /ckpt train.py

Submit it with `kubectl create -f FILE`; each pod's `ddplab launch` reads the PET_* variables the runtime injects.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ddplab import cliargs, report
from ddplab.engines import job as jobs
from ddplab.engines import k8s as writer
from ddplab.errors import DdplabError


def _add_own(p, defaults: bool = True) -> None:
    def d(value):
        return value if defaults else argparse.SUPPRESS

    cliargs.engine_flags(p, defaults)
    p.add_argument("--image", default=d(None), help="the container image: torch, ddplab and your script (required)")


def add_parser(sub) -> None:
    cliargs.add_engine_parser(sub, "k8s", "a Kubeflow Trainer TrainJob", __doc__.split("\n\n")[0], _add_own, run)


def run(args) -> int:
    cliargs.take_engine_flags(args, "k8s", _add_own)
    job = jobs.from_args(args, "k8s")
    if not args.image:
        raise DdplabError(
            "missing --image: the container image every pod runs, with torch, ddplab and your script "
            "(e.g. FROM pytorch/pytorch, pip install ddplab, COPY train.py)"
        )
    out = Path(args.output) if args.output else jobs.default_output(job, ".trainjob.yaml")
    text = writer.render(job, writer.K8sSpec(image=args.image), jobs.command_line(args), str(out))
    jobs.write(out, text, args.force)
    result = jobs.Written("k8s", str(out), f"kubectl create -f {shlex.quote(str(out))}", job.nnodes, job.nproc_per_node)
    report.emit(result, getattr(args, "json", False), jobs.render)
    return 0
