"""What data each rank reads: loader-without-sampler, shuffle-with-sampler, sampler-no-set-epoch,
unseeded-random-data, unseeded-random-split.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

from lintcase import END, HEAD, line_rules, lint_file, names, pair
from lintcase import PG_OPEN as PG
from lintcase import rules_after as rules

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


def test_a_shuffled_loader_beside_a_distributed_sampler():
    data = "from torch.utils.data import DataLoader, DistributedSampler, Subset\nds = list(range(8))\n"
    bad, good = pair(
        """
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, batch_size=2, shuffle=True)
        """,
        """
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, batch_size=2, sampler=sampler)
        mine = Subset(ds, range(dist.get_rank(), 8, dist.get_world_size()))
        own = DataLoader(mine, batch_size=2, shuffle=True)
        if dist.get_rank() == 0:
            whole = DataLoader(ds, batch_size=2, shuffle=True)
        """,
        PG
        + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n"
        + data,
    )
    assert bad == ["loader-without-sampler"] and good == []


def test_random_split_needs_the_same_generator_on_every_rank():
    split = "from torch.utils.data import random_split\nparts = random_split(list(range(10)), [8, 2]{})\n"
    assert rules(PG, split.format("") + END) == ["unseeded-random-split"]
    assert rules(PG, split.format(", generator=torch.Generator().manual_seed(0)") + END) == []
    assert rules(PG + "torch.manual_seed(0)\n", split.format("") + END) == []


def test_loader_rule_skips_evaluation_loaders_and_sees_a_sampler_that_is_none():
    setup = (
        PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n"
        "from torch.utils.data import DataLoader, DistributedSampler\nds = list(range(8))\n"
    )
    bad, good = pair(
        """
        def build(distributed):
            if distributed:
                sampler = DistributedSampler(ds)
            else:
                sampler = None
            sampler = None
            return DataLoader(ds, shuffle=(sampler is None), sampler=sampler)
        """,
        """
        def build(distributed):
            if distributed:
                sampler = DistributedSampler(ds)
            else:
                sampler = None
            train_loader = DataLoader(ds, shuffle=(sampler is None), sampler=sampler)
            val_loader = DataLoader(ds, batch_size=2, shuffle=True)
            return train_loader, val_loader
        """,
        setup,
    )
    assert bad == ["loader-without-sampler"] and good == []


def test_random_draws_inside_the_loop_are_noise_not_the_dataset():
    setup = PG + "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(torch.nn.Linear(1, 1))\n"
    bad, good = pair(
        """
        x = torch.randn(16, 1)
        for step in range(4):
            model(x).sum().backward()
        """,
        """
        torch.manual_seed(0)
        x = torch.randn(16, 1)
        for step in range(4):
            noise = torch.randn(16, 1) * 0.01
            model(x + noise).sum().backward()
        """,
        setup,
    )
    assert bad == ["unseeded-random-data"] and good == []


def test_a_sampler_handed_to_what_runs_the_epochs_sets_its_epoch_there():
    """`Checkpointer(..., sampler=sampler)` then `for epoch in ckpt.epochs(n)` (ddplab.resume, what `ddplab new`
    writes): the epoch is set where the sampler went, out of the rule's sight; kept only by the loader, it is not."""
    setup = (
        PG + "from torch.utils.data import DataLoader, DistributedSampler\nds = list(range(8))\n"
        "model = torch.nn.Linear(1, 1)\n"
    )
    bad, good = pair(
        """
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch in range(3):
            for x in loader:
                model(x).sum().backward()
        """,
        """
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        ckpt = Checkpointer("ckpt", model=model, sampler=sampler)
        for epoch in ckpt.epochs(3):
            for x in ckpt.batches(loader):
                model(x).sum().backward()
        """,
        setup,
    )
    assert bad == ["sampler-no-set-epoch"] and good == []


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_a_sampler_set_on_the_distributed_path_is_not_none():
    source = (
        HEAD
        + """\
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
    )
    assert line_rules(source) == []
    never_set = source.replace("sampler = torch.utils.data.distributed.DistributedSampler(data)", "pass")
    assert (9, "loader-without-sampler") in line_rules(never_set)


# ------------------------------------------------------------------ issue 28, sixth pass (was test_lint_mechanisms6.py)


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


def test_unseeded_random_split_in_a_module(tmp_path):
    """A dataset module's `random_split(self, [n, m])` the script calls on every rank, nothing seeded anywhere:
    each rank its own split. A seed anywhere in the project (the script's torch.manual_seed) is left to it."""
    (tmp_path / "data.py").write_text(
        textwrap.dedent("""
    from torch.utils.data import Dataset, random_split
    class Data(Dataset):
        def __len__(self):
            return 10
        def split(self):
            return random_split(self, [8, 2])
    """)
    )
    script = (
        HEAD + "from data import Data\ndist.init_process_group('gloo')\ntrain, val = Data().split()\n"
        "dist.destroy_process_group()\n"
    )
    (tmp_path / "train.py").write_text(script)
    assert "unseeded-random-split" in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("train, val", "torch.manual_seed(0)\ntrain, val"))
    assert "unseeded-random-split" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_sampler_of_a_loader_factory_never_given_its_epoch(tmp_path):
    """The DistributedSampler is built in an imported module's loader factory, the script's `while epoch <= n`
    loop is the epoch loop, and nothing in the project calls set_epoch: reported at that loop."""
    (tmp_path / "data.py").write_text(
        textwrap.dedent("""
    import torch
    from torch.utils.data.distributed import DistributedSampler
    def get_loader(ds):
        return torch.utils.data.DataLoader(ds, sampler=DistributedSampler(ds))
    """)
    )
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
    (tmp_path / "train.py").write_text(
        script.replace("    for batch", "    loader.sampler.set_epoch(epoch)\n    for batch")
    )
    assert "sampler-no-set-epoch" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


LOADER_MODULE = """
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
def prepare_data(n=64):
    ds = TensorDataset(torch.randn(n, 4))
    return DataLoader(ds, batch_size=8, shuffle=True)
"""
LOADER_SCRIPT = HEAD + textwrap.dedent("""
    from data_utils import prepare_data
    dist.init_process_group("gloo")
    loader = prepare_data()
    for (x,) in loader:
        pass
    dist.destroy_process_group()
    """)


def loader_findings(folder, module: str) -> list[tuple[str, int]]:
    (folder / "data_utils.py").write_text(textwrap.dedent(module))
    (folder / "train.py").write_text(LOADER_SCRIPT)
    return [
        (f.path.rsplit("/", 1)[-1] if f.path else "train.py", f.line)
        for f in lint_file(folder / "train.py").findings
        if f.rule == "loader-without-sampler"
    ]


def test_a_shuffled_loader_an_imported_helper_builds_for_every_rank(tmp_path):
    """Round 14 (cloud-phase-prediction): the loader a module's function returns, which the script calls on every
    rank, is judged where it is built."""
    assert loader_findings(tmp_path, LOADER_MODULE) == [("data_utils.py", 6)]


def test_a_helpers_one_process_branch_and_its_no_grad_loaders_are_no_finding(tmp_path):
    """The helper's `else:` of its distributed switch (a parameter: `distributed`, or `dist` where torch.distributed
    is not imported as dist) is the one-process path; a loader built under `torch.no_grad()` takes no training
    step; a dataset that is this rank's shard (mpi4py's Get_rank, as guided-diffusion's load_data) is split."""
    for module in (
        LOADER_MODULE.replace("def prepare_data(n=64):", "def prepare_data(n=64, dist=False):").replace(
            "    return DataLoader(ds, batch_size=8, shuffle=True)",
            "    if dist:\n        return DataLoader(ds, sampler=DistributedSampler(ds))\n    else:\n"
            "        return DataLoader(ds, batch_size=8, shuffle=True)",
        ),
        LOADER_MODULE.replace("def prepare_data(n=64):", "@torch.no_grad()\ndef prepare_data(n=64):"),
        LOADER_MODULE.replace(
            "    ds = TensorDataset(torch.randn(n, 4))", "    ds = MyShard(shard=MPI.COMM_WORLD.Get_rank())"
        ).replace("import torch\n", "import torch\nfrom mpi4py import MPI\nfrom shards import MyShard\n"),
    ):
        assert loader_findings(tmp_path, module) == [], module
