"""A DDP script in the style of many tutorials, for `ddplab launch`'s sanitizer (tests/sanitize/): started as one
process that starts its ranks with torch.multiprocessing.spawn, training with a Trainer class from a helper module
(sanitize_styles_trainer.py) configured by a config dict. No ddplab import.

    ddplab launch --nproc-per-node 1 sanitize_styles.py [--planted] [--out DIR]

--planted sets the config dict as a mistaken project would: {"sampler": False, "save_on": "every"} (every rank reads
the whole data set in the same shuffled order; every rank saves checkpoint.pt). Without it the script is right.
"""

import argparse
import os

import torch.distributed as dist
import torch.multiprocessing as mp
from sanitize_styles_trainer import CONFIG, Trainer

WORLD = 2


def run(rank: int, config: dict, out: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    loss = Trainer(config, rank, WORLD, out).fit()
    print(f"rank {rank}: trained, loss {loss:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--planted", action="store_true")
    p.add_argument("--out", default=".")
    args = p.parse_args()
    config = dict(CONFIG, **({"sampler": False, "save_on": "every"} if args.planted else {}))
    mp.spawn(run, args=(config, args.out), nprocs=WORLD, join=True)
