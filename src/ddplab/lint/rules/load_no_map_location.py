"""`load-no-map-location`: `torch.load` of a checkpoint without `map_location`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="load-no-map-location",
    severity=BUG,
    what="`torch.load` of a checkpoint without `map_location`",
    why="every rank loads onto the GPU that saved it: N copies on GPU 0, out of memory",
    example='state = torch.load("model.pt")',
    fix="`torch.load(path, map_location=device)` (this rank's device, or `'cpu'`)",
    check=Checks.check_loading,
    fires=(
        """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
from torch.nn.parallel import DistributedDataParallel as DDP

rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
model = DDP(torch.nn.Linear(2, 2))
model.module.load_state_dict(torch.load("model.pt"))
dist.destroy_process_group()
""",
    ),
    quiet=(
        """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
from torch.nn.parallel import DistributedDataParallel as DDP

rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
model = DDP(torch.nn.Linear(2, 2))
model.module.load_state_dict(torch.load("model.pt", map_location="cpu"))
dist.destroy_process_group()
""",
    ),
    callers_guard=True,
    # in a module, what the file holds (saved from the GPU or the CPU) and who loads it show in a run
    modules_at_run=True,
    observed="a torch.load landing on cuda:0 on every rank",
)
