"""The flags of `ddplab train RECIPE`, checked before any rank starts. check() needs torch (the recipe's module, the
GPU count, a checkpoint to peek at), so `ddplab train` runs it in a fork of its early agent, where torch is imported
already, and gets plain values back (Checked)."""

from __future__ import annotations

from dataclasses import dataclass

from ddplab import report
from ddplab.errors import DdplabError

# The ranks' process-group timeout exceeds the stall timeout by this much: the stall detector names the hang (stacks,
# Flight Recorder) before a collective gives up (gloo: an error on one rank; NCCL: an abort), as check and bench do.
GROUP_TIMEOUT_MARGIN_S = 60.0


def group_timeout_s(stall_timeout: float) -> float:
    """The ranks' process-group timeout for a stall timeout: never below torch's default, always past the stall
    timeout (the group's 60 s once ended a `--stall-timeout 70` run first, with gloo's message instead of the hang)."""
    from ddplab.dist import DEFAULT_TIMEOUT_S

    return max(stall_timeout + GROUP_TIMEOUT_MARGIN_S, DEFAULT_TIMEOUT_S)


@dataclass
class Checked:
    """The run the flags describe, once every check that needs no worker has passed (check()): plain values, so
    that the checks can run in a fork of the early agent, where torch is imported already, and this process never
    imports it (~1.5 CPU s a run)."""

    config: dict  # the recipe's TrainConfig, to_dict()
    json: bool
    strategy: str
    nproc: int
    device: str
    profile: int | None
    sanitize_steps: int
    stall_timeout: float
    group_timeout: float
    grace: float | None


def check(name: str, recipe_config: type, ns) -> Checked:
    """Every check that needs no worker: flags, device, checkpoint directory, a --resume that cannot fit. ns: the
    parsed flags of `ddplab train NAME` (the launcher's and the recipe's)."""
    import torch

    from ddplab import ckptfile
    from ddplab.train import loop
    from ddplab.train.config import from_arguments

    cfg = from_arguments(recipe_config, ns)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nproc = ns.nproc if ns.nproc is not None else (gpus or 2)
    if nproc < 1:
        raise DdplabError(f"--nproc {nproc}: need at least 1 rank")
    device = "cuda" if cfg.device == "cuda" or (cfg.device == "auto" and gpus) else "cpu"
    if device == "cuda" and nproc > gpus:
        raise DdplabError(f"--nproc {nproc} but {gpus} GPU(s) are visible: use --nproc {gpus or 1}, or --device cpu")
    if ns.max_restarts < 0:
        raise DdplabError(f"--max-restarts {ns.max_restarts}: must be 0 or more")
    loop.preflight(cfg)
    cfg.check_device(device)
    if device == "cpu":  # the ranks share this machine's RAM: refuse what cannot fit before any rank starts
        from ddplab.train.hostfit import require_fits

        require_fits(name, cfg, nproc)
    _environment(nproc, device)
    if cfg.resume:  # a checkpoint of another recipe or shape fails now rather than after the workers start
        newest = ckptfile.listed(cfg.checkpoint_path)[0][1]
        state = ckptfile.peek(newest)
        if state is not None:
            loop.check_compatible(state, name, cfg, newest)
    return Checked(
        config=cfg.to_dict(),
        json=cfg.json,
        strategy=cfg.strategy,
        nproc=nproc,
        device=device,
        profile=ns.profile,
        sanitize_steps=ns.sanitize_steps,
        stall_timeout=ns.stall_timeout,
        group_timeout=group_timeout_s(ns.stall_timeout),
        grace=ns.grace,
    )


def _environment(nproc: int, device: str) -> None:
    """`ddplab check`'s environment preflight (interface names, CUDA_VISIBLE_DEVICES, threads ...) before any
    rank starts: a failure is bad input, a warning is shown on stderr."""
    from ddplab.checks.preflight import environment_findings

    for f in environment_findings(nproc, device, "nccl" if device == "cuda" else "gloo", ranks_vs_devices=False):
        if f.level == "fail":
            raise DdplabError(f"{f.what}: {f.fix}")
        if f.level == "warn":
            report.log(f"WARN {f.what}\n      fix: {f.fix}")
