"""`loader-without-sampler`: a training `DataLoader(shuffle=True)` without a DistributedSampler."""

from __future__ import annotations

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule

RULE = Rule(
    id="loader-without-sampler",
    severity=BUG,
    what="a training `DataLoader(shuffle=True)` without a DistributedSampler",
    why="every rank reads all the data: N times the work for one pass, and no rank sees a shard",
    example="loader = DataLoader(ds, batch_size=8, shuffle=True)",
    fix="`DataLoader(dataset, sampler=DistributedSampler(dataset))` and `sampler.set_epoch(epoch)` every epoch",
    observed="the same samples on several ranks",
    check=Checks.check_loader_without_sampler,
    callers_guard=True,
)
