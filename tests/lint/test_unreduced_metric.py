"""unreduced-metric: one rank's shard reported as the whole (shown for real on 2 gloo ranks), in every shape a sum
over this rank's batches takes, and the reduced twins that must stay quiet.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

from conftest import torchrun
from lintcase import HEAD, SCRIPTS, found, lint_file, lint_source, names, names_time, write
from lintcase import rules_but_nccl as rules

# --------------------------------------------------------------- issue 28's multi-GPU rules (was test_lint_multigpu.py)


def test_rank0_reports_its_own_shard_as_the_whole(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_unreduced_metric.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "accuracy 100.0%" in done.stdout  # the whole dataset's accuracy is 50 %


def test_unreduced_metric_and_its_reduced_form():
    loop = textwrap.dedent("""
        from torch.utils.data import DataLoader, DistributedSampler
        loader = DataLoader([], sampler=DistributedSampler([]))
        correct = total = 0
        for x, y in loader:
            correct += 1
            total += 2
    """)
    assert rules(loop + "if dist.get_rank() == 0:\n    print(correct / total)\n") == ["unreduced-metric"]
    reduced = "t = torch.tensor([correct, total])\ndist.all_reduce(t)\ncorrect, total = t.tolist()\n"
    assert rules(loop + reduced + "if dist.get_rank() == 0:\n    print(correct / total)\n") == []
    assert rules(loop + "print(dist.get_rank(), correct / total)\n") == []  # every rank says which it is


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_a_sum_returned_by_a_helper_and_reported_once_per_node_is_unreduced(tmp_path):
    script = write(
        tmp_path,
        {
            "train.py": """\
        import os
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        from loop import run_epoch
        dist.init_process_group("gloo")
        local_rank = int(os.environ["LOCAL_RANK"])
        data = list(range(8))
        loader = DataLoader(data, sampler=DistributedSampler(data))
        loss, acc = run_epoch(loader)
        if local_rank == 0:
            print(f"accuracy {acc}")
        dist.destroy_process_group()
    """,
            "loop.py": """\
        def run_epoch(loader):
            total, correct, n = 0.0, 0, 0
            for x in loader:
                total += float(x)
                correct += 1
                n += 1
            return total / n, correct / n
    """,
        },
    )
    assert found(script) == {(None, 11, "unreduced-metric")}
    reduced = (tmp_path / "loop.py").read_text().replace("    return", "    correct = reduce_mean(correct)\n    return")
    (tmp_path / "loop.py").write_text(reduced)
    assert found(script) == set()


# ------------------------------------------------------------- issue 28, third held-out set (was test_lint_heldout3.py)


def test_metric_over_a_loader_built_without_sampler_is_the_whole():
    """The test loader is built without a sampler (its kwargs too): each rank, rank 0 included, reads the whole
    test set, so rank 0's sum is the whole; the same loader given a DistributedSampler is 1/N of it."""
    whole = """
    from torch.utils.data import DataLoader, DistributedSampler
    def test(model, loader):
        correct = 0
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
        print("accuracy", correct)
    dist.init_process_group("gloo")
    train_set = test_set = torch.utils.data.TensorDataset(torch.ones(8, 2), torch.zeros(8).long())
    train_loader = DataLoader(train_set, batch_size=2, sampler=DistributedSampler(train_set))
    test_kwargs = {"batch_size": 2}
    extra = {"num_workers": 1}
    test_kwargs.update(extra)
    test_loader = DataLoader(test_set, **test_kwargs)
    model = torch.nn.Linear(2, 2)
    if dist.get_rank() == 0:
        test(model, test_loader)
    dist.destroy_process_group()
    """
    assert "unreduced-metric" not in names(whole, show_all=True)
    # `sampler=None` is the default, said aloud (hifi-gan's validation loader, round 11)
    none = whole.replace("DataLoader(test_set, **test_kwargs)", "DataLoader(test_set, sampler=None, batch_size=1)")
    assert "unreduced-metric" not in names(none, show_all=True)
    # a sampler of torch's over every index, given or named (round 35's MetaFold: `SequentialSampler` for evaluation)
    for sampler in ("SequentialSampler(test_set)", "every", "BatchSampler(RandomSampler(test_set), 2, False)"):
        key = "batch_sampler" if "Batch" in sampler else "sampler"
        seq = whole.replace("DataLoader(test_set, **test_kwargs)", f"DataLoader(test_set, {key}={sampler})").replace(
            "from torch.utils.data import DataLoader, DistributedSampler",
            "from torch.utils.data import *\n    every = SequentialSampler(range(8))",
        )
        assert "unreduced-metric" not in names(seq, show_all=True), sampler
    assert "unreduced-metric" in names(
        whole.replace('extra = {"num_workers": 1}', 'extra = {"sampler": DistributedSampler(test_set)}')
    )
    assert "unreduced-metric" in names(
        whole.replace(
            "DataLoader(test_set, **test_kwargs)", "DataLoader(test_set, sampler=DistributedSampler(test_set))"
        )
    )


def test_metric_over_a_loader_known_by_its_sampler_logged_as_an_average():
    """`for x in self.train_data` (a loader: its .sampler.set_epoch is called), `avg = total / len(...)` logged by
    mlflow.log_metric on rank 0: 1/N of the data; the total all-reduced first is the whole."""
    shard = """
    import mlflow
    from torch.utils.data import DataLoader, DistributedSampler
    class Trainer:
        def __init__(self, data):
            self.rank = dist.get_rank()
            self.train_data = DataLoader(data, sampler=DistributedSampler(data))
        def run_epoch(self, epoch):
            self.train_data.sampler.set_epoch(epoch)
            total = 0
            for x, y in self.train_data:
                total += float(x.sum())
            avg = total / len(self.train_data)
            if self.rank == 0:
                mlflow.log_metric("train_loss", avg, step=epoch)
    dist.init_process_group("gloo")
    Trainer(torch.utils.data.TensorDataset(torch.ones(4, 2), torch.ones(4))).run_epoch(0)
    dist.destroy_process_group()
    """
    assert "unreduced-metric" in names(shard)
    reduced = shard.replace(
        "            avg = total / len(self.train_data)\n",
        "            t = torch.tensor([total])\n            dist.all_reduce(t)\n"
        "            avg = t.item() / len(self.train_data)\n",
    )
    assert "unreduced-metric" not in names(reduced, show_all=True)


# ----------------------------------------------------------------- issue 28, fourth pass (was test_lint_mechanisms4.py)


METER = """
from torch.utils.data import DataLoader, DistributedSampler
from torch.nn.parallel import DistributedDataParallel as DDP

class AverageMeter:
    def __init__(self):
        self.sum = self.count = 0
    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

def train(loader, model, optimizer, rank):
    batch_time = AverageMeter()
    losses = AverageMeter()
    end = time.time()
    for x, y in loader:
        loss = model(x).sub(y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.update(loss.item(), x.size(0))
        batch_time.update(time.time() - end)
        if rank == 0:
            print("loss {loss.avg:.3f}".format(loss=losses))

dist.init_process_group("gloo")
ds = torch.utils.data.TensorDataset(torch.zeros(8, 2), torch.zeros(8, 1))
loader = DataLoader(ds, sampler=DistributedSampler(ds))
model = DDP(torch.nn.Linear(2, 1))
train(loader, model, torch.optim.SGD(model.parameters(), 0.1), dist.get_rank())
dist.destroy_process_group()
"""


def test_running_meter_shown_on_rank0_is_one_shard():
    """`losses.update(loss.item(), n)` on an AverageMeter in a loop over this rank's batches, shown under a rank-0
    test: the meter is a sum in an object, 1/N of the data."""
    assert "unreduced-metric" in names_time(METER)


def test_meter_of_reduced_value_or_timer_is_quiet():
    """The same meter fed a value that came out of a reducer (`reduced = reduce_tensor(loss)`) holds the whole; a
    timer meter (`batch_time.update(time.time() - end)`) is no metric."""
    reduced = METER.replace(
        "        losses.update(loss.item(), x.size(0))\n",
        "        reduced = reduce_tensor(loss.detach())\n        losses.update(reduced.item(), x.size(0))\n",
    )
    reduced = "def reduce_tensor(t):\n    dist.all_reduce(t)\n    return t / dist.get_world_size()\n" + reduced
    assert "unreduced-metric" not in names_time(reduced, show_all=True)
    timer_only = METER.replace(
        'print("loss {loss.avg:.3f}".format(loss=losses))', 'print("time {t.avg:.3f}".format(t=batch_time))'
    )
    assert "unreduced-metric" not in names_time(timer_only, show_all=True)


VAL_STEPS = """
from torch.nn.parallel import DistributedDataParallel as DDP

def print0(*args):
    if int(os.environ.get("RANK", 0)) == 0:
        print(*args)

class ShardLoader:
    def __init__(self, path, rank, world):
        self.data = torch.load(path, map_location="cpu")[rank::world]
        self.i = 0
    def next_batch(self):
        self.i += 1
        return self.data[self.i - 1]

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Linear(4, 1))
val_loader = ShardLoader("val.pt", rank, dist.get_world_size())
steps = 0
for step in range(100):
    with torch.no_grad():
        val_loss = 0.0
        for _ in range(20):
            x, y = val_loader.next_batch()
            val_loss += (model(x) - y).pow(2).mean().item()
            steps += 1
        val_loss /= 20
    torch.cuda.synchronize()
    if steps % 100 == 0:
        print0(f"step {step} steps {steps} val loss {val_loss}")
dist.destroy_process_group()
"""


def test_val_loss_over_next_batch_steps_shown_by_rank0_helper():
    """`for _ in range(n): x, y = val_loader.next_batch(); val_loss += ...` over a loader built with the rank,
    shown by `print0` (a helper that prints only where RANK is 0): one shard's loss as the whole validation loss.
    `torch.cuda.synchronize()` waits for this GPU and reduces nothing."""
    assert "unreduced-metric" in names_time(VAL_STEPS)


def test_val_loss_all_reduced_or_step_counter_is_quiet():
    """The same loss all-reduced before print0 is the whole; a step counter (`steps += 1`, used as a step index in
    `steps % 100`) shown alone is no metric, nor is a time or a rate over time."""
    reduced = VAL_STEPS.replace(
        "        val_loss /= 20\n",
        "        val_loss /= 20\n"
        "        t = torch.tensor(val_loss)\n"
        "        dist.all_reduce(t)\n"
        "        val_loss = t.item() / dist.get_world_size()\n",
    )
    assert "unreduced-metric" not in names_time(reduced, show_all=True)
    counter = VAL_STEPS.replace(' val loss {val_loss}"', '"')
    assert "unreduced-metric" not in names_time(counter, show_all=True)
    timed = (
        VAL_STEPS.replace("        val_loss /= 20\n", "        val_loss /= 20\n        t0 = time.time()\n")
        .replace("            steps += 1\n", "            steps += 1\n            wait += time.time() - t0\n")
        .replace("steps = 0\n", "steps = 0\nwait = 0.0\n")
        .replace(' val loss {val_loss}"', ' rate {steps / wait}"')
    )
    assert "unreduced-metric" not in names_time(timed, show_all=True)


ENDLESS = """
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

def cycle(dl):
    while True:
        for batch in dl:
            yield batch

def main():
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
    sampler = DistributedSampler(ds)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    data = cycle(loader)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    total = 0.0
    for step in range(1000):
        x, y = next(data)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
        if dist.get_rank() == 0:
            print(f"loss {total / (step + 1)}")
    dist.destroy_process_group()

main()
"""


def test_batches_from_an_endless_generator_over_the_loader():
    """`data = cycle(loader)`, `next(data)` in a step loop: the batches are this rank's shard, so a running loss
    shown on rank 0 is 1/N of the data; and every restart of the `while True` is a new pass over the sampler, whose
    set_epoch nobody calls (reported at the sampler: there is no epoch loop)."""
    found = names_time(ENDLESS)
    assert "unreduced-metric" in found and "sampler-no-set-epoch" in found


def test_endless_generator_twins_are_quiet():
    """The loss all-reduced before it is shown; the generator counting its passes into set_epoch; a single pass
    over the loader with no outer loop: nothing to report."""
    reduced = ENDLESS.replace(
        "        total += loss.item()\n",
        "        t = loss.detach().clone()\n        dist.all_reduce(t)\n        total += t.item()\n",
    )
    assert "unreduced-metric" not in names_time(reduced, show_all=True)
    counted = ENDLESS.replace(
        "def cycle(dl):\n    while True:\n",
        "def cycle(dl):\n    epoch = 0\n    while True:\n        dl.sampler.set_epoch(epoch)\n        epoch += 1\n",
    )
    assert "sampler-no-set-epoch" not in names_time(counted, show_all=True)
    one_pass = ENDLESS.replace(
        "    while True:\n        for batch in dl:\n            yield batch\n",
        "    for batch in dl:\n        yield batch\n",
    )
    assert "sampler-no-set-epoch" not in names_time(one_pass, show_all=True)


TRAINER = """
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class Trainer:
    def __init__(self, model, train_data, optimizer):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])
        self.train_data = train_data
        self.optimizer = optimizer
        self.epoch_loss = 0.0

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        self.epoch_loss = 0.0
        for source, targets in self.train_data:
            self.epoch_loss += self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))
        if self.gpu_id == 0:
            print(f"Epoch {epoch} | loss {self.epoch_loss / len(self.train_data)}")


dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
model = torch.nn.Linear(4, 1)
trainer = Trainer(model, DataLoader(ds, sampler=DistributedSampler(ds)), torch.optim.SGD(model.parameters(), 0.1))
for epoch in range(5):
    trainer._run_epoch(epoch)
dist.destroy_process_group()
"""


def test_sum_kept_in_a_trainer_attribute_is_one_shard():
    """`self.epoch_loss += self._run_batch(...)` over this rank's batches, printed under `gpu_id == 0`: a sum kept
    in an attribute is as much one shard's as a local one."""
    assert "unreduced-metric" in names_time(TRAINER)


def test_trainer_attribute_reduced_first_is_quiet():
    """The same attribute all-reduced (through a tensor) before the print is the whole."""
    reduced = TRAINER.replace(
        "        if self.gpu_id == 0:\n",
        "        t = torch.tensor([self.epoch_loss])\n        dist.all_reduce(t)\n        if self.gpu_id == 0:\n",
    ).replace("loss {self.epoch_loss / len(self.train_data)}", "loss {t.item() / len(self.train_data)}")
    assert "unreduced-metric" not in names_time(reduced, show_all=True)


LIST_MEAN = """
import numpy as np
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("gloo")
g = torch.Generator().manual_seed(0)
ds = torch.utils.data.TensorDataset(torch.randn(64, 4, generator=g), torch.randn(64, 1, generator=g))
train_loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    train_loader.sampler.set_epoch(epoch)
    losses = []
    for x, y in train_loader:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    avg = np.mean(losses)
    if dist.get_rank() == 0:
        print(f"epoch {epoch} loss {avg}")
dist.destroy_process_group()
"""


def test_losses_collected_in_a_list_and_averaged_on_rank0():
    """`losses.append(loss.item())` over this rank's batches, `avg = np.mean(losses)` shown on rank 0: a list is a
    sum kept item by item, one shard's."""
    assert "unreduced-metric" in names_time(LIST_MEAN)


def test_list_of_all_reduced_losses_is_quiet():
    """Each loss all-reduced in place before it is appended: the list holds whole values."""
    reduced = LIST_MEAN.replace(
        "        losses.append(loss.item())\n",
        "        t = loss.detach().clone()\n        dist.all_reduce(t)\n"
        "        losses.append(t.item() / dist.get_world_size())\n",
    )
    assert "unreduced-metric" not in names_time(reduced, show_all=True)


# ------------------------------------------------------------------ issue 28, fifth pass (was test_lint_mechanisms5.py)


def test_sum_of_values_a_helper_already_reduced_is_whole():
    """`loss, preds = run_batch(x)` where run_batch returns `reduce_mean(loss)` on the distributed path: the sum of
    those losses is of whole values, not one shard's."""
    src = """
    from torch.utils.data import DataLoader, DistributedSampler

    def reduce_mean(t, n):
        rt = t.clone()
        dist.all_reduce(rt)
        return rt / n

    def run_batch(model, x):
        loss = model(x).sum()
        reduced = reduce_mean(loss, 2)
        return reduced, loss

    def train(model, loader, rank):
        total = 0
        for x in loader:
            loss, raw = run_batch(model, x)
            total += loss
        if rank == 0:
            print(total / len(loader))

    dist.init_process_group("gloo")
    ds = torch.zeros(8, 2)
    train(torch.nn.Linear(2, 1), DataLoader(ds, sampler=DistributedSampler(ds)), dist.get_rank())
    dist.destroy_process_group()
    """
    assert "unreduced-metric" not in names(src)
    assert "unreduced-metric" in names(src.replace("loss, raw = run_batch", "raw, loss = run_batch"))


# ------------------------------------------------------------------ issue 28, sixth pass (was test_lint_mechanisms6.py)


def _metric_project(tmp_path, loader_line: str, show_all: bool = False) -> list[str]:
    """A train_utils module (star-imported through its package) whose epoch function sums a loss over
    `pbar = tqdm(enumerate(loader))` and logs it on rank 0; the script hands it `loader_line`'s loader."""
    pkg = tmp_path / "src"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("from .train_utils import *\n")
    (pkg / "train_utils.py").write_text(
        HEAD
        + textwrap.dedent("""
    from tqdm import tqdm
    import wandb

    def make_loader(ds):
        loader = torch.utils.data.DataLoader(ds, batch_size=4)
        return loader

    def run_epoch(model, loader, rank):
        loss_sum = 0
        pbar = tqdm(enumerate(loader), total=len(loader))
        for step, (x, y) in pbar:
            loss = model(x).sum()
            loss_sum += loss.item()
        if rank == 0:
            wandb.log({"loss": loss_sum / len(loader)})
    """)
    )
    (tmp_path / "train.py").write_text(
        HEAD
        + textwrap.dedent(f"""
    from src import *
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ds = torch.utils.data.TensorDataset(torch.ones(8, 2), torch.ones(8))
    {loader_line}
    model = torch.nn.Linear(2, 1)
    for epoch in range(2):
        run_epoch(model, loader, rank)
    dist.destroy_process_group()
    """)
    )
    return [f.rule for f in lint_file(tmp_path / "train.py", show_all).findings]


def test_sum_over_a_wrapped_loader_in_a_star_imported_module(tmp_path):
    """The loop reads the loader through `tqdm(enumerate(loader))`, and the script reaches the module's function
    through `from src import *` (src/__init__: `from .train_utils import *`): the sum is this rank's shard."""
    found = _metric_project(tmp_path, "loader = torch.utils.data.DataLoader(ds, sampler=DistributedSampler(ds))")
    assert "unreduced-metric" in found


def test_sum_over_a_plain_loader_the_caller_hands_over(tmp_path):
    """The same function handed a loader a project helper builds without a sampler (`make_loader(ds)`): every
    rank sums the whole set."""
    found = _metric_project(tmp_path, "loader = make_loader(ds)\n    sampler = DistributedSampler(ds)", show_all=True)
    assert "unreduced-metric" not in found


def test_a_loader_factory_whose_mode_argument_leaves_the_sampler_out(tmp_path):
    """`build_dataloader(mode)` builds a DistributedSampler for "train" and none for "validation" (round 30's SSQL):
    a sum over what the validation call gives is the whole set's; over the train call's, this rank's shard."""
    data = """
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    def build_dataloader(mode, ds):
        if mode == "train":
            loader = DataLoader(ds, sampler=DistributedSampler(ds), batch_size=4)
        elif mode == "validation":
            loader = DataLoader(ds, batch_size=4)
        return loader
    """
    script = """
    import torch
    import torch.distributed as dist
    import data

    def validate(loader, model):
        correct = 0
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
        if dist.get_rank() == 0:
            print("accuracy", correct)

    dist.init_process_group("gloo")
    ds = torch.utils.data.TensorDataset(torch.ones(8, 2), torch.zeros(8, dtype=torch.long))
    val_loader = data.build_dataloader("validation", ds)
    validate(val_loader, torch.nn.Linear(2, 2))
    dist.destroy_process_group()
    """
    entry = write(tmp_path / "a", {"train.py": script, "data.py": data})
    assert "unreduced-metric" not in {rule for _, _, rule in found(entry, show_all=True)}
    entry = write(tmp_path / "b", {"train.py": script.replace('"validation", ds', '"train", ds'), "data.py": data})
    assert "unreduced-metric" in {rule for _, _, rule in found(entry)}


def test_project_logger_that_prints_on_rank0_is_a_rank0_report():
    """`logger.log_string(...)` of a Logger whose method prints only under `dist.get_rank() == 0`: a sum over this
    rank's batches handed to it is reported on rank 0. A method whose rank test reads a parameter (`rank=0`, the
    caller's choice) is no such reporter."""
    src = """
    from torch.utils.data.distributed import DistributedSampler

    class Logger:
        def log_string(self, out_str):
            if dist.get_rank() == 0:
                print(out_str)

    def train(loader, model, logger):
        loss_sum = 0
        for x, y in loader:
            loss_sum += model(x).sum().item()
        logger.log_string("loss %f" % loss_sum)

    dist.init_process_group("gloo")
    ds = torch.utils.data.TensorDataset(torch.ones(8, 2), torch.ones(8))
    loader = torch.utils.data.DataLoader(ds, sampler=DistributedSampler(ds))
    train(loader, torch.nn.Linear(2, 1), Logger())
    dist.destroy_process_group()
    """
    assert "unreduced-metric" in names(src)
    twin = src.replace("def log_string(self, out_str):", "def log_string(self, out_str, rank=0):").replace(
        "if dist.get_rank() == 0:", "if rank == 0:"
    )
    assert "unreduced-metric" not in names(twin)


def test_a_loop_only_rank0_runs_is_possible_unless_its_loader_is_seen_sharded():
    """`def evaluate(...): if rank != 0: return` then a sum over `data["val"]`: rank 0 alone reads that loader, so
    its sum is 1/N only if the loader is sharded, which lint does not see (round 10, open_clip's evaluate)."""
    src = """
    from torch.utils.data import DataLoader, DistributedSampler

    def evaluate(model, data):
        if dist.get_rank() != 0:
            return
        total = 0
        for x in data["val"].loader:
            total += model(x).item()
        print(total)

    dist.init_process_group("gloo")
    ds = list(range(8))
    train_loader = DataLoader(ds, sampler=DistributedSampler(ds))
    evaluate(torch.nn.Linear(1, 1), {"val": train_loader})
    dist.destroy_process_group()
    """
    found = [
        f for f in lint_source(HEAD + textwrap.dedent(src), show_all=True).findings if f.rule == "unreduced-metric"
    ]
    assert [(f.confidence, f.why) for f in found] == [
        ("possible", "the loop runs on rank 0 only: whether its loader is sharded shows in a run")
    ]
    assert "unreduced-metric" in names(src.replace('data["val"].loader', "train_loader"))  # seen sharded: sure


def test_each_helper_sum_reported_is_its_own_finding():
    """Two helpers each return this rank's sum (the epoch's train loss, the test loss), and rank 0 prints both: two
    findings, one per sum (round 18: the second was masked by the first)."""
    source = (SCRIPTS.parent / "lint" / "fixtures" / "unreduced-metric" / "fires_7.py").read_text()
    assert [f.line for f in lint_source(source).findings if f.rule == "unreduced-metric"] == [44, 47]


def test_two_dicts_of_sums_logged_through_one_loop_name_are_two_findings():
    """PccAI logs the train and the validation dicts of sums each with `for k, v in d.items()`: the same `v` reads
    another dict in each loop, and each is said."""
    source = (SCRIPTS.parent / "lint" / "fixtures" / "unreduced-metric" / "fires_9.py").read_text()
    twice = source.replace(
        "        avg_loss = train_one_epoch(model, loader, opt)\n",
        "        avg_loss = train_one_epoch(model, loader, opt)\n        val_loss = train_one_epoch(model, loader, opt)\n",
    ).replace(
        "    dist.destroy_process_group()\n",
        "        for k, v in val_loss.items():\n            if writer is not None:\n                writer.add_scalar(k, v, epoch)\n"
        "    dist.destroy_process_group()\n",
    )
    said = [f.message.split()[0] for f in lint_source(twice).findings if f.rule == "unreduced-metric"]
    assert said == ["avg_loss", "val_loss"]
