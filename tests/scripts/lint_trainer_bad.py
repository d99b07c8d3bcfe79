"""The same torchrun trainer with the mistakes real scripts make, one per marked line (`# expect: RULE`).
Linted by tests/lint/test_lint.py; never run."""

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Runner:
    def __init__(self, net: torch.nn.Module, data: DataLoader, accum: int):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.is_chief = int(os.environ["RANK"]) == 0
        self.net = DDP(net)
        self.data = data
        self.accum = accum
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def log(self, text: str) -> None:
        print(text)  # expect: unguarded-print

    def snapshot(self, epoch: int) -> None:
        torch.save({"net": self.net.module.state_dict(), "epoch": epoch}, "snap.pt")  # expect: local-rank-save

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor) -> float:
        return self.net(x).mean().item()  # expect: rank0-ddp-forward

    def train(self, epochs: int) -> None:
        for epoch in range(epochs):
            self.data.sampler.set_epoch(epoch)
            for step, (x, y) in enumerate(self.data):
                torch.nn.functional.mse_loss(self.net(x), y).backward()  # expect: grad-accum-no-sync
                if (step + 1) % self.accum == 0:
                    self.opt.step()
                    self.opt.zero_grad()
            if self.gpu_id == 0:
                self.snapshot(epoch)  # local rank 0 exists on every node: each node writes snap.pt
            if self.is_chief:
                self.log(f"eval {self.evaluate(torch.ones(2, 4)):.3f}")
            self.log("epoch done")  # the same function, now on every rank


def main() -> None:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    gen = torch.Generator().manual_seed(0)
    full = TensorDataset(torch.randn(64, 4, generator=gen), torch.randn(64, 1, generator=gen))
    sampler = DistributedSampler(full)
    train = DataLoader(full, batch_size=8, shuffle=True)  # expect: loader-without-sampler
    try:
        Runner(torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.BatchNorm1d(1)), train, accum=2).train(2)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
