"""Training settings: one dataclass per recipe, every default with its reason, command-line flags made from it.

A recipe's Config subclasses TrainConfig and may change a default by redeclaring the field. The same flags serve
`torchrun -m ddplab.recipes.NAME` and `ddplab train NAME`, so both runs read identical settings.
This module does not import torch: `ddplab --help` stays instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddplab.errors import DdplabError

AMP_CHOICES = ("none", "bf16", "fp16")
DEVICE_CHOICES = ("auto", "cpu", "cuda")
COMM_HOOKS = ("none", "fp16", "bf16")
STRATEGIES = ("ddp", "zero1", "fsdp")  # ddplab.train.strategy; repeated here so that this module imports no torch


def opt(default: Any, help: str, *, shape: bool = False, choices: tuple | None = None) -> Any:
    """A config field: its default, the one-line reason for it (the flag's help), and whether it shapes the model
    (shape fields must match when resuming a checkpoint)."""
    return field(default=default, metadata={"help": help, "shape": shape, "choices": choices})


@dataclass
class TrainConfig:
    epochs: int = opt(3, "passes over the data; a few are enough for the synthetic tasks")
    batch_size: int = opt(32, "samples per rank per micro-batch; global batch = this x world size x grad_accum")
    lr: float = opt(1e-3, "learning rate; AdamW's usual starting point")
    seed: int = opt(1337, "random seed; the same on every rank: identical data and initial weights everywhere")
    grad_accum: int = opt(1, "micro-batches per optimizer step; gradients are all-reduced only on the last")
    grad_clip: float = opt(0.0, "clip the gradient norm to this (0 = off)")
    amp: str = opt("none", "bf16 autocast (CPU or GPU), or fp16 with a GradScaler (GPU only)", choices=AMP_CHOICES)
    compile: bool = opt(False, "torch.compile the model before wrapping it in DDP")
    bucket_cap_mb: float = opt(
        25.0,
        "DDP's gradient bucket size in MiB (its default): larger buckets mean fewer, "
        "larger all-reduces, smaller ones start communicating earlier",
    )
    comm_hook: str = opt(
        "none",
        "fp16 / bf16: DDP's fp16_compress_hook / bf16_compress_hook send gradients in "
        "16 bits, half the bytes (bf16 needs NCCL)",
        choices=COMM_HOOKS,
    )
    device: str = opt("auto", "where to train; auto: cuda when a GPU is visible, else cpu", choices=DEVICE_CHOICES)
    strategy: str = opt(
        "ddp",
        "ddp: whole replicas; zero1: optimizer state split over ranks "
        "(ZeroRedundancyOptimizer); fsdp: parameters, gradients and optimizer state split "
        "(FSDP2 fully_shard); `ddplab memory` shows what each needs",
        choices=STRATEGIES,
    )
    checkpoint_dir: str = opt("", "directory for checkpoints, metrics.jsonl and the final model.pt (empty = none)")
    checkpoint_every: int = opt(0, "optimizer steps between checkpoints (0 = at the end of each epoch only)")
    keep: int = opt(3, "checkpoints kept; older ones are deleted once a newer one is safely written")
    resume: bool = opt(False, "continue exactly where the latest checkpoint in --checkpoint-dir stopped")
    max_steps: int = opt(
        0,
        "stop after this many optimizer steps in all (0 = run every epoch); the schedule "
        "still spans --epochs, so a stopped run resumes exactly",
    )
    log_every: int = opt(50, "optimizer steps between loss averages over ranks (one small collective each)")
    json: bool = opt(False, "print the final result as one JSON object on stdout")

    # ------------------------------------------------------------------------------------------ checks

    def check(self) -> None:
        """Bad settings fail here, on every rank and in `ddplab train` before any process starts."""
        for name in ("epochs", "batch_size", "grad_accum", "keep", "log_every"):
            if getattr(self, name) < 1:
                raise DdplabError(f"--{flag(name)} {getattr(self, name)}: must be at least 1")
        for name in ("checkpoint_every", "max_steps"):
            if getattr(self, name) < 0:
                raise DdplabError(f"--{flag(name)} {getattr(self, name)}: must be 0 (off) or positive")
        if not self.lr > 0:
            raise DdplabError(f"--lr {self.lr}: the learning rate must be positive")
        if not self.bucket_cap_mb > 0:
            raise DdplabError(f"--bucket-cap-mb {self.bucket_cap_mb}: must be positive (DDP's default is 25)")
        if self.comm_hook not in COMM_HOOKS:
            raise DdplabError(f"--comm-hook {self.comm_hook}: use one of {', '.join(COMM_HOOKS)}")
        if self.grad_clip < 0:
            raise DdplabError(f"--grad-clip {self.grad_clip}: must be 0 (off) or positive")
        if self.amp not in AMP_CHOICES:
            raise DdplabError(f"--amp {self.amp}: use one of {', '.join(AMP_CHOICES)}")
        if self.strategy not in STRATEGIES:
            raise DdplabError(f"--strategy {self.strategy}: use one of {', '.join(STRATEGIES)}")
        if self.strategy == "fsdp" and (self.compile or self.comm_hook != "none"):
            raise DdplabError(
                "--strategy fsdp takes neither --compile nor --comm-hook (both are DDP's): drop "
                "them, or use --strategy ddp / zero1"
            )
        if self.resume and not self.checkpoint_dir:
            raise DdplabError("--resume needs --checkpoint-dir: the directory that holds the run's checkpoints")

    def check_device(self, device_type: str) -> None:
        if self.comm_hook == "bf16" and device_type != "cuda":
            raise DdplabError(
                "--comm-hook bf16 needs NCCL on GPUs (torch's bf16 hook refuses gloo): use --comm-hook fp16 on CPU"
            )
        if self.amp == "fp16" and device_type != "cuda":
            raise DdplabError("--amp fp16 needs a GPU (its GradScaler is CUDA-only): use --amp bf16 on CPU")

    # ------------------------------------------------------------------------------------------ views

    def shape(self) -> dict[str, Any]:
        """The settings that decide the model's shape: a checkpoint resumes only into the same shape."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("shape")}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def checkpoint_path(self) -> Path | None:
        return Path(self.checkpoint_dir) if self.checkpoint_dir else None


def flag(name: str) -> str:
    return name.replace("_", "-")


def parser(
    cls: type[TrainConfig],
    prog: str,
    *,
    kind: type[argparse.ArgumentParser] = argparse.ArgumentParser,
    before: Callable[[argparse.ArgumentParser], None] | None = None,
    title: str | None = None,
    add_help: bool = True,
) -> argparse.ArgumentParser:
    """The parser of a recipe's flags, the one every way of running a recipe uses: `torchrun -m ddplab.recipes.NAME`
    (plain argparse), `ddplab train NAME` (one-line errors; `before` adds its launcher flags first, the recipe's go
    in a group named `title`) and `ddplab scale NAME` (errors raised, no --help). Its description is the first line
    of the recipe module's docstring, the runbook."""
    doc = (sys.modules[cls.__module__].__doc__ or "").strip()
    p = kind(prog=prog, description=doc.splitlines()[0] if doc else None, add_help=add_help)
    if before is not None:
        before(p)
    add_arguments(p.add_argument_group(title) if title else p, cls)
    return p


def add_arguments(parser: argparse.ArgumentParser, cls: type[TrainConfig], skip: tuple[str, ...] = ()) -> None:
    """One flag per field (but `skip`); the field's default and reason become the flag's default and help."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        name = f"--{flag(f.name)}"
        help_text = f.metadata.get("help", "")
        if isinstance(f.default, bool):
            parser.add_argument(name, action="store_true", default=f.default, help=help_text)
            continue
        kind = type(f.default)
        parser.add_argument(
            name,
            type=kind,
            default=f.default,
            choices=f.metadata.get("choices"),
            metavar=f.name.upper() if kind is not str or not f.metadata.get("choices") else None,
            help=help_text if "default" in help_text else f"{help_text} (default: {f.default!r})",
        )


def from_arguments(cls: type[TrainConfig], args: argparse.Namespace) -> TrainConfig:
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})


def from_dict(cls: type[TrainConfig], values: dict[str, Any]) -> TrainConfig:
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in known})
