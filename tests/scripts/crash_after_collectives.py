"""A plain crash outside any collective: both ranks complete their all_reduces, then rank 1 raises. The Flight
Recorder sees every collective completed; with no stacks read (nothing hung), its summary must not send the reader
to stacks it does not show."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
grad = torch.ones(64)
for _ in range(2):
    dist.all_reduce(grad)
if dist.get_rank() == 1:
    raise ValueError("bad batch after the collectives")
dist.destroy_process_group()
