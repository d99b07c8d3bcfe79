"""Before a user's script starts under `ddplab launch`: check the options as torchrun will, lint the script, run the
environment preflight, and settle the rendezvous port and the per-rank log folder."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ddplab import report
from ddplab.errors import DdplabError
from ddplab.launcher.script import EarlyAgent

DEFAULT_MASTER_PORT = 29500  # torchrun's, for a static rendezvous


# lint errors that make a run hang for certain (a rendezvous nobody serves, a collective some ranks never call).
HANG_RULES = {"sets-master-env", "sets-rank-env", "collective-in-rank-branch", "rank0-ddp-forward"}


@dataclass
class Plan:
    script: Path | None  # the file to lint, when there is one
    nproc: int
    max_nodes: int  # torchrun's reading of --nnodes (its upper bound)
    endpoint: str | None
    log_dir: Path
    notes: list[str]
    lint: object  # LintResult | None
    # the static rendezvous port is ddplab's choice (torchrun's default, or a free one), not the user's --master-port:
    # the agent may move it when another process takes it first (launcher/agent.py)
    port_may_move: bool = False


def _script_file(ns) -> Path | None:
    if ns.no_python:
        return None
    if ns.module:
        found = _module_file(ns.training_script)
        if found is None:
            raise DdplabError(
                f"-m {ns.training_script}: no such module on the Python path (run from the folder "
                "that holds it, or install it)"
            )
        return found if found.suffix == ".py" else None
    path = Path(ns.training_script)
    if path.is_dir():
        raise DdplabError(f"{ns.training_script}: is a folder: pass the training script's path (a .py file in it)")
    if not path.is_file():
        raise DdplabError(f"{ns.training_script}: no such file: pass the training script's path")
    return path if path.suffix == ".py" else None


def _environment_findings(nproc: int, backend: str, device: str) -> list:
    """The environment checks `ddplab check` runs in its preflight stage (shared memory, CUDA_VISIBLE_DEVICES,
    OMP_NUM_THREADS, launcher variables left in the shell, cores), minus the ones that passed."""
    from ddplab.checks.preflight import environment_findings

    # On GPUs launch judges ranks vs GPUs itself, before this, knowing the script's own backend.
    found = environment_findings(nproc, device, backend, ranks_vs_devices=device == "cpu")
    return [f for f in found if f.level != "ok"]


def _module_file(name: str) -> Path | None:
    """The file `python -m name` would run from the current folder, found without importing anything."""
    sys.path.insert(0, os.getcwd())  # where the workers' `python -m` looks first
    try:
        top, *rest = name.split(".")
        spec = importlib.util.find_spec(top)  # every finder (editable installs too); a top-level name runs nothing
        for part in rest:
            if spec is None or not spec.submodule_search_locations:
                return None
            spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return None
    finally:
        sys.path.remove(os.getcwd())
    if spec is None:
        return None
    if spec.submodule_search_locations:  # a package: -m runs its __main__
        main = [Path(p) / "__main__.py" for p in spec.submodule_search_locations]
        return next((m for m in main if m.exists()), None)
    return Path(spec.origin) if spec.origin else None


def _given(argv: list[str], *flags: str) -> bool:
    return any(a in flags or a.split("=", 1)[0] in flags for a in argv)


def preflight(ns, argv: list[str], lint: bool, torchrun: EarlyAgent) -> Plan:
    """torchrun: the early agent, which answers what needs torch (launcher.script.EarlyAgent): how torchrun reads
    the counts, and its own checks of the final option values (config_from_args)."""
    from ddplab.envinfo import cuda_available, cuda_device_count
    from ddplab.ports import free_port, port_is_free

    notes = []
    try:
        nproc, max_nodes = torchrun.counts(ns)
    except ValueError as e:
        raise DdplabError(
            f"--nproc-per-node {ns.nproc_per_node} / --nnodes {ns.nnodes}: {e}: give a number of "
            "processes per node, e.g. --nproc-per-node 2"
        ) from None
    if nproc < 1:
        raise DdplabError(f"--nproc-per-node {nproc}: need at least 1 process")
    script = _script_file(ns)
    lint_result = None
    if script is not None and lint:
        from ddplab.lint import lint_file

        lint_result = lint_file(script)
        for f in lint_result.findings:
            report.log(f"lint {f.level}: {f.path or script.name}:{f.line} [{f.rule}] {f.message}\n      fix: {f.fix}")
    sure = [f for f in (lint_result.findings if lint_result else []) if f.level == "error" and f.rule in HANG_RULES]
    if sure:  # said apart from the list, last before the run: the run will wait the whole watchdog (issue 42 point 6)
        where = ", ".join(f"{f.path or script.name}:{f.line} [{f.rule}]" for f in sure)
        report.log(
            f"ddplab launch: lint is sure this run hangs ({where}): fix that first; started anyway, the hang "
            "watchdog ends it after --hang-timeout seconds without progress"
        )
    if lint_result is not None and lint_result.backend == "nccl":
        gpus = cuda_device_count()
        if nproc > gpus:
            raise DdplabError(
                f"{script.name}:{lint_result.backend_line} hard-codes backend 'nccl', which needs one GPU per "
                f"process, but --nproc-per-node is {nproc} and {gpus} GPU(s) are visible: start at most {gpus} "
                "processes per node" + ("" if gpus else ", or use backend 'gloo' on CPU")
            )

    backend = lint_result.backend if lint_result is not None and lint_result.backend else None
    on_gpu = backend == "nccl" or (backend is None and cuda_available())
    if on_gpu and backend is None and nproc > cuda_device_count():
        notes.append(
            f"{nproc} processes per node but {cuda_device_count()} GPU(s): if the script uses nccl, "
            "two ranks will share a GPU (NCCL: 'Duplicate GPU detected')"
        )
    for finding in _environment_findings(nproc, backend or ("nccl" if on_gpu else "gloo"), "cuda" if on_gpu else "cpu"):
        if finding.level == "fail":
            raise DdplabError(f"{finding.what}: {finding.fix}")
        notes.append(f"{finding.what} (fix: {finding.fix})")

    endpoint, port_may_move = None, False
    if ns.standalone:
        notes.append("--standalone: torchrun serves the rendezvous on a free port of its choosing")
    elif ns.rdzv_backend == "static" and not ns.rdzv_endpoint:
        # Explicit even when torchrun would pick a default: the same behaviour on every torch version, and the
        # hang report can name the address the ranks should have reached.
        port = ns.master_port if ns.master_port is not None else DEFAULT_MASTER_PORT
        port_may_move = ns.master_port is None and max_nodes == 1
        if max_nodes == 1 and not port_is_free(port, ""):
            new = free_port()
            notes.append(f"port {port} is busy on this machine: using {new} instead")
            port = new
        ns.master_port = port
        endpoint = f"{ns.master_addr}:{port}"
    else:
        endpoint = ns.rdzv_endpoint

    if "OMP_NUM_THREADS" not in os.environ and nproc > 1:  # torchrun's choice, said in one line, not its banner
        notes.append("1 OpenMP thread per rank (OMP_NUM_THREADS=1, as torchrun sets it; set it yourself to choose)")
    if not _given(argv, "-r", "--redirects"):
        ns.redirects = "3"  # every rank's stdout and stderr into its own files ...
    if not _given(argv, "-t", "--tee"):
        ns.tee = "3"  # ... and on the console too, as plain torchrun shows them
    # The caller gives the log folder (the user's --log-dir, or the early agent's run folder, which it removes itself)
    Path(ns.log_dir).mkdir(parents=True, exist_ok=True)
    torchrun.check(ns)  # given a log folder: torchrun would otherwise make one of its own for the check
    return Plan(script, nproc, max_nodes, endpoint, Path(ns.log_dir), notes, lint_result, port_may_move)
