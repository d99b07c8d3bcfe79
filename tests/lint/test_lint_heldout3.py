"""Issue 28's third held-out set: each false alarm or miss fixed as a mechanism, with a minimal script that shows
it and its twin that must behave the other way."""

from __future__ import annotations

import textwrap
from pathlib import Path

from ddplab.lint import lint_file, lint_source

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def names(source: str, show_all: bool = False) -> list[str]:
    """The rule of each finding; the source is dedented and put after HEAD."""
    return sorted(f.rule for f in lint_source(HEAD + textwrap.dedent(source), show_all=show_all).findings)


# ------------------------------------------------------------------------------------------- collectives

def test_rank0_goes_first_barrier_pair_is_quiet():
    """`if rank != 0: barrier()` ... `if rank == 0: barrier()`: every rank reaches one barrier (rank 0 downloads
    first); the same without the second half hangs rank 0's peers."""
    pair = """
    def load(path):
        if dist.get_rank() != 0:
            dist.barrier()
        data = open(path).read()
        if dist.get_rank() == 0:
            dist.barrier()
        return data
    load("x")
    dist.destroy_process_group()
    """
    assert "collective-in-rank-branch" not in names(pair)
    alone = pair.replace("        if dist.get_rank() == 0:\n            dist.barrier()\n", "")
    assert "collective-in-rank-branch" in names(alone)


# ------------------------------------------------------------------------------------------- shared writes

def test_temp_file_named_by_uuid_is_per_process():
    """A path with uuid4() (or the process id, mkstemp) in it is each process's own: writing it, then os.replace
    onto the shared name, is the atomic-cache idiom; the same write to a fixed name is a race."""
    own = """
    import uuid
    dist.init_process_group("gloo")
    def cache(data, folder):
        tmp = os.path.join(folder, "tmp_" + uuid.uuid4().hex + "_blob")
        with open(tmp, "w") as f:
            f.write(data)
        os.replace(tmp, os.path.join(folder, "blob"))
    cache("x", "/tmp")
    dist.destroy_process_group()
    """
    assert "shared-path-write" not in names(own, show_all=True)
    fixed = own.replace('"tmp_" + uuid.uuid4().hex + "_blob"', '"tmp_blob"')
    assert "shared-path-write" in names(fixed)


# ------------------------------------------------------------------------------------------- its own launcher

def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder / next(iter(files))


def found(path: Path) -> set[tuple[str, str]]:
    return {(Path(f.path).name if f.path else path.name, f.rule) for f in lint_file(path).findings}


MP_MAIN = """
import os
import torch.multiprocessing as mp
from dist_utils import init_distributed

def worker(rank, world_size):
    os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    init_distributed(rank, world_size)
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)

if __name__ == "__main__":
    for rank in range(2):
        mp.Process(target=worker, args=(rank, 2)).start()
"""
MP_UTILS = """
import os
import torch.distributed as dist

def init_distributed(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "40112"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dist.destroy_process_group()
"""


def test_rendezvous_set_in_a_module_of_a_script_that_starts_its_workers(tmp_path):
    """The script starts its own workers (multiprocessing.Process): the MASTER_ADDR its setup module writes is its
    own rendezvous; the same module under a script run by torchrun overrides the launcher's."""
    (tmp_path / "own").mkdir()
    own = write(tmp_path / "own", {"main.py": "import torch\n" + MP_MAIN, "dist_utils.py": MP_UTILS})
    assert ("dist_utils.py", "sets-master-env") not in found(own)
    torchrun = MP_MAIN.split("if __name__")[0] + "worker(int(os.environ['RANK']), int(os.environ['WORLD_SIZE']))\n"
    (tmp_path / "run").mkdir()
    launched = write(tmp_path / "run", {"main.py": "import torch\n" + torchrun, "dist_utils.py": MP_UTILS})
    assert ("dist_utils.py", "sets-master-env") in found(launched)


def test_cuda0_when_each_process_sees_one_gpu():
    """CUDA_VISIBLE_DEVICES chosen from the rank: every process sees only its own GPU, and that GPU is cuda:0;
    with CUDA_VISIBLE_DEVICES fixed for all, cuda:0 is one GPU for every rank."""
    own = """
    def worker(rank):
        os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        model = torch.nn.Linear(2, 2).to("cuda:0")
        dist.destroy_process_group()
    worker(int(os.environ["LOCAL_RANK"]))
    """
    assert "hardcoded-cuda-device" not in names(own, show_all=True)
    assert "hardcoded-cuda-device" in names(own.replace("str(rank)", '"0,1"'))


# ------------------------------------------------------------------------------------------- prints, forwards

def test_print_of_a_device_that_names_the_rank_when_ddp_is_on():
    """`device = f"cuda:{local_rank}"` under DDP, "cuda" on the one-process path: printing it says which process
    speaks wherever there are several; a device that never names the rank does not."""
    labelled = """
    if int(os.environ.get("RANK", -1)) != -1:
        dist.init_process_group("nccl")
        local_rank = int(os.environ["LOCAL_RANK"])
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
    else:
        device = "cuda"
    print(f"using device: {device}")
    dist.destroy_process_group()
    """
    assert "unguarded-print" not in names(labelled, show_all=True)
    assert "unguarded-print" in names(labelled.replace('f"cuda:{local_rank}"', '"cuda"'))


def test_rank0_forward_before_the_ddp_wrap_is_the_bare_module():
    """A rank-0-only forward through `model` before `model = DDP(model)` is no broadcast; the same after the wrap
    hangs the others (docs/lint.md: rank0-ddp-forward)."""
    before = """
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    if dist.get_rank() == 0:
        model(torch.ones(4, 2))
    model = DDP(model)
    model(torch.ones(4, 2)).sum().backward()
    dist.destroy_process_group()
    """
    assert "rank0-ddp-forward" not in names(before, show_all=True)
    lines = before.splitlines()
    wrap = lines.index("    model = DDP(model)")
    after = "\n".join(lines[:wrap - 2] + [lines[wrap]] + lines[wrap - 2:wrap] + lines[wrap + 1:])
    assert "rank0-ddp-forward" in names(after)


# ------------------------------------------------------------------------------------------- metrics

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
    assert "unreduced-metric" in names(whole.replace('extra = {"num_workers": 1}',
                                                     'extra = {"sampler": DistributedSampler(test_set)}'))
    assert "unreduced-metric" in names(whole.replace("DataLoader(test_set, **test_kwargs)",
                                                     "DataLoader(test_set, sampler=DistributedSampler(test_set))"))


def test_save_path_held_in_a_dict_slot_made_from_the_rank():
    """`self.meta["path"] = join("Log", f"rank{rank}")`, then `torch.save(..., join(self.meta["path"], f))`: each
    rank its own file; the same slot holding a fixed folder is one file for all."""
    own = """
    class Log:
        def __init__(self):
            self.rank = dist.get_rank()
            self.meta = {}
        def add_dir(self):
            path = os.path.join("Log", f"rank{self.rank}")
            self.meta["path"] = path
        def save(self, model):
            model_path = os.path.join(self.meta["path"], "model.pth")
            torch.save(model.state_dict(), model_path)
    dist.init_process_group("gloo")
    log = Log()
    log.add_dir()
    log.save(torch.nn.Linear(2, 2))
    dist.destroy_process_group()
    """
    assert "unguarded-save" not in names(own, show_all=True)
    assert "unguarded-save" in names(own.replace('f"rank{self.rank}"', '"all"'))


def test_print_into_a_redirected_stdout_is_a_file_write():
    """`sys.stdout = f` then print: the lines go to that file, not the console (no per-rank console noise)."""
    redirected = """
    import sys
    dist.init_process_group("gloo")
    def dump(args):
        with open(f"params_{dist.get_rank()}.txt", "w") as f:
            sys.stdout = f
            print("lr", args)
        sys.stdout = sys.__stdout__
    dump(0.1)
    dist.destroy_process_group()
    """
    assert "unguarded-print" not in names(redirected, show_all=True)
    assert "unguarded-print" in names(redirected.replace("            sys.stdout = f\n", ""))


def test_path_stamped_with_the_clock_is_possible():
    """A folder named by the clock time: ranks started in the same second share it, ranks started apart do not;
    lint cannot see which, so the write is possible (--all); a fixed name stays sure."""
    stamped = """
    import datetime
    dist.init_process_group("gloo")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    folder = os.path.join("Log", stamp)
    os.makedirs(folder)
    dist.destroy_process_group()
    """
    assert "shared-path-write" not in names(stamped)
    assert "shared-path-write" in names(stamped, show_all=True)
    assert "shared-path-write" in names(stamped.replace('os.path.join("Log", stamp)', '"Log"'))


# ------------------------------------------------------------------------------------------- setup the script runs

SETUPS = """
import torch
import torch.distributed as dist

def init_env():
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")

def init_mpi():
    dist.init_process_group(backend="nccl", init_method="env://")

def init_on_cluster():  # names init_mpi; nothing calls it
    init_mpi()
"""


def test_setup_function_no_call_reaches_is_possible(tmp_path):
    """A module with one setup per launcher: the nccl literal in the one the script never reaches is possible
    (--all); called from the script, it is sure."""
    script = "import dist_utils\ndist_utils.init_env()\ndist_utils.dist.destroy_process_group()\n"
    entry = write(tmp_path, {"train.py": script, "dist_utils.py": SETUPS})
    assert ("dist_utils.py", "nccl-hardcoded") not in found(entry)
    assert any(f.rule == "nccl-hardcoded" for f in lint_file(entry, show_all=True).findings)
    (tmp_path / "train.py").write_text(script.replace("init_env()", "init_mpi()"))
    assert ("dist_utils.py", "nccl-hardcoded") in found(entry)


def test_nccl_in_a_module_after_the_callers_cuda_check(tmp_path):
    """The script raises without CUDA before calling the module's setup: its nccl literal has a CUDA check (in the
    caller); without that check it is reported."""
    utils = "import torch.distributed as dist\n\ndef setup():\n    dist.init_process_group(backend='nccl')\n"
    script = ("import torch\nfrom dist_utils import setup, dist\n\ndef main():\n"
              "    if torch.cuda.is_available() is False:\n        raise EnvironmentError('no GPU')\n"
              "    setup()\n    dist.destroy_process_group()\n\nmain()\n")
    entry = write(tmp_path, {"train.py": script, "dist_utils.py": utils})
    assert ("dist_utils.py", "nccl-hardcoded") not in found(entry)
    (tmp_path / "train.py").write_text(script.replace("    if torch.cuda.is_available() is False:\n"
                                                      "        raise EnvironmentError('no GPU')\n", ""))
    assert ("dist_utils.py", "nccl-hardcoded") in found(entry)


# ------------------------------------------------------------------------------------------- rank tests

def test_rank_tests_stored_from_a_helper_or_chosen_by_a_flag():
    """`with_tb = is_master()` (a helper returning `__rank == 0`, a module's private rank) then `if with_tb:`, and
    `if (is_master() if only_master else is_local_master()):` are rank-0 tests; a flag that is no rank test is not."""
    guarded = """
    from torch.utils.tensorboard import SummaryWriter
    __rank = 0
    def is_master():
        return __rank == 0
    def is_local_master():
        return int(os.environ["LOCAL_RANK"]) == 0
    dist.init_process_group("gloo")
    with_tb = is_master()
    if with_tb:
        writer = SummaryWriter("runs")
    only_master = True
    if (is_master() if only_master else is_local_master()):
        log = open("stdout.txt", "a")
    dist.destroy_process_group()
    """
    assert "shared-path-write" not in names(guarded, show_all=True)
    assert names(guarded.replace("with_tb = is_master()", "with_tb = bool(os.environ.get('TB'))")).count(
        "shared-path-write") == 1
    assert names(guarded.replace("(is_master() if only_master else is_local_master())",
                                 "(is_master() if only_master else True)")).count("shared-path-write") == 1


def test_load_of_a_per_rank_file_is_possible():
    """torch.load without map_location of `queue{rank}.pth` (saved by this rank from its own GPU) goes back to
    that GPU: possible; a file shared by every rank lands on the saver's GPU: sure."""
    own = """
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    queue_path = os.path.join("dump", "queue" + str(rank) + ".pth")
    if os.path.isfile(queue_path):
        queue = torch.load(queue_path)["queue"]
    dist.destroy_process_group()
    """
    assert "load-no-map-location" not in names(own)
    assert "load-no-map-location" in names(own, show_all=True)
    assert "load-no-map-location" in names(own.replace('"queue" + str(rank) + ".pth"', '"queue.pth"'))


def test_dist_is_available_is_no_cuda_check():
    """`if dist.is_available() and dist.is_initialized(): return` says nothing about GPUs: the nccl literal after it
    has no CUDA check; `torch.cuda.is_available()` there is one."""
    setup = """
    def init_distributed():
        if dist.is_available() and dist.is_initialized():
            return
        dist.init_process_group(backend="nccl")
    init_distributed()
    dist.destroy_process_group()
    """
    assert "nccl-hardcoded" in names(setup)
    assert "nccl-hardcoded" not in names(setup.replace("dist.is_available() and dist.is_initialized()",
                                                       "not torch.cuda.is_available()"), show_all=True)


def test_pprint_prints():
    """pprint (the module function or a PrettyPrinter's method) writes stdout on every rank like print; given a
    stream it writes that stream."""
    pretty = """
    import pprint
    dist.init_process_group("gloo")
    pp = pprint.PrettyPrinter(indent=4)
    pp.pprint({"lr": 0.1})
    dist.destroy_process_group()
    """
    assert "unguarded-print" in names(pretty)
    assert "unguarded-print" not in names(pretty.replace('pp.pprint({"lr": 0.1})',
                                                         'pp.pprint({"lr": 0.1}, stream=open("p.txt", "w"))'),
                                          show_all=True)


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
    reduced = shard.replace("            avg = total / len(self.train_data)\n",
                            "            t = torch.tensor([total])\n            dist.all_reduce(t)\n"
                            "            avg = t.item() / len(self.train_data)\n")
    assert "unreduced-metric" not in names(reduced, show_all=True)
