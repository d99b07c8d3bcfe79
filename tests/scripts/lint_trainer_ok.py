"""A torchrun trainer shaped like the class-based tutorials, written the careful way: `ddplab lint` must find
nothing here. Linted by tests/lint/test_lint.py; never run."""

import io
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Runner:
    def __init__(self, net: torch.nn.Module, data: DataLoader, accum: int):
        self.gpu_id = int(os.environ["LOCAL_RANK"])  # a local rank: fine to print on, not to save on
        self.rank = int(os.environ["RANK"])
        self.is_chief = self.rank == 0  # a stored test, used below as the guard
        self.net = DDP(net)
        self.data = data
        self.accum = accum
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)

    def log(self, text: str) -> None:
        print(text)  # only ever called under a rank test

    def report(self, epoch: int) -> None:
        if not self.is_chief:
            return  # early exit: the rest runs on rank 0
        print(f"epoch {epoch} done")
        torch.save(self.net.module.state_dict(), "net.pt")

    def checkpoint(self, epoch: int) -> None:
        state = {"net": self.net.module.state_dict(), "epoch": epoch}
        torch.save(state, "last.pt")

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        torch.save(self.net.module.state_dict(), buffer)  # in memory: nothing written
        return buffer.getvalue()

    @torch.no_grad()
    def evaluate(self, x: torch.Tensor) -> float:
        return self.net.module(x).mean().item()  # the plain module: no buffer broadcast

    def train(self, epochs: int) -> None:
        for epoch in range(epochs):
            self.data.sampler.set_epoch(epoch)
            print(f"[rank {self.rank}] starting epoch {epoch}")  # says who prints
            for step, (x, y) in enumerate(self.data):
                last = (step + 1) % self.accum == 0
                self.net.require_backward_grad_sync = last
                torch.nn.functional.mse_loss(self.net(x), y).backward()
                if last:
                    self.opt.step()
                    self.opt.zero_grad()
            if self.gpu_id == 0:
                self.log(f"node's first process finished epoch {epoch}")
            if self.is_chief:
                self.checkpoint(epoch)
                print(f"eval {self.evaluate(torch.ones(2, 4)):.3f}")
            self.report(epoch)
            torch.save(self.net.module.state_dict(), f"net-rank{self.rank}.pt")  # one file per rank
            print(f"process {os.getpid()} alive")


def main() -> None:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    gen = torch.Generator().manual_seed(0)
    full = TensorDataset(torch.randn(64, 4, generator=gen), torch.randn(64, 1, generator=gen))
    train = DataLoader(full, batch_size=8, sampler=DistributedSampler(full))
    mine = Subset(full, range(rank, len(full), world))  # this rank's piece already
    extra = DataLoader(mine, batch_size=8, shuffle=True)
    try:
        Runner(torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.BatchNorm1d(1)), train, accum=2).train(2)
        for batch in extra:
            pass
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
