"""Issue 28, fifth pass (tuning set 5 and held-out set 4): each false alarm or miss fixed as a mechanism, with a
minimal script that shows it and its twin that must behave the other way."""

from __future__ import annotations

import textwrap

from ddplab.lint import lint_source

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"
SETUP = """
dist.init_process_group("gloo")
rank = int(os.environ["LOCAL_RANK"])
"""


def names(source: str) -> list[str]:
    """The rule of each finding; the source is dedented and put after HEAD."""
    return sorted(f.rule for f in lint_source(HEAD + textwrap.dedent(source)).findings)


# ------------------------------------------------------------------------------------------- guards in any form

def test_no_rank_or_rank0_flag_is_a_rank0_guard():
    """`main = rank is None or rank == 0`: rank 0, or the one process no launcher started."""
    src = SETUP + "main = rank is None or rank == 0\nif main:\n    print('hello')\ndist.destroy_process_group()\n"
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace("rank is None or rank == 0", "rank is None or rank > 0"))


def test_no_rank_test_is_one_process():
    """`if opt.local_rank is None:` (or `== -1`) is the path without a launcher: one process."""
    src = SETUP + "if rank is None:\n    print('single')\ndist.destroy_process_group()\n"
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" not in names(src.replace("rank is None", "rank == -1"))
    assert "unguarded-print" in names(src.replace("rank is None", "rank is not None"))


def test_object_made_only_on_rank0_guards_its_uses():
    """`run = wandb.init() if rank == 0 else None` and later `if run:`: the test under another name."""
    src = SETUP + "import wandb\nrun = wandb.init() if rank == 0 else None\nif run:\n    print('logging')\n" \
        "if run is not None:\n    print('again')\ndist.destroy_process_group()\n"
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace("if rank == 0 else None", "if rank >= 0 else 1"))


def test_rank_compared_with_a_module_constant_is_one_rank():
    """`local_rank == OFFSET + 1` with `OFFSET = 1` at module level: one process per node, like rank 0."""
    src = "OFFSET = 1\n" + SETUP + "if rank == OFFSET + 1:\n    print('one voice')\ndist.destroy_process_group()\n"
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace("OFFSET = 1\n", "OFFSET = int(os.environ['X'])\n"))


# ------------------------------------------------------------------------------------------- what a save is

def test_numpy_text_file_is_not_a_checkpoint_save():
    """np.savetxt under a local-rank test writes a data file (the shared-write rule's business), not a checkpoint."""
    src = "import numpy as np\n" + SETUP + "model = torch.nn.Linear(2, 2)\nif rank == 0:\n" \
        "    np.savetxt('iter.txt', [1, 2])\ndist.destroy_process_group()\n"
    assert "local-rank-save" not in names(src)
    assert "local-rank-save" in names(src.replace("np.savetxt('iter.txt', [1, 2])",
                                                  "torch.save(model.state_dict(), 'm.pt')"))


def test_else_of_a_group_flag_is_one_process():
    """`args.distributed = False; return` before the group, `= True` where it is made: `else:` of `if
    args.distributed:` runs without a group."""
    src = """
    import argparse
    def init(args):
        if "RANK" not in os.environ:
            args.distributed = False
            return
        args.distributed = True
        dist.init_process_group("gloo")
    args = argparse.Namespace()
    init(args)
    if args.distributed:
        if dist.get_rank() == 0:
            print("distributed")
        dist.destroy_process_group()
    else:
        print("single")
    """
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace("args.distributed = False", "args.distributed = args.flag"))


def test_option_value_other_than_the_one_that_makes_the_group_is_one_process():
    """`if args.dist == "OFF":` beside `if args.dist == "ON": init_process_group()`: the OFF path is one process."""
    src = """
    import argparse
    args = argparse.Namespace(dist="ON")
    if args.dist == "OFF":
        print("single")
    if args.dist == "ON":
        dist.init_process_group("gloo")
        dist.destroy_process_group()
    """
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace('if args.dist == "OFF"', 'if args.dist == "ON"'))


# ------------------------------------------------------------------------------------------- what a load is

def test_load_on_rank0_only_lands_on_its_own_gpu():
    """torch.load without map_location under a rank-0 test: the one process that loads is the saving one."""
    src = SETUP + "model = torch.nn.Linear(2, 2)\nif rank == 0:\n    model.load_state_dict(torch.load('m.pt'))\n" \
        "dist.destroy_process_group()\n"
    assert "load-no-map-location" not in names(src)
    assert "load-no-map-location" in names(src.replace("if rank == 0:", "if True:"))


def test_data_tensor_read_is_not_a_checkpoint_load():
    """`freq = torch.load(f)` used as a tensor (.size(), .numpy()) is data, usually written from the CPU: behind
    --all; loaded into a model it is a checkpoint."""
    src = SETUP + "freq = torch.load('freq.pt')\nassert freq.size(0) == 10\ndist.destroy_process_group()\n"
    assert "load-no-map-location" not in names(src)
    assert "load-no-map-location" in names(src.replace("assert freq.size(0) == 10",
                                                       "torch.nn.Linear(2, 2).load_state_dict(freq['model'])"))


# ------------------------------------------------------------------------------------------- dead code

def test_function_a_script_with_a_main_block_never_calls_does_not_run():
    """A script whose `__main__` block says how it runs: a function nothing reaches (a loader kept for later) prints
    nothing; without a main block its functions are read as a reviewer reads them."""
    src = """
    def load_model(path):
        print("loading", path)
        return torch.load(path, map_location="cpu")

    def main():
        dist.init_process_group("gloo")
        print("training")
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
    """
    def prints(source: str) -> list:
        return [f for f in lint_source(HEAD + textwrap.dedent(source)).findings if f.rule == "unguarded-print"]

    shown = prints(src)
    assert len(shown) == 1 and shown[0].also == [] and "also" not in shown[0].message
    twin = prints(src.replace('if __name__ == "__main__":\n        main()', "main()"))
    assert len(twin) == 1 and len(twin[0].also) == 1  # no main block: load_model's print is read too


# ------------------------------------------------------------------------------------------- what a write is

def test_open_of_a_path_with_an_a_in_it_is_a_read():
    """`Image.open("data/img.jpg")`: the argument is a path, not a mode ('a' in 'data' is no append)."""
    src = SETUP + "from PIL import Image\nimg = Image.open('data/img.jpg')\ndist.destroy_process_group()\n"
    assert "shared-path-write" not in names(src)
    assert "shared-path-write" in names(src.replace("Image.open('data/img.jpg')", "open('data/img.txt', 'a')"))


def test_mkdir_whose_exists_error_is_caught_is_no_race():
    """`try: os.mkdir(d) except: pass`: the second rank's FileExistsError is swallowed."""
    src = SETUP + "try:\n    os.mkdir('out')\nexcept OSError:\n    pass\ndist.destroy_process_group()\n"
    assert "shared-path-write" not in names(src)
    assert "shared-path-write" in names(src.replace("except OSError:", "except KeyError:"))


def test_main_block_of_an_imported_module_does_not_run(tmp_path):
    """An imported module's `if __name__ == "__main__":` demo does not run when the script imports it."""
    from ddplab.lint import lint_file
    (tmp_path / "helpers.py").write_text("def f():\n    return 1\n\nif __name__ == '__main__':\n"
                                         "    open('demo.txt', 'w').write('x')\n")
    (tmp_path / "train.py").write_text(HEAD + "import helpers\n" + SETUP + "helpers.f()\ndist.destroy_process_group()\n")
    assert "shared-path-write" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "helpers.py").write_text("def f():\n    open('demo.txt', 'w').write('x')\n")
    assert "shared-path-write" in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_state_dict_on_the_plain_branch_of_a_wrapper_test_is_not_the_wrappers():
    """`net.module.state_dict() if hasattr(net, "module") else net.state_dict()`: the else is a plain model."""
    src = SETUP + "from torch.nn.parallel import DistributedDataParallel as DDP\nnet = DDP(torch.nn.Linear(2, 2))\n" \
        "state = net.module.state_dict() if hasattr(net, 'module') else net.state_dict()\n" \
        "if dist.get_rank() == 0:\n    torch.save(state, 'm.pt')\ndist.destroy_process_group()\n"
    assert "save-ddp-state-dict" not in names(src)
    assert "save-ddp-state-dict" in names(src.replace("if hasattr(net, 'module') else net.state_dict()",
                                                      "if False else net.state_dict()"))


def test_an_options_default_device_is_the_users_choice():
    """`parser.add_argument("--device", default="cuda:0")` is an option (like a backend option), not a literal use."""
    src = "import argparse\nparser = argparse.ArgumentParser()\n" \
        "parser.add_argument('--device', default='cuda:0')\nargs = parser.parse_args()\n" + SETUP + \
        "x = torch.zeros(2).to(args.device)\ndist.destroy_process_group()\n"
    assert "hardcoded-cuda-device" not in names(src)
    assert "hardcoded-cuda-device" in names(src.replace(".to(args.device)", ".to('cuda:0')"))


# ------------------------------------------------------------------------------------------- where the parser is

def test_local_rank_flag_of_an_options_module(tmp_path):
    """The parser is built in options.py; the script picks the device from opt.local_rank: reported once, in the
    script. A flag value replaced before use (`opt.local_rank = dist.get_rank()`) is not the flag's."""
    from ddplab.lint import lint_file
    (tmp_path / "options.py").write_text("import argparse\ndef parse():\n    p = argparse.ArgumentParser()\n"
                                         "    p.add_argument('--local_rank', type=int, default=0)\n"
                                         "    return p.parse_args()\n")
    script = HEAD + "import options\nopt = options.parse()\ndist.init_process_group('gloo')\n" \
        "torch.cuda.set_device(opt.local_rank)\ndist.destroy_process_group()\n"
    (tmp_path / "train.py").write_text(script)
    found = [f for f in lint_file(tmp_path / "train.py").findings if f.rule == "local-rank-argparse"]
    assert len(found) == 1 and found[0].path is None
    (tmp_path / "train.py").write_text(script.replace("dist.init_process_group('gloo')\n",
                                                      "dist.init_process_group('gloo')\nopt.local_rank = dist.get_rank()\n"))
    assert "local-rank-argparse" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_ddp_device_ids_given_by_position_pick_the_device():
    """`DistributedDataParallel(model, device_ids)`: the second positional argument is device_ids."""
    src = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int, default=0)\n" \
        "args = p.parse_args()\ndist.init_process_group('nccl')\n" \
        "from torch.nn.parallel import DistributedDataParallel\nids = [args.local_rank]\n" \
        "model = DistributedDataParallel(torch.nn.Linear(2, 2), ids)\ndist.destroy_process_group()\n"
    assert "local-rank-argparse" in names(src)
    assert "local-rank-argparse" not in names(src.replace("torch.nn.Linear(2, 2), ids)", "torch.nn.Linear(2, 2))"))


# ------------------------------------------------------------------------------------------- set up in another module

def test_worker_of_another_module_handed_to_mp_spawn_runs_on_every_rank(tmp_path):
    """`mp.spawn(ddp_main, ...)` in the script with ddp_main (and the group's setup) in a module: the setup is
    reached (its nccl literal is sure) and ddp_main's prints run on every rank."""
    from ddplab.lint import lint_file
    (tmp_path / "worker.py").write_text(HEAD + "def setup(rank, n):\n    torch.cuda.set_device(rank)\n"
                                        "    dist.init_process_group('nccl', rank=rank, world_size=n)\n\n"
                                        "def ddp_main(rank, n):\n    print('setting up')\n    setup(rank, n)\n"
                                        "    dist.destroy_process_group()\n")
    script = "import torch\nimport torch.multiprocessing as mp\nfrom worker import ddp_main\n\n" \
        "if __name__ == '__main__':\n    mp.spawn(ddp_main, args=(2,), nprocs=2)\n"
    (tmp_path / "train.py").write_text(script)
    rules = [f.rule for f in lint_file(tmp_path / "train.py").findings]
    assert "nccl-hardcoded" in rules and "unguarded-print" in rules
    (tmp_path / "train.py").write_text(script.replace("mp.spawn(ddp_main, args=(2,), nprocs=2)", "pass"))
    rules = [f.rule for f in lint_file(tmp_path / "train.py").findings]
    assert "nccl-hardcoded" not in rules and "unguarded-print" not in rules


# ------------------------------------------------------------------------------------------- accumulation

ACCUM = """
from torch.nn.parallel import DistributedDataParallel as DDP

def training_step(model, batch):
    loss = model(batch).sum()
    loss.backward()
    return loss

def fit(model, optimizer, loader, accum):
    global_step = 0
    for batch in loader:
        should_step = global_step % accum == 0
        if should_step:
            training_step(model, batch)
            optimizer.step()
            optimizer.zero_grad()
        else:
            training_step(model, batch)
        global_step += 1

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(2, 1))
fit(model, torch.optim.SGD(model.parameters(), 0.1), [torch.zeros(2)], 4)
dist.destroy_process_group()
"""


def test_accumulation_as_a_step_counter_with_a_backward_helper():
    """`should_step = step % k == 0` stored, the step in its branch, a helper running backward on every batch: k-1
    of k all-reduces wasted; reported where the `% k` is written."""
    found = [f for f in lint_source(HEAD + textwrap.dedent(ACCUM)).findings if f.rule == "grad-accum-no-sync"]
    assert len(found) == 1 and found[0].line == HEAD.count("\n") + 12  # should_step = ...
    assert "grad-accum-no-sync" not in names(ACCUM.replace("        else:\n            training_step(model, batch)\n",
                                                            ""))


def test_module_load_called_only_on_rank0_is_not_sure(tmp_path):
    """A module's torch.load without map_location is judged with its callers, as a save is: called only under a
    rank-0 test, one process loads (onto its own GPU)."""
    from ddplab.lint import lint_file
    (tmp_path / "helpers.py").write_text("import torch\ndef load(p):\n    return torch.load(p)\n")
    script = HEAD + "import helpers\n" + SETUP + "if rank == 0:\n    state = helpers.load('m.pt')\n" \
        "dist.destroy_process_group()\n"
    (tmp_path / "train.py").write_text(script)
    assert "load-no-map-location" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("if rank == 0:\n    state", "if True:\n    state"))
    assert "load-no-map-location" in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_a_cleanup_nothing_calls_destroys_nothing():
    """`def cleanup(): dist.destroy_process_group()` defined and never called: the group is never destroyed."""
    src = "def cleanup():\n    dist.destroy_process_group()\n\nif __name__ == '__main__':\n" \
        "    dist.init_process_group('gloo')\n"
    assert "no-destroy" in names(src)
    assert "no-destroy" not in names(src + "    cleanup()\n")
    assert "no-destroy" not in names(src.replace("if __name__ == '__main__':\n    ", ""))  # no main: read as called


def test_backend_attribute_set_once_in_the_file_is_a_literal():
    """`args.backend = 'nccl'` once (no --backend option) and `init_process_group(args.backend)` in main(args)."""
    src = "import argparse\ndef main(args):\n    dist.init_process_group(args.backend)\n" \
        "    dist.destroy_process_group()\n\nif __name__ == '__main__':\n    args = argparse.Namespace()\n" \
        "    args.backend = 'nccl'\n    main(args)\n"
    assert "nccl-hardcoded" in names(src)
    with_option = src.replace("    args = argparse.Namespace()\n",
                              "    p = argparse.ArgumentParser()\n    p.add_argument('--backend')\n    args = p.parse_args()\n")
    assert "nccl-hardcoded" not in names(with_option)


def test_print_filter_nothing_installs_filters_nothing(tmp_path):
    """DETR's setup_for_distributed (builtins.print replaced) in a module, inside an init_distributed_mode the
    script never calls: every rank still prints."""
    from ddplab.lint import lint_file
    (tmp_path / "misc.py").write_text("import builtins\ndef setup_for_distributed(is_master):\n"
                                      "    builtin_print = builtins.print\n"
                                      "    def p(*a, **k):\n        if is_master:\n            builtin_print(*a, **k)\n"
                                      "    builtins.print = p\n\ndef init_distributed_mode(rank):\n"
                                      "    setup_for_distributed(rank == 0)\n")
    script = HEAD + "import misc\n" + SETUP + "print('hello')\ndist.destroy_process_group()\n"
    (tmp_path / "train.py").write_text(script)
    assert "unguarded-print" in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("print('hello')", "misc.init_distributed_mode(rank)\nprint('hi')"))
    assert "unguarded-print" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


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


def test_load_in_a_branch_no_caller_turns_on_never_runs():
    """`def __init__(self, n, re_train=False): if re_train: torch.load(...)` built as `Net(2)`: never loads."""
    src = "class Net(torch.nn.Module):\n    def __init__(self, n, re_train=False):\n        super().__init__()\n" \
        "        if re_train:\n            self.load_state_dict(torch.load('pre.pt'))\n\n" + SETUP + \
        "net = Net(2)\ndist.destroy_process_group()\n"
    assert "load-no-map-location" not in names(src)
    assert "load-no-map-location" in names(src.replace("net = Net(2)", "net = Net(2, re_train=True)"))


def test_branch_beside_an_else_that_makes_the_group_is_one_process(tmp_path):
    """`if single_gpu: print(...) else: main()` where main (or a module's setup it calls) makes the process group:
    the if branch runs without a group, as one process."""
    from ddplab.lint import lint_file
    (tmp_path / "utils.py").write_text(HEAD + "def ddp_setup(rank, n):\n    dist.init_process_group('gloo', "
                                       "rank=rank, world_size=n)\n")
    script = HEAD + "import argparse\nfrom utils import ddp_setup\n\ndef main(rank):\n    ddp_setup(rank, 2)\n" \
        "    dist.destroy_process_group()\n\nif __name__ == '__main__':\n    args = argparse.Namespace(multi=False)\n" \
        "    single_gpu = not args.multi\n    if single_gpu:\n        print('one gpu')\n    else:\n" \
        "        main(int(os.environ['RANK']))\n"
    (tmp_path / "train.py").write_text(script)
    assert "unguarded-print" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("        main(int(os.environ['RANK']))\n",
                                                      "        pass\n    main(int(os.environ['RANK']))\n"))
    assert "unguarded-print" in [f.rule for f in lint_file(tmp_path / "train.py").findings]
