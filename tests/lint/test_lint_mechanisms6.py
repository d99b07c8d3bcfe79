"""Issue 28, sixth pass: mechanisms that recur across the held-out sets (a guard written with the one-process path,
a function only ever run where a caller guards it, the rank reaching a device through a helper, an attribute or an
options object, a sum over this rank's batches reported as the whole). Each with a minimal script that shows it and
its twin that must behave the other way."""

from __future__ import annotations

import textwrap

from ddplab.lint import lint_file, lint_source

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def names(source: str) -> list[str]:
    """The rule of each finding; the source is dedented and put after HEAD."""
    return sorted(f.rule for f in lint_source(HEAD + textwrap.dedent(source)).findings)


# ------------------------------------------------------------------------------------------- guards

def test_no_group_or_rank0_is_a_rank0_guard():
    """`if not is_distributed or local_rank == 0:` with is_distributed set True where the group is made: the first
    part holds only on the one-process path, so the block runs on rank 0 only."""
    src = """
    def main(local_rank, world_size):
        if world_size > 1:
            is_distributed = True
            dist.init_process_group("gloo", rank=local_rank, world_size=world_size)
        else:
            is_distributed = False
        if not is_distributed or local_rank == 0:
            print("hello")
            torch.save({}, "ckpt.pt")
        dist.destroy_process_group()
    """
    assert names(src) == []
    found = names(src.replace("not is_distributed or local_rank == 0", "not is_distributed or local_rank >= 0"))
    assert "unguarded-print" in found and "unguarded-save" in found


def test_module_function_handed_to_spawn_runs_on_every_rank(tmp_path):
    """`mp.spawn(main, ...)` in the script with `else: main(0, 1)` as the one-GPU fallback: main still runs on
    every rank, so what it does under its own rank test is judged as sure."""
    (tmp_path / "train_module.py").write_text(HEAD + textwrap.dedent("""
    def main(rank, world_size):
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
        for epoch in range(10):
            for x in range(3):
                model(torch.ones(2)).sum().backward()
            if rank == 0:
                if epoch > 5:
                    break
        dist.destroy_process_group()
    """))
    script = textwrap.dedent("""
    import torch
    from train_module import main

    if __name__ == '__main__':
        n = torch.cuda.device_count()
        if n > 1:
            torch.multiprocessing.spawn(main, args=(n,), nprocs=n)
        else:
            main(0, 1)
    """)
    (tmp_path / "run.py").write_text(script)
    assert "rank0-early-exit" in [f.rule for f in lint_file(tmp_path / "run.py").findings]
    # the workers run another function: main runs only in the one-process fallback, the parent
    (tmp_path / "run.py").write_text(script.replace("spawn(main,", "spawn(other,").replace(
        "if __name__", "def other(rank, n):\n    pass\n\nif __name__"))
    assert "rank0-early-exit" not in [f.rule for f in lint_file(tmp_path / "run.py").findings]


def test_config_dict_key_names_the_rank():
    """`self.local_master = config['local_rank'] == 0`: a config dict read like an options object, so a save under
    it is one writer per node, and under `config['rank'] == 0` one writer."""
    src = """
    class Trainer:
        def __init__(self, config):
            dist.init_process_group("gloo")
            self.local_master = config['local_rank'] == 0

        def save(self):
            if not self.local_master:
                return
            torch.save({}, "ckpt.pt")

    Trainer({'local_rank': 0}).save()
    dist.destroy_process_group()
    """
    assert "local-rank-save" in names(src) and "unguarded-save" not in names(src)
    assert names(src.replace("config['local_rank']", "config['rank']")) == []
    assert "unguarded-save" in names(src.replace("config['local_rank']", "config['seed']"))


# ------------------------------------------------------------------------------------------- the global rank as device

def test_rank_zero_fallback_keeps_the_global_rank():
    """`rank = dist.get_rank()` on the distributed path and `rank = 0` on the other: where there are several ranks
    the name holds the global rank, so set_device(rank) is the global rank as a device (also as `self.rank`)."""
    src = """
    def main(ddp):
        if ddp:
            dist.init_process_group("gloo")
            rank = dist.get_rank()
            torch.cuda.set_device(rank)
        else:
            rank = 0
        dist.destroy_process_group()
    """
    assert "global-rank-device-ids" in names(src)
    assert "global-rank-device-ids" not in names(src.replace("rank = 0", "rank = int(os.environ['LOCAL_RANK'])"))
    attr = """
    class Trainer:
        def __init__(self, ddp):
            dist.init_process_group("gloo")
            if ddp:
                self.rank = dist.get_rank()
            else:
                self.rank = 0
            torch.cuda.set_device(self.rank)
    Trainer(True)
    dist.destroy_process_group()
    """
    assert "global-rank-device-ids" in names(attr)
    assert "global-rank-device-ids" not in names(attr.replace("self.rank = 0", "self.rank = 1"))


def test_options_object_field_read_through_a_parameter():
    """`CFG.rank = int(os.environ['RANK'])`, then `train(CFG)` and `DDP(..., device_ids=[config.rank])` inside:
    the field is the global rank wherever the object is passed."""
    src = """
    from torch.nn.parallel import DistributedDataParallel as DDP
    class CFG:
        pass

    def train(config):
        model = DDP(torch.nn.Linear(2, 2), device_ids=[config.rank])

    if __name__ == "__main__":
        CFG.rank = int(os.environ['RANK'])
        dist.init_process_group("gloo", rank=CFG.rank)
        train(CFG)
        dist.destroy_process_group()
    """
    assert "global-rank-device-ids" in names(src)
    assert "global-rank-device-ids" not in names(src.replace("os.environ['RANK']", "os.environ['LOCAL_RANK']"))


def test_branch_reached_only_from_the_guarded_call():
    """`save(..., last=True)` on every rank and `save(...)` under rank 0: the `else` of `if last:` runs only from the
    guarded call, so its torch.save is rank 0's; the `if last:` branch runs on every rank."""
    src = """
    def save(epoch, last=False):
        if last:
            torch.save({}, "last.pt")
        else:
            torch.save({}, f"epoch_{epoch}.pt")

    dist.init_process_group("gloo")
    for epoch in range(3):
        if dist.get_rank() == 0:
            save(epoch)
    save(3, last=LAST)
    dist.destroy_process_group()
    """
    found = lint_source(HEAD + textwrap.dedent(src).replace("LAST", "True")).findings
    assert [(f.rule, f.line) for f in found if "save" in f.rule] == [("unguarded-save", 7)]
    found = lint_source(HEAD + textwrap.dedent(src).replace("LAST", "False")).findings
    assert [(f.rule, f.line) for f in found if "save" in f.rule] == [("unguarded-save", 9)]


# ------------------------------------------------------------------------------------------- sums over batches

def _metric_project(tmp_path, loader_line: str, show_all: bool = False) -> list[str]:
    """A train_utils module (star-imported through its package) whose epoch function sums a loss over
    `pbar = tqdm(enumerate(loader))` and logs it on rank 0; the script hands it `loader_line`'s loader."""
    pkg = tmp_path / "src"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("from .train_utils import *\n")
    (pkg / "train_utils.py").write_text(HEAD + textwrap.dedent("""
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
    """))
    (tmp_path / "train.py").write_text(HEAD + textwrap.dedent(f"""
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
    """))
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
        "if dist.get_rank() == 0:", "if rank == 0:")
    assert "unreduced-metric" not in names(twin)


# ------------------------------------------------------------------------------------------- per-rank files

def test_rank_suffix_chosen_when_there_are_several_processes():
    """`suffix = ""`, then `if dist.get_world_size() > 1: suffix = f"_{dist.get_rank()}"`: each rank writes its own
    file wherever there are several; a suffix chosen by an option instead is not per rank on every run."""
    src = """
    def save_rng(path, per_rank):
        suffix = ""
        if dist.get_world_size() > 1:
            suffix = f"_{dist.get_rank()}"
        torch.save({}, f"{path}/rng{suffix}.pth")

    dist.init_process_group("gloo")
    save_rng("out", True)
    dist.destroy_process_group()
    """
    assert "unguarded-save" not in names(src)
    assert "unguarded-save" in names(src.replace("dist.get_world_size() > 1", "per_rank"))


def test_else_of_several_processes_is_one_process():
    """`if dist.get_world_size() > 1: DataLoader(sampler=...) else: DataLoader(shuffle=True)`: the else runs with
    one process, where reading the whole set is right (also `world_size > 1`, `dist.is_initialized()`)."""
    src = """
    from torch.utils.data.distributed import DistributedSampler
    dist.init_process_group("gloo")
    ds = torch.utils.data.TensorDataset(torch.ones(8, 2))
    if dist.get_world_size() > 1:
        loader = torch.utils.data.DataLoader(ds, sampler=DistributedSampler(ds))
    else:
        loader = torch.utils.data.DataLoader(ds, shuffle=True)
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
    dist.destroy_process_group()
    """
    assert "loader-without-sampler" not in names(src)
    assert "loader-without-sampler" not in names(src.replace("dist.get_world_size() > 1", "dist.is_initialized()"))
    assert "loader-without-sampler" in names(src.replace("dist.get_world_size() > 1", "dist.get_world_size() > 2"))


def test_flag_cleared_without_cuda_is_a_cuda_check():
    """`if torch.cuda.is_available(): ... else: args.distributed = False`, then `if args.distributed:
    init_process_group("nccl")`: NCCL runs only where CUDA is."""
    src = """
    class A:
        pass
    args = A()
    args.distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if torch.cuda.is_available():
        args.device = "cuda"
    else:
        args.distributed = False
    if args.distributed:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(backend="nccl")
    dist.destroy_process_group()
    """
    assert "nccl-hardcoded" not in names(src)
    assert "nccl-hardcoded" in names(src.replace("    args.distributed = False", "    args.device = 'cpu'"))


# ------------------------------------------------------------------------------------------- ranks through parameters

def test_parameter_every_caller_fills_with_a_rank_test():
    """`def parse_args(verbose): if verbose: print(...)`, called `parse_args(rank == 0)` and `parse_args(False)`:
    the print runs on rank 0 only. One call passing True makes it every rank's."""
    src = """
    def parse_args(verbose):
        if verbose:
            print("options")

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    parse_args(rank == 0)
    parse_args(False)
    dist.destroy_process_group()
    """
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace("parse_args(False)", "parse_args(True)"))


def test_parameter_every_caller_fills_with_the_rank(tmp_path):
    """`setup_logger(name, save_dir, distributed_rank)` in another module returns early when distributed_rank > 0,
    and the script passes get_rank(): what follows runs on rank 0 only (makedirs without exist_ok is fine)."""
    (tmp_path / "logger.py").write_text(textwrap.dedent("""
    import os
    def setup_logger(name, save_dir, distributed_rank):
        if distributed_rank > 0:
            return None
        if not os.path.exists(save_dir):
            os.makedirs(save_dir)
    """))
    script = HEAD + "from logger import setup_logger\ndist.init_process_group('gloo')\n" \
        "setup_logger('x', 'logs', dist.get_rank())\ndist.destroy_process_group()\n"
    (tmp_path / "train.py").write_text(script)
    assert "shared-path-write" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("dist.get_rank()", "int(os.environ['SEED'])"))
    assert "shared-path-write" in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_group_flag_compared_with_a_bool_and_counted_processes():
    """`args.distributed = num_gpus > 1` with num_gpus from WORLD_SIZE (False again without CUDA), and the save
    under `(args.distributed is not True) or (args.distributed and args.local_rank == 0)`: the first part is the
    one-process path, the second one writer per node."""
    src = """
    class A:
        pass
    args = A()
    args.local_rank = int(os.environ["LOCAL_RANK"])
    num_gpus = int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else 1
    args.distributed = num_gpus > 1
    if not torch.cuda.is_available():
        args.distributed = False
    if args.distributed:
        dist.init_process_group("gloo")
    if (args.distributed is not True) or (args.distributed and args.local_rank == 0):
        torch.save({}, "ckpt.pt")
    dist.destroy_process_group()
    """
    found = names(src)
    assert "local-rank-save" in found and "unguarded-save" not in found
    assert "unguarded-save" in names(src.replace("args.distributed is not True", "args.distributed is True"))


def test_rank_handed_to_a_constructor_through_a_helper():
    """`setting(rank)` -> `Trainer(gpu_id=device)` -> `self.gpu_id = gpu_id`, with rank = LOCAL_RANK: a save
    under `self.gpu_id == 0` is one writer per node; with RANK handed down it is rank 0's."""
    src = """
    class Trainer:
        def __init__(self, model, gpu_id):
            self.gpu_id = gpu_id
            self.model = model

        def save(self):
            if self.gpu_id == 0:
                torch.save(self.model.state_dict(), "last.pt")

    def setting(model, device):
        Trainer(model, gpu_id=device).save()

    dist.init_process_group("gloo")
    rank = int(os.environ["LOCAL_RANK"])
    setting(torch.nn.Linear(2, 2), rank)
    dist.destroy_process_group()
    """
    assert "local-rank-save" in names(src)
    assert "local-rank-save" not in names(src.replace('"LOCAL_RANK"', '"RANK"'))


# ------------------------------------------------------------------------------------------- reading the project

def test_namespace_package_above_the_script(tmp_path):
    """`from utils.init import init` in scripts/train.py, utils/ beside scripts/ without an __init__.py (run with
    PYTHONPATH=./): the module is read, so its --local_rank flag is seen."""
    (tmp_path / "utils").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "utils" / "init.py").write_text(
        "import argparse\ndef init():\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--local_rank', type=int)\n    return p.parse_args()\n")
    (tmp_path / "scripts" / "train.py").write_text(
        HEAD + "from utils.init import init\nargs = init()\ntorch.cuda.set_device(args.local_rank)\n"
        "dist.init_process_group('gloo')\ndist.destroy_process_group()\n")
    assert "local-rank-argparse" in [f.rule for f in lint_file(tmp_path / "scripts" / "train.py").findings]


def test_gpu_option_is_not_a_device_index_test():
    """`if cfg.gpu:` is an on/off option: the collectives under it run on every rank that takes it. A device index
    known from its assignment (`gpu = int(os.environ['LOCAL_RANK'])`) still reads `if gpu:` as `gpu != 0`."""
    src = """
    class C:
        gpu = True
    cfg = C()
    dist.init_process_group("gloo")
    t = torch.ones(1)
    if cfg.gpu:
        dist.all_reduce(t)
    dist.destroy_process_group()
    """
    assert "collective-in-rank-branch" not in names(src)
    held = src.replace("t = torch.ones(1)", "gpu = int(os.environ['LOCAL_RANK'])\n    t = torch.ones(1)").replace(
        "if cfg.gpu:", "if gpu:")
    assert "collective-in-rank-branch" in names(held)


def test_unseeded_random_split_in_a_module(tmp_path):
    """A dataset module's `random_split(self, [n, m])` the script calls on every rank, nothing seeded anywhere:
    each rank its own split. A seed anywhere in the project (the script's torch.manual_seed) is left to it."""
    (tmp_path / "data.py").write_text(textwrap.dedent("""
    from torch.utils.data import Dataset, random_split
    class Data(Dataset):
        def __len__(self):
            return 10
        def split(self):
            return random_split(self, [8, 2])
    """))
    script = HEAD + "from data import Data\ndist.init_process_group('gloo')\ntrain, val = Data().split()\n" \
        "dist.destroy_process_group()\n"
    (tmp_path / "train.py").write_text(script)
    assert "unseeded-random-split" in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("train, val", "torch.manual_seed(0)\ntrain, val"))
    assert "unseeded-random-split" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


# ------------------------------------------------------------------------------------------- epochs

def test_sampler_of_a_loader_factory_never_given_its_epoch(tmp_path):
    """The DistributedSampler is built in an imported module's loader factory, the script's `while epoch <= n`
    loop is the epoch loop, and nothing in the project calls set_epoch: reported at that loop."""
    (tmp_path / "data.py").write_text(textwrap.dedent("""
    import torch
    from torch.utils.data.distributed import DistributedSampler
    def get_loader(ds):
        return torch.utils.data.DataLoader(ds, sampler=DistributedSampler(ds))
    """))
    script = HEAD + textwrap.dedent("""
    from data import get_loader
    dist.init_process_group('gloo')
    loader = get_loader(torch.utils.data.TensorDataset(torch.ones(4, 2)))
    epoch = 0
    while epoch <= 3:
        for batch in loader:
            pass
        epoch += 1
    dist.destroy_process_group()
    """)
    (tmp_path / "train.py").write_text(script)
    found = [(f.rule, f.line) for f in lint_file(tmp_path / "train.py").findings if f.rule == "sampler-no-set-epoch"]
    assert found == [("sampler-no-set-epoch", 9)]
    (tmp_path / "train.py").write_text(script.replace("    for batch",
                                                      "    loader.sampler.set_epoch(epoch)\n    for batch"))
    assert "sampler-no-set-epoch" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_accumulation_written_as_an_early_skip():
    """`loss.backward(); if i % k != 0: continue; optimizer.step()`: the step every k-th batch, the backward on
    all of them, no no_sync. A `% k` skip before the backward (a logging stride) is no accumulation."""
    src = """
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(10):
        loss = model(torch.ones(2)).sum()
        loss.backward()
        if i % 4 != 0:
            continue
        opt.step()
        opt.zero_grad()
    dist.destroy_process_group()
    """
    assert "grad-accum-no-sync" in names(src)
    twin = src.replace("        loss.backward()\n", "").replace("            continue\n",
                                                                  "            continue\n        loss.backward()\n")
    assert "grad-accum-no-sync" not in names(twin)


def test_map_location_to_the_global_rank():
    """`map_location = {'cuda:%d' % 0: 'cuda:%d' % rank}` with rank = dist.get_rank() while the model sits on
    rank % device_count(): the checkpoint goes to a GPU the second machine does not have."""
    src = """
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    map_location = {'cuda:%d' % 0: 'cuda:%d' % rank}
    state = torch.load("ckpt.pt", map_location=map_location)
    dist.destroy_process_group()
    """
    assert "global-rank-device-ids" in names(src)
    assert "global-rank-device-ids" not in names(src.replace("'cuda:%d' % rank}", "'cuda:%d' % device_id}"))


def test_nccl_when_cuda_and_the_current_devices_generator():
    """`backend = "nccl" if torch.cuda.is_available() else "gloo"` and no set_device: on a GPU machine NCCL, and
    `torch.cuda.get_rng_state()` reads the current device, GPU 0 on every rank. `torch.random.get_rng_state()` is
    the CPU generator."""
    src = """
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    state = torch.cuda.get_rng_state()
    dist.destroy_process_group()
    """
    assert "no-set-device" in names(src)
    assert "no-set-device" not in names(src.replace("torch.cuda.get_rng_state", "torch.random.get_rng_state"))
