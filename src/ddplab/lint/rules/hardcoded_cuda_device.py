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
    fires=(
        """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
model = DDP(torch.nn.Linear(2, 2).to("cuda:0"))
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
model = DDP(torch.nn.Linear(2, 2).to(torch.device("cuda", local_rank)), device_ids=[local_rank])
dist.destroy_process_group()
""",
    ),
    whole_project=True,
)
