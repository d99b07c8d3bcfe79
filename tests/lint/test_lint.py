"""ddplab lint on whole scripts: every rule on a script that makes every mistake (`# expect:` comments), clean
verdicts on correct scripts (the recipes, what `ddplab new` writes, the tutorial; correct scripts of the tuning sets,
each also with one mistake put back), and the CLI's exit codes, JSON and several paths."""

from __future__ import annotations

import pytest
from conftest import cli
from lintcase import HERE, SCRIPTS, expected, lint_file, lint_source
from lintcase import names_time as names

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


BAD = HERE / "scripts" / "lint_bad.py"


def test_every_mistake_is_found_on_its_line_and_nothing_else():
    result = lint_file(BAD)
    assert {(f.line, f.rule) for f in result.findings} == expected(BAD)
    assert result.backend == "nccl" and not result.ok
    assert all(f.message and f.fix for f in result.findings)


def test_all_rules_exist_in_the_bad_script():
    fired = {rule for _, rule in expected(BAD)}
    assert {
        "sets-master-env",
        "hardcoded-cuda-device",
        "unseeded-random-data",
        "sampler-no-set-epoch",
        "shuffle-with-sampler",
        "save-ddp-state-dict",
        "unguarded-save",
        "unguarded-print",
        "load-no-map-location",
        "no-destroy",
        "ddp-no-device-ids",
        "local-rank-save",
    } <= fired


TRAINER_BAD = HERE / "scripts" / "lint_trainer_bad.py"


def test_the_trainer_mistakes_are_found_on_their_lines_and_nothing_else():
    """The careful trainer (lint_trainer_ok.py) with one mistake per pattern: each found where it is."""
    result = lint_file(TRAINER_BAD)
    assert {(f.line, f.rule) for f in result.findings} == expected(TRAINER_BAD)
    assert {
        "unguarded-print",
        "local-rank-save",
        "rank0-ddp-forward",
        "grad-accum-no-sync",
        "loader-without-sampler",
    } == {rule for _, rule in expected(TRAINER_BAD)}


SRC = HERE.parent / "src" / "ddplab"


CLEAN = sorted(
    [
        HERE / "scripts" / "good_ddp.py",
        HERE / "scripts" / "lint_trainer_ok.py",
        HERE / "scripts" / "lint_spawn_ok.py",
        *SRC.glob("recipes/*.py"),
        *SRC.glob("train/*.py"),
    ]
)


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_correct_scripts_lint_clean(path):
    result = lint_file(path)
    assert result.findings == [], [(f.line, f.rule, f.message) for f in result.findings]


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_the_script_ddplab_new_writes_lints_clean(task):
    from ddplab.commands.new import render_script

    result = lint_source(render_script(task), "train.py")
    assert result.findings == [], [(f.line, f.rule, f.message) for f in result.findings]


def test_cli_exit_codes_and_json(tmp_path):
    ran = cli("lint", str(BAD), "--json", "--all")  # BAD holds the opt-in rules' mistakes too
    assert ran.code == 1
    data = ran.json()
    sure = {(f["line"], f["rule"]) for f in data["findings"] if f["confidence"] == "sure"}
    possible = {(f["line"], f["rule"]) for f in data["findings"]} - sure
    assert sure | (possible & expected(BAD)) == expected(BAD)  # beyond the marked ones, only "possible" findings
    assert data["errors"] == sum(f["level"] == "error" for f in data["findings"]) > 0

    ran = cli("lint", str(HERE / "scripts" / "good_ddp.py"))
    assert ran.code == 0 and "no DDP mistake found" in ran.out

    warnings_only = tmp_path / "warn.py"
    warnings_only.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    ran = cli("lint", str(warnings_only))
    assert ran.code == 0 and "[no-destroy]" in ran.out

    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    nul = tmp_path / "nul.py"  # a NUL byte: the parser's error has no line number
    nul.write_bytes(b"import torch\x00\n")
    for path in (broken, nul, tmp_path / "missing.py"):
        ran = cli("lint", str(path))
        assert ran.code == 2 and "Traceback" not in ran.err and len(ran.err.strip().splitlines()) == 1
        assert ":None" not in ran.err, ran.err


def test_the_guides_tutorial_example_shows_its_quiet_mistakes():
    """docs/examples/tutorial_ddp.py: the script learners copy; random data used straight in the loop, no Dataset."""
    from pathlib import Path

    from conftest import cli

    script = Path(__file__).parents[2] / "docs" / "examples" / "tutorial_ddp.py"
    ran = cli("lint", "--json", "--all", str(script))  # unseeded-random-data is opt-in
    assert ran.code == 1
    rules = sorted((f["rule"], f["line"]) for f in ran.json()["findings"])
    for finding in [
        ("sets-master-env", 13),
        ("sets-master-env", 14),
        ("unseeded-random-data", 18),
        ("save-ddp-state-dict", 28),
        ("unguarded-save", 28),
    ]:
        assert finding in rules, rules


def test_cli_lints_several_scripts_at_once():
    good, trainer_ok = HERE / "scripts" / "good_ddp.py", HERE / "scripts" / "lint_trainer_ok.py"
    ran = cli("lint", str(good), str(trainer_ok))
    assert ran.code == 0 and ran.out.count("no DDP mistake found") == 2
    ran = cli("lint", "--json", "--all", str(good), str(BAD))
    data = ran.json()
    assert ran.code == 1 and data["ok"] is False
    marked = [{(f["line"], f["rule"]) for f in r["findings"]} & expected(BAD) for r in data["results"]]
    assert [len(m) for m in marked] == [0, len(expected(BAD))] and not data["results"][0]["findings"]


# --------------------------------------------------------------- issue 28's multi-GPU rules (was test_lint_multigpu.py)


@pytest.mark.parametrize(
    "name", ["lint_shared_write.py", "lint_unreduced_metric.py", "lint_rank0_break.py", "lint_local_rank_flag.py"]
)
def test_each_demo_script_is_found_on_its_line_and_nothing_else(name):
    path = SCRIPTS / name
    assert {(f.line, f.rule) for f in lint_file(path, show_all=True).findings} == expected(path)


# ----------------------------------------------------------------- issue 28, fourth pass (was test_lint_mechanisms4.py)


CORRECT = """
import os
import time
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class AverageMeter:
    def __init__(self):
        self.sum = self.count = 0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n

    def all_reduce(self):
        t = torch.tensor([self.sum, self.count], dtype=torch.float64)
        dist.all_reduce(t)
        self.sum, self.count = t.tolist()

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def print0(*a):
    if dist.get_rank() == 0:
        print(*a)


def cycle(loader, sampler):
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for batch in loader:
            yield batch
        epoch += 1


def validate(model, loader, device):
    top1 = AverageMeter()
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            out = model(x.to(device))
            top1.update((out.argmax(1) == y.to(device)).float().mean().item(), x.size(0))
    top1.all_reduce()
    return top1.avg


def main():
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randint(0, 2, (256,), generator=g))
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=16, sampler=sampler)
    val_loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds, shuffle=False))
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)).to(device),
                device_ids=[local_rank] if torch.cuda.is_available() else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * dist.get_world_size())
    data = cycle(loader, sampler)
    losses = AverageMeter()
    start = time.time()
    steps = 0
    for step in range(200):
        x, y = next(data)
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.update(t.item() / dist.get_world_size(), x.size(0))
        if step % 50 == 0:
            print0(f"step {step} loss {losses.avg:.3f} {steps / (time.time() - start):.1f} it/s")
        if step % 100 == 0:
            acc = validate(model, val_loader, device)
            print0(f"val acc {acc:.3f}")
            if dist.get_rank() == 0:
                torch.save(model.module.state_dict(), "ckpt.pt")
            dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_script_with_meters_generators_and_rates_is_quiet():
    """Every idiom above done right: the loss all-reduced in place before the meter, the validation meter reduced by
    its own all_reduce, set_epoch inside the endless generator, a speed (steps / elapsed time) beside the loss, the
    evaluation on every rank: no finding at all."""
    assert names(CORRECT, show_all=True) == []


def test_correct_script_with_the_unreduced_loss_in_the_meter():
    """The twin: the meter fed this rank's own loss.item() is one shard's running loss, shown by print0."""
    wrong = CORRECT.replace(
        "losses.update(t.item() / dist.get_world_size(), x.size(0))", "losses.update(loss.item(), x.size(0))"
    )
    assert names(wrong) == ["unreduced-metric"]


CORRECT_TRAINER = """
import os
import numpy as np
import torch
import torch.nn.functional as F
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def ddp_setup():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")


class Trainer:
    def __init__(self, model, train_data, optimizer, save_every, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.epochs_run = 0
        self.step = 0

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        losses = []
        self.epoch_loss = torch.zeros(1, device=self.gpu_id)
        for source, targets in self.train_data:
            loss = self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))
            self.epoch_loss += loss
            self.step += 1
            losses.append(loss)
        dist.all_reduce(self.epoch_loss)
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, [l.item() for l in losses])
        if self.global_rank == 0:
            print(f"Epoch {epoch} | step {self.step} | loss {self.epoch_loss.item() / dist.get_world_size():.3f}")
            print(f"median loss {np.median([x for g in gathered for x in g]):.3f}")

    def _save_snapshot(self, epoch):
        snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
        torch.save(snapshot, self.snapshot_path)

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def main():
    ddp_setup()
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randint(0, 2, (256,), generator=g))
    loader = DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds))
    model = torch.nn.Linear(4, 2)
    trainer = Trainer(model, loader, torch.optim.SGD(model.parameters(), lr=0.1), 1, "snapshot.pt")
    trainer.train(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_trainer_with_reduced_attribute_and_gathered_list_is_quiet():
    """A trainer that all-reduces its epoch-loss attribute, all-gathers its list of losses, and shows its step
    counter (`self.step += 1`) beside them on rank 0: nothing unreduced."""
    assert names(CORRECT_TRAINER, show_all=True) == []


def test_trainer_attribute_not_reduced_is_reported():
    """The twin without the all_reduce of self.epoch_loss: one shard's loss shown as the epoch's."""
    wrong = CORRECT_TRAINER.replace("        dist.all_reduce(self.epoch_loss)\n", "")
    assert names(wrong) == ["unreduced-metric"]


CORRECT_SPAWN = """
import os
import torch
import torch.nn as nn
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def evaluate(model, loader, device):
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            pred = model(x.to(device)).argmax(1)
            correct += (pred == y.to(device)).sum().item()
            total += y.numel()
    return correct / total


def worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29500"
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world_size)
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    if torch.cuda.is_available():
        torch.cuda.set_device(rank)
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randint(0, 2, (256,), generator=g))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank)
    loader = DataLoader(ds, batch_size=16, sampler=sampler)
    test_loader = DataLoader(ds, batch_size=64)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).to(device),
                device_ids=[rank] if torch.cuda.is_available() else None)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        running = torch.zeros(1, device=device)
        n = 0
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.detach()
            n += 1
        dist.all_reduce(running)
        if rank == 0:
            acc = evaluate(model.module, test_loader, device)
            print(f"epoch {epoch} loss {running.item() / (n * world_size):.3f} acc {acc:.3f}")
            torch.save(model.module.state_dict(), "model.pt")
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = torch.cuda.device_count() or 2
    mp.spawn(worker, args=(world_size,), nprocs=world_size)
"""


def test_correct_spawn_script_whole_test_set_and_batch_count_is_quiet():
    """Rank 0 evaluates `model.module` over a test loader with no sampler (the whole set, via a helper that returns
    correct / total), and shows the all-reduced running loss divided by its batch count times the world size."""
    assert names(CORRECT_SPAWN, show_all=True) == []


def test_spawn_script_evaluating_a_shard_or_unreduced_loss_is_reported():
    """The twins: the helper handed the training loader (this rank's DistributedSampler shard), or the running loss
    not all-reduced."""
    shard = CORRECT_SPAWN.replace(
        "acc = evaluate(model.module, test_loader, device)", "acc = evaluate(model.module, loader, device)"
    )
    assert names(shard) == ["unreduced-metric"]
    unreduced = CORRECT_SPAWN.replace("        dist.all_reduce(running)\n", "")
    assert names(unreduced) == ["unreduced-metric"]


CORRECT_OPTIONAL_DDP = """
import argparse
import contextlib
import os
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--accum", type=int, default=4)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    args.local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.distributed:
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        args.rank = dist.get_rank()
    else:
        args.rank = 0
    device = torch.device("cuda", args.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randn(256, 1, generator=g))
    sampler = DistributedSampler(ds) if args.distributed else RandomSampler(ds)
    loader = DataLoader(ds, batch_size=16, sampler=sampler)
    model = nn.Linear(4, 1).to(device)
    if args.distributed:
        model = DDP(model, device_ids=[args.local_rank] if torch.cuda.is_available() else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.cuda.amp.GradScaler(enabled=torch.cuda.is_available())
    for epoch in range(args.epochs):
        if args.distributed:
            sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(loader):
            last = (i + 1) % args.accum == 0
            ctx = model.no_sync() if args.distributed and not last else contextlib.nullcontext()
            with ctx:
                with torch.autocast(device.type, enabled=torch.cuda.is_available()):
                    loss = nn.functional.mse_loss(model(x.to(device)), y.to(device)) / args.accum
                scaler.scale(loss).backward()
            if last:
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
        if args.rank == 0:
            state = model.module.state_dict() if args.distributed else model.state_dict()
            torch.save({"model": state, "epoch": epoch}, "last.pt")
    if args.distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_optional_ddp_script_is_quiet():
    """DDP only `if args.distributed:`, no_sync on the accumulation micro-steps, set_epoch, and
    `model.module.state_dict() if args.distributed else model.state_dict()`: on the else branch the model was never
    wrapped, so its state_dict is the plain one."""
    assert names(CORRECT_OPTIONAL_DDP, show_all=True) == []


def test_optional_ddp_script_saving_the_wrapper_is_reported():
    """The twin saving `model.state_dict()` on the distributed path too."""
    wrong = CORRECT_OPTIONAL_DDP.replace(
        "state = model.module.state_dict() if args.distributed else model.state_dict()", "state = model.state_dict()"
    )
    assert names(wrong) == ["save-ddp-state-dict"]


CORRECT_SLURM = """
import os
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def setup():
    rank = int(os.environ["SLURM_PROCID"])
    world_size = int(os.environ["SLURM_NTASKS"])
    gpus_per_node = torch.cuda.device_count()
    local_rank = rank - gpus_per_node * (rank // gpus_per_node)
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world_size)
    return rank, local_rank, world_size


def main():
    assert torch.cuda.is_available()
    rank, local_rank, world_size = setup()
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(256, 4, generator=g), torch.randn(256, 1, generator=g))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank)
    loader = DataLoader(ds, batch_size=16, sampler=sampler, num_workers=2, pin_memory=True)
    model = DDP(nn.Linear(4, 1).to(local_rank), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    best = float("inf")
    for epoch in range(5):
        sampler.set_epoch(epoch)
        loss_sum = torch.zeros(2, device=local_rank)
        for x, y in loader:
            x, y = x.to(local_rank, non_blocking=True), y.to(local_rank, non_blocking=True)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += torch.stack([loss.detach() * x.size(0), torch.tensor(float(x.size(0)), device=local_rank)])
        dist.all_reduce(loss_sum)
        epoch_loss = (loss_sum[0] / loss_sum[1]).item()
        stop = torch.zeros(1, device=local_rank)
        if rank == 0:
            print(f"epoch {epoch} loss {epoch_loss:.4f}")
            if epoch_loss < best:
                best = epoch_loss
                torch.save(model.module.state_dict(), "best.pt")
            elif epoch > 2:
                stop += 1
        dist.broadcast(stop, src=0)
        if stop.item() > 0:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_correct_slurm_script_with_the_cuda_check_in_the_caller_is_quiet():
    """`assert torch.cuda.is_available()` in main, then setup() with nccl: the check precedes the group; the local
    rank from SLURM_PROCID modulo the GPUs, sums all-reduced, rank 0's stop decision broadcast before the break."""
    assert names(CORRECT_SLURM, show_all=True) == []


def test_slurm_script_without_an_availability_check_gets_nccl():
    """The twins: no check at all, or a check of the GPU count against the scheduler's (not that GPUs exist), on a
    setup that does not set the device first (an unconditional set_device makes the path GPU-only: no finding,
    tests/lint/test_process_group.py), and a model wrapped with no device_ids (with them, DDP needs GPUs: the
    training could not run without them whatever the backend)."""
    unset = CORRECT_SLURM.replace("    torch.cuda.set_device(local_rank)\n", "").replace(
        "DDP(nn.Linear(4, 1).to(local_rank), device_ids=[local_rank])", "DDP(nn.Linear(4, 1))"
    )
    none = unset.replace("    assert torch.cuda.is_available()\n", "")
    assert unset != CORRECT_SLURM and "nccl-hardcoded" in names(none)
    count = unset.replace(
        "    assert torch.cuda.is_available()\n",
        "    assert int(os.environ['SLURM_GPUS_ON_NODE']) == torch.cuda.device_count()\n",
    )
    assert "nccl-hardcoded" in names(count)
    assert names(CORRECT_SLURM.replace("    assert torch.cuda.is_available()\n", "")) == []
