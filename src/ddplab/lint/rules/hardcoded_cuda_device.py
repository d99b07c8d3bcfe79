"""`hardcoded-cuda-device`: `cuda:0`, `.cuda(0)`, or `.cuda()` with no `set_device`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="hardcoded-cuda-device",
    severity=BUG,
    what="`cuda:0`, `.cuda(0)`, or `.cuda()` with no `set_device`",
    why="every rank puts its model on the same GPU: the others stay idle and the one runs out of memory",
    example='model.to("cuda:0")',
    fix="`torch.device('cuda', local_rank)` with `local_rank = int(os.environ['LOCAL_RANK'])`, or `torch.cuda.set_device(local_rank)` first",
    check=Checks.check_cuda_devices,
    opt_in="shown with --all only: whether each rank sees its own GPU as device 0 (CUDA_VISIBLE_DEVICES) is known at run time",
    whole_project=("set_device", "CUDA_VISIBLE_DEVICES"),
)
