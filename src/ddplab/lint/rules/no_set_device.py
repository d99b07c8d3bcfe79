"""`no-set-device`: the current device never set: `torch.device("cuda")`, `.to("cuda")` with no `set_device`; NCCL with no `set_device`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="no-set-device",
    severity=BUG,
    what='the current device never set: `torch.device("cuda")`, `.to("cuda")` with no `set_device`; NCCL with no `set_device`',
    why="the current device stays GPU 0 on every rank: every model, and every CUDA context, lands there",
    example='device = torch.device("cuda")',
    fix="`torch.cuda.set_device(local_rank)` (or `torch.accelerator.set_device_index(local_rank)`) before `init_process_group`",
    check=Checks.check_current_device,
    opt_in="shown with --all only: whether anything uses the current device, or sets it another way, is known at run time",
    whole_project=("set_device", "CUDA_VISIBLE_DEVICES"),
)
