"""`rank0-ddp-forward`: a forward through the DDP wrapper on rank 0 only, for a module with buffers (BatchNorm, `register_buffer`)."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="rank0-ddp-forward",
    severity=BUG,
    what="a forward through the DDP wrapper on rank 0 only, for a module with buffers (BatchNorm, `register_buffer`)",
    why="DDP broadcasts the buffers in forward; nobody else joins and the run hangs",
    example="if rank == 0:\n    model(x_val)",
    fix="evaluate the plain module on rank 0 (`model.module(...)`), or evaluate on every rank and all_reduce the metric",
    check=Checks.check_rank0_ddp_forward,
    in_modules=False,
)
