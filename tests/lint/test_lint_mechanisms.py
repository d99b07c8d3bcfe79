"""Issue 28's second held-out set: each miss or false alarm fixed as a mechanism, with a minimal script that shows
it and its twin that must stay quiet (the backend as any expression that is "nccl", third-party DDP wrappers judged
by their own signature, the device set on this path, print filters installed on some launcher paths only, callers
in other files, and the rest)."""

from __future__ import annotations

import textwrap

from ddplab.lint import lint_source
from test_lint_project import found, write  # one copy of the project-folder helpers

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"


def rules(source: str, show_all: bool = False) -> list[tuple[int, str]]:
    """(line, rule) of each finding; the source after HEAD is dedented (HEAD + an indented block)."""
    head = HEAD if source.startswith(HEAD) else ""
    source = head + textwrap.dedent(source[len(head):])
    return sorted((f.line, f.rule) for f in lint_source(source, show_all=show_all).findings)


def names(source: str, show_all: bool = False) -> list[str]:
    return sorted(r for _, r in rules(source, show_all))


# ------------------------------------------------------------------------------------------- the backend


def test_the_backend_is_any_expression_that_is_nccl():
    for backend, setup in [("dist.Backend.NCCL", ""), ("Backend.NCCL", "from torch.distributed import Backend\n"),
                           ('dist.Backend("nccl")', ""), ("BACKEND", 'BACKEND = "nccl"\n')]:
        source = HEAD + setup + f"dist.init_process_group(backend={backend})\ndist.destroy_process_group()\n"
        assert "nccl-hardcoded" in names(source), backend
    # the user's choice (a module name the script rewrites through exec, an option) is not hard-coded
    assert "nccl-hardcoded" not in names(HEAD + 'backend = "nccl"\nexec(open("config.py").read())\n'
                                         "dist.init_process_group(backend=backend)\ndist.destroy_process_group()\n")
    assert "nccl-hardcoded" not in names(HEAD + "dist.init_process_group(backend=dist.Backend.GLOO)\n"
                                         "dist.destroy_process_group()\n")


# ------------------------------------------------------------------------------------------- DDP's device


def test_ddp_without_device_ids_only_where_the_model_is_on_the_default_gpu():
    on_default = HEAD + """\
        dist.init_process_group("gloo")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).to(device))
        dist.destroy_process_group()
    """
    assert rules(on_default) == [(5, "no-set-device"), (6, "ddp-no-device-ids")]
    device_set = HEAD + """\
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
        dist.destroy_process_group()
    """
    assert rules(device_set) == []  # a single-device module on this process's GPU needs no device_ids
    one_path = HEAD + """\
        dist.init_process_group("gloo")
        if os.environ.get("GPU"):
            torch.cuda.set_device(int(os.environ["GPU"]))
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[0])
        else:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
        dist.destroy_process_group()
    """
    assert (9, "ddp-no-device-ids") in rules(one_path)


def test_a_third_party_ddp_wrapper_is_judged_by_its_own_signature():
    apex = HEAD + """\
        from apex.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(2, 2).cuda())
        dist.destroy_process_group()
    """
    assert "ddp-no-device-ids" not in names(apex)  # apex's DDP has no device_ids
    torch_ddp = apex.replace("from apex.parallel import", "from torch.nn.parallel import")
    assert "ddp-no-device-ids" in names(torch_ddp)


# ------------------------------------------------------------------------------------------- names and their values


def test_a_sampler_set_on_the_distributed_path_is_not_none():
    source = HEAD + """\
        dist.init_process_group("gloo")
        data = list(range(8))
        sampler = None
        if dist.is_initialized():
            sampler = torch.utils.data.distributed.DistributedSampler(data)
        loader = torch.utils.data.DataLoader(data, shuffle=(sampler is None), sampler=sampler)
        for epoch in range(2):
            if sampler is not None:
                sampler.set_epoch(epoch)
        dist.destroy_process_group()
    """
    assert rules(source) == []
    never_set = source.replace("sampler = torch.utils.data.distributed.DistributedSampler(data)", "pass")
    assert (9, "loader-without-sampler") in rules(never_set)


def test_the_wrapper_is_a_local_of_the_function_that_built_it():
    source = HEAD + """\
        from torch.nn.parallel import DistributedDataParallel as DDP

        def train(model):
            model = DDP(model)
            return model.module

        dist.init_process_group("gloo")
        model = train(torch.nn.Linear(2, 2))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "model.pt")
        dist.destroy_process_group()
    """
    assert "save-ddp-state-dict" not in names(source)  # `model` here is what train() returned: the plain module
    wrapper_saved = source.replace("return model.module", "torch.save(model.state_dict(), 'm.pt')")
    assert (8, "save-ddp-state-dict") in rules(wrapper_saved)


# ------------------------------------------------------------------------------------------- callers in other files

TRAIN_MODULE = """\
    import torch
    from torchvision.datasets import MNIST

    def train(args):
        data = MNIST(root=args.data, download=True)
        print("training")
        model = torch.nn.Linear(2, 2)
        if args.local_rank == 0:
            torch.save(model.state_dict(), "best.pt")
"""


def test_an_imported_function_the_script_runs_on_every_rank_is_judged_sure(tmp_path):
    script = write(tmp_path, {"run.py": """\
        import os
        import torch.distributed as dist
        from utils.train import train

        def main(args):
            dist.init_process_group("gloo")
            train(args)
            dist.destroy_process_group()

        if __name__ == "__main__":
            main(None)
    """, "utils/__init__.py": "", "utils/train.py": TRAIN_MODULE})
    assert found(script) == {("train.py", 5, "shared-path-write"), ("train.py", 6, "unguarded-print"),
                             ("train.py", 9, "local-rank-save")}
    guarded = script.read_text().replace("    train(args)", "    if dist.get_rank() == 0:\n        train(args)")
    script.write_text(guarded)
    assert found(script) == set()  # only rank 0 calls it
    assert {(f, line, rule) for f, line, rule in found(script, show_all=True)} >= {("train.py", 5, "shared-path-write")}


def test_a_branch_no_caller_takes_is_not_run(tmp_path):
    script = write(tmp_path, {"train.py": """\
        import torch.distributed as dist
        from data import create_dataset
        dist.init_process_group("gloo")
        train = create_dataset("coco", {"root": "ann"})
        dist.destroy_process_group()
    """, "data/__init__.py": """\
        from data.datasets import Coco, Flickr

        def create_dataset(name, config):
            if name == "flickr":
                return Flickr(config["root"])
            elif name == "coco":
                return Coco(config["root"])
    """, "data/datasets.py": """\
        from torchvision.datasets.utils import download_url

        class Coco:
            def __init__(self, root):
                download_url("https://example.org/coco.json", root)

        class Flickr:
            def __init__(self, root):
                download_url("https://example.org/flickr.json", root)
    """})
    assert found(script) == {("datasets.py", 5, "shared-path-write")}


def test_a_path_the_caller_builds_is_the_callers_to_decide(tmp_path):
    script = write(tmp_path, {"train.py": """\
        import torch.distributed as dist
        from logs import Writer
        dist.init_process_group("gloo")
        suffix = "-rank%d" % dist.get_rank()
        name = "log" + suffix + ".txt"
        Writer(name).write("start")
        dist.destroy_process_group()
    """, "logs.py": """\
        class Writer:
            def __init__(self, path):
                self.path = path

            def write(self, text):
                with open(self.path, "a") as f:
                    f.write(text)
    """})
    assert found(script) == set()
    assert ("logs.py", 6, "shared-path-write") in found(script, show_all=True)
    script.write_text(script.read_text().replace("Writer(name)", 'Writer("log.txt")'))
    assert found(script) == {("logs.py", 6, "shared-path-write")}


def test_a_path_with_the_rank_formatted_in_is_per_rank():
    source = HEAD + """\
        dist.init_process_group("gloo")
        result_file = os.path.join("out", "%s_rank%d.json" % ("val", dist.get_rank()))
        with open(result_file, "w") as f:
            f.write("{}")
        with open("out/" + str(dist.get_rank()) + ".txt", "w") as f:
            f.write("")
        dist.destroy_process_group()
    """
    assert rules(source) == []
    assert rules(source.replace(', dist.get_rank()))', ', 0))')) == [(6, "shared-path-write")]


# ------------------------------------------------------------------------------------------- print filters


def test_a_print_filter_installed_on_the_spawn_path_only_leaves_torchrun_printing():
    source = HEAD + """\
        import builtins
        import torch.multiprocessing as mp

        def worker(gpu, args):
            if args.multiprocessing_distributed and gpu != 0:
                builtins.print = lambda *a, **k: None
            dist.init_process_group("gloo")
            print("training")
            dist.destroy_process_group()

        def main(args):
            if args.multiprocessing_distributed:
                mp.spawn(worker, nprocs=2, args=(args,))
            else:
                worker(int(os.environ.get("LOCAL_RANK", 0)), args)
    """
    assert rules(source) == [(11, "unguarded-print")]
    everywhere = source.replace("args.multiprocessing_distributed and gpu != 0", "gpu != 0")
    assert rules(everywhere) == []  # installed on every path: the filter holds


# ------------------------------------------------------------------------------------------- metrics


def test_a_sum_returned_by_a_helper_and_reported_once_per_node_is_unreduced(tmp_path):
    script = write(tmp_path, {"train.py": """\
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
    """, "loop.py": """\
        def run_epoch(loader):
            total, correct, n = 0.0, 0, 0
            for x in loader:
                total += float(x)
                correct += 1
                n += 1
            return total / n, correct / n
    """})
    assert found(script) == {(None, 11, "unreduced-metric")}
    reduced = (tmp_path / "loop.py").read_text().replace(
        "    return", "    correct = reduce_mean(correct)\n    return")
    (tmp_path / "loop.py").write_text(reduced)
    assert found(script) == set()


def test_a_save_helper_called_once_per_node_is_reported_at_that_call():
    source = HEAD + """\
        dist.init_process_group("gloo")
        rank, gpus = dist.get_rank(), 8

        def save_checkpoint(state, filename="checkpoint.pt"):
            torch.save(state, filename)

        if rank % gpus == 0:
            save_checkpoint({"epoch": 1})
        if os.environ.get("DONE"):
            save_checkpoint({"epoch": 2})
        dist.destroy_process_group()
    """
    assert rules(source) == [(8, "unguarded-save"), (11, "local-rank-save")]
    assert rules(source.replace("rank % gpus == 0", "rank == 0")) == [(8, "unguarded-save")]


def test_a_world_size_that_already_counts_the_gpus_per_node_scaled_by_them_again():
    source = HEAD + """\
        def main(args):
            args.world_size = args.ngpus_per_node * args.world_size
            dist.init_process_group("gloo", world_size=args.world_size)
            args.lr = args.lr * float(args.batch_size * args.ngpus_per_node * args.world_size) / 256.
            dist.destroy_process_group()
    """
    assert rules(source) == [(7, "world-size-scaled-twice")]
    once = source.replace(" * args.ngpus_per_node * args.world_size", " * args.world_size")
    assert rules(once) == []


def test_a_torchvision_network_with_batchnorm_evaluated_through_the_wrapper_on_rank_0():
    source = HEAD + """\
        import torchvision.models as models
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(models.resnet50())
        if dist.get_rank() == 0:
            with torch.no_grad():
                out = model(torch.zeros(1, 3, 224, 224))
        dist.destroy_process_group()
    """
    assert rules(source) == [(9, "rank0-ddp-forward")]
    assert rules(source.replace("resnet50", "vit_b_16")) == []  # LayerNorm only: no buffers to broadcast


def test_a_file_opened_for_torch_save_is_left_to_the_save_rules():
    source = HEAD + """\
        dist.init_process_group("gloo")

        def store(obj, path):
            with open(path, "wb") as f:
                torch.save(obj, f)

        if dist.get_rank() == 0:
            store({}, "model.pt")
        with open("notes.txt", "w") as notes:
            notes.write("")
        dist.destroy_process_group()
    """
    assert rules(source, show_all=True) == [(12, "shared-path-write")]  # the notes, not the checkpoint


def test_any_call_that_writes_a_path_on_every_rank():
    source = HEAD + """\
        from pathlib import Path
        import matplotlib.pyplot as plt
        from torchvision.datasets.utils import download_url
        from torchvision.utils import save_image
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        download_url("https://example.org/labels.json", "data")
        Path("run/config.json").write_text("{}")
        plt.savefig("loss.png")
        save_image(torch.zeros(3, 8, 8), "sample.png")
        save_image(torch.zeros(3, 8, 8), f"sample_{rank}.png")
        if rank == 0:
            plt.savefig("loss.png")
        dist.destroy_process_group()
    """
    assert rules(source) == [(10, "shared-path-write"), (11, "shared-path-write"), (12, "shared-path-write"),
                             (13, "shared-path-write")]
    # a name made from the process id (or the rank) with pathlib's / is a per-process path
    per_process = source.replace('Path("run/config.json").write_text("{}")',
                                 'probe = Path("run") / f"probe-{os.getpid()}"; probe.write_text("{}")')
    assert (11, "shared-path-write") not in rules(per_process) and len(rules(per_process)) == 3
