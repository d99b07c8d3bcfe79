"""The device index from an argparse --local_rank flag (local-rank-argparse): torchrun passes LOCAL_RANK in the
environment, not the flag, so every rank keeps the default 0 and picks the same GPU. Plain script:
python -m torch.distributed.run --standalone --nproc-per-node 2 lint_local_rank_flag.py"""

import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)  # expect: local-rank-argparse
args = parser.parse_args()
device = torch.device("cpu") if not torch.cuda.is_available() else torch.device("cuda", args.local_rank)
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} would use device index {args.local_rank}", flush=True)
dist.destroy_process_group()
