"""`load-no-map-location`: `torch.load` of a checkpoint without `map_location`."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="load-no-map-location",
    severity=BUG,
    what="`torch.load` of a checkpoint without `map_location` (or with one every caller leaves None)",
    why="every rank loads onto the GPU that saved it: N copies on GPU 0, out of memory",
    example='state = torch.load("model.pt")',
    fix="`torch.load(path, map_location=device)` (this rank's device, or `'cpu'`)",
    check=Checks.check_loading,
    callers_guard=True,
    # in a module, what the file holds (saved from the GPU or the CPU) and who loads it show in a run
    modules_at_run=True,
    observed="a torch.load landing on cuda:0 on every rank",
)
