"""What a checkpoint holds and where it loads: save-ddp-state-dict, load-no-map-location.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

from lintcase import HEAD, SETUP, line_names, lint_source, names, pair
from lintcase import PG_OPEN as PG
from lintcase import line_rules as rules

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


def test_a_wrapper_checkpoint_loaded_back_into_the_wrapper():
    bad, good = pair(
        """
        model = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
        """,
        """
        model = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
        dist.barrier()
        model.load_state_dict(torch.load("m.pt", map_location="cpu"))
        """,
        PG + "from torch.nn.parallel import DistributedDataParallel as DDP\n",
    )
    assert bad == ["save-ddp-state-dict"] and good == []


def test_a_load_into_the_plain_model_before_it_is_wrapped_is_no_load_into_the_wrapper():
    """Issue 39 round 13: `model.load_state_dict(...)` then `model = DDP(model)` loads a plain checkpoint into the
    plain model; the wrapper's own saves later carry 'module.' keys that this load would not take."""
    bad, good = pair(
        """
        model = torch.nn.Linear(1, 1)
        model.load_state_dict(torch.load("init.pt", map_location="cpu"))
        model = DDP(model)
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
        """,
        """
        model = torch.nn.Linear(1, 1)
        model = DDP(model)
        model.load_state_dict(torch.load("m.pt", map_location="cpu"))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
        """,
        PG + "from torch.nn.parallel import DistributedDataParallel as DDP\n",
    )
    assert bad == ["save-ddp-state-dict"] and good == []


def test_the_except_after_a_try_on_the_wrappers_module_is_the_plain_models_path():
    """`try: sd = net.module.state_dict()` / `except: sd = net.state_dict()` (lint_heldout5's less_train): the
    fallback runs for a model with no .module, never for the DDP wrapper."""
    bad, good = pair(
        """
        net = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            torch.save(net.state_dict(), "m.pt")
        """,
        """
        net = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            try:
                sd = net.module.state_dict()
            except AttributeError:
                sd = net.state_dict()
            torch.save(sd, "m.pt")
        """,
        PG + "from torch.nn.parallel import DistributedDataParallel as DDP\n",
    )
    assert bad == ["save-ddp-state-dict"] and good == []


def test_a_state_dict_whose_module_prefix_is_taken_off_is_no_wrappers_file():
    """Issue 39 round 13 (retinaface): `translate_state_dict(model.state_dict())`, a helper of the script that
    strips 'module.', and the same done in place by a comprehension, save plain keys."""
    helper = """
        def translate_state_dict(state_dict):
            return {(k[7:] if k.startswith("module.") else k): v for k, v in state_dict.items()}
        """
    bad, good = pair(
        helper
        + """
        model = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            torch.save(model.state_dict(), "m.pt")
        """,
        helper
        + """
        model = DDP(torch.nn.Linear(1, 1))
        if dist.get_rank() == 0:
            torch.save(translate_state_dict(model.state_dict()), "m.pt")
            torch.save({k.replace("module.", ""): v for k, v in model.state_dict().items()}, "n.pt")
        """,
        PG + "from torch.nn.parallel import DistributedDataParallel as DDP\n",
    )
    assert bad == ["save-ddp-state-dict"] and good == []


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_the_wrapper_is_a_local_of_the_function_that_built_it():
    source = (
        HEAD
        + """\
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
    )
    assert "save-ddp-state-dict" not in line_names(source)  # `model` here is what train() returned: the plain module
    wrapper_saved = source.replace("return model.module", "torch.save(model.state_dict(), 'm.pt')")
    assert (8, "save-ddp-state-dict") in rules(wrapper_saved)


# ------------------------------------------------------------- issue 28, third held-out set (was test_lint_heldout3.py)


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


# ------------------------------------------------------------------ issue 28, fifth pass (was test_lint_mechanisms5.py)


def test_load_on_rank0_only_lands_on_its_own_gpu():
    """torch.load without map_location under a rank-0 test: the one process that loads is the saving one."""
    src = (
        SETUP + "model = torch.nn.Linear(2, 2)\nif rank == 0:\n    model.load_state_dict(torch.load('m.pt'))\n"
        "dist.destroy_process_group()\n"
    )
    assert "load-no-map-location" not in names(src)
    assert "load-no-map-location" in names(src.replace("if rank == 0:", "if True:"))


def test_data_tensor_read_is_not_a_checkpoint_load():
    """`freq = torch.load(f)` used as a tensor (.size(), .numpy()) is data, usually written from the CPU: behind
    --all; loaded into a model it is a checkpoint."""
    src = SETUP + "freq = torch.load('freq.pt')\nassert freq.size(0) == 10\ndist.destroy_process_group()\n"
    assert "load-no-map-location" not in names(src)
    assert "load-no-map-location" in names(
        src.replace("assert freq.size(0) == 10", "torch.nn.Linear(2, 2).load_state_dict(freq['model'])")
    )


def test_a_data_sets_own_load_is_data_not_a_checkpoint():
    """Issue 39 round 13: a Dataset's __init__ loading its tokenized samples (`data = torch.load(path)`, then
    `data["x"]`) was read as a checkpoint; a data set's method loads samples: behind --all. The same load in a plain
    class (no __getitem__) is read as before."""
    src = SETUP + textwrap.dedent(
        """
        class TokenDataset(torch.utils.data.Dataset):
            def __init__(self, path):
                data = torch.load(path)
                self.x = data["x"]

            def __getitem__(self, i):
                return self.x[i]

        ds = TokenDataset("train.pt")
        dist.destroy_process_group()
        """
    )
    assert "load-no-map-location" not in names(src)
    assert "load-no-map-location" in names(src, show_all=True)
    assert "load-no-map-location" in names(src.replace("def __getitem__(self, i)", "def sample(self, i)"))


def test_state_dict_on_the_plain_branch_of_a_wrapper_test_is_not_the_wrappers():
    """`net.module.state_dict() if hasattr(net, "module") else net.state_dict()`: the else is a plain model."""
    src = (
        SETUP + "from torch.nn.parallel import DistributedDataParallel as DDP\nnet = DDP(torch.nn.Linear(2, 2))\n"
        "state = net.module.state_dict() if hasattr(net, 'module') else net.state_dict()\n"
        "if dist.get_rank() == 0:\n    torch.save(state, 'm.pt')\ndist.destroy_process_group()\n"
    )
    assert "save-ddp-state-dict" not in names(src)
    assert "save-ddp-state-dict" in names(
        src.replace("if hasattr(net, 'module') else net.state_dict()", "if False else net.state_dict()")
    )


def test_module_load_called_only_on_rank0_is_not_sure(tmp_path):
    """A module's torch.load without map_location is judged with its callers, as a save is: called only under a
    rank-0 test, one process loads (onto its own GPU)."""
    from lintcase import lint_file

    (tmp_path / "helpers.py").write_text("import torch\ndef load(p):\n    return torch.load(p)\n")
    script = (
        HEAD + "import helpers\n" + SETUP + "if rank == 0:\n    state = helpers.load('m.pt')\n"
        "dist.destroy_process_group()\n"
    )
    (tmp_path / "train.py").write_text(script)
    assert "load-no-map-location" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("if rank == 0:\n    state", "if True:\n    state"))
    assert "load-no-map-location" in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_load_in_a_branch_no_caller_turns_on_never_runs():
    """`def __init__(self, n, re_train=False): if re_train: torch.load(...)` built as `Net(2)`: never loads."""
    src = (
        "class Net(torch.nn.Module):\n    def __init__(self, n, re_train=False):\n        super().__init__()\n"
        "        if re_train:\n            self.load_state_dict(torch.load('pre.pt'))\n\n"
        + SETUP
        + "net = Net(2)\ndist.destroy_process_group()\n"
    )
    assert "load-no-map-location" not in names(src)
    assert "load-no-map-location" in names(src.replace("net = Net(2)", "net = Net(2, re_train=True)"))


def test_a_script_with_no_process_group_loads_in_one_process():
    """ResNeSt's verify.py: nn.DataParallel and `torch.load(args.verify)` with no map_location: one process, no rank
    to land on another's GPU. The same load in a script that makes a process group is flagged."""
    source = textwrap.dedent("""\
        import torch
        import torch.nn as nn

        model = nn.DataParallel(nn.Linear(2, 2).cuda())
        model.module.load_state_dict(torch.load("model.pth"))
    """)
    assert [f.rule for f in lint_source(source).findings] == []
    ddp = source.replace(
        "model = nn.DataParallel(nn.Linear(2, 2).cuda())",
        "import torch.distributed as dist\n"
        "dist.init_process_group('nccl' if torch.cuda.is_available() else 'gloo')\n"
        "model = nn.DataParallel(nn.Linear(2, 2).cuda())",
    )
    assert "load-no-map-location" in [f.rule for f in lint_source(ddp, show_all=True).findings]


def test_a_save_helper_s_data_parallel_branch_does_not_run_in_a_ddp_project():
    """`if isinstance(model, nn.DataParallel): torch.save(model.module...) else: torch.save(model...)`: a DDP wrapper
    is no DataParallel, so in a project that builds none only the else saves (one finding, there); where the project
    builds a DataParallel too, both branches run."""
    src = HEAD + textwrap.dedent(
        """\
        from torch.nn.parallel import DistributedDataParallel as DDP
        def save_model(model, out):
            if isinstance(model, torch.nn.DataParallel):
                torch.save(model.module.state_dict(), out)
            else:
                torch.save(model.state_dict(), out)
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(2, 2))
        save_model(model.module, "m.pt")
        dist.destroy_process_group()
        """
    )
    saves = [line for line, rule in rules(src) if rule == "unguarded-save"]
    assert saves == [9]
    both = src.replace(
        'save_model(model.module, "m.pt")',
        'save_model(model.module, "m.pt")\nsave_model(torch.nn.DataParallel(torch.nn.Linear(2, 2)), "n.pt")',
    )
    assert [line for line, rule in rules(both) if rule == "unguarded-save"] == [7, 9]
