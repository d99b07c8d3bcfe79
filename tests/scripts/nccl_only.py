"""Hard-codes the nccl backend: `ddplab launch` must refuse to start more processes than there are GPUs."""

import torch.distributed as dist

dist.init_process_group("nccl")
dist.destroy_process_group()
