"""unguarded-print, and the rank guards in every shape it (and the save rules) must read as guards.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

from lintcase import END, HEAD, HEAD_TIME, SETUP, line_rules, lint_source, names, names_time, pair
from lintcase import PG_OPEN as PG
from lintcase import rules_after as rules

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


def test_rank_guards_in_their_usual_shapes():
    assert (
        rules(
            PG,
            """
        rank = dist.get_rank()
        is_main = rank == 0
        def save(model):
            torch.save(model.state_dict(), "m.pt")
        def report():
            if not is_main:
                return
            print("done")
        if dist.get_rank() == 0:
            save(torch.nn.Linear(1, 1))
        report()
        print(f"rank {rank} ready")
        if int(os.environ["RANK"]) != 0:
            pass
        else:
            torch.save({}, "x.pt")
        dist.destroy_process_group()
    """,
        )
        == []
    )


def test_rank_below_one_is_rank_0_and_one_or_more_the_others():
    """`if rank < 1:` (rank 0, or -1 without a launcher; round 34's Retro3D) guards like `rank <= 0`; `1 > rank` too;
    `rank >= 1` is every rank but 0."""
    src = """
        rank = dist.get_rank()
        if rank < 1:
            print("epoch done")
            torch.save({}, "model.pt")
        if 1 > rank:
            print("saved")
        if rank >= 1:
            print("waiting")
        dist.destroy_process_group()
    """
    assert rules(PG, src) == ["unguarded-print"]
    assert rules(PG, src.replace("rank >= 1", "rank >= 0")) == ["unguarded-print"]
    assert sorted(rules(PG, src.replace("rank < 1", "rank < 2"))) == ["unguarded-print", "unguarded-save"]


def test_a_print_into_redirected_stdout_goes_to_the_file():
    """`with redirect_stdout(f): print(model)` writes into f, not on the console (round 34's Retro3D)."""
    src = """
        from contextlib import redirect_stdout
        rank = dist.get_rank()
        with open(f"model_{rank}.txt", "w") as f:
            with redirect_stdout(f):
                print("model summary")
        dist.destroy_process_group()
    """
    assert rules(PG, src) == []
    assert rules(PG, src.replace("with redirect_stdout(f):", "if f:")) == ["unguarded-print"]


def test_a_function_called_from_a_guarded_and_an_unguarded_site_is_not():
    bad, good = pair(
        """
        def note(text):
            print(text)
        if dist.get_rank() == 0:
            note("a")
        note("b")
        """,
        """
        def note(text):
            print(text)
        if dist.get_rank() == 0:
            note("a")
            note("b")
        """,
    )
    assert bad == ["unguarded-print"] and good == []


def test_a_device_index_guard_is_fine_for_printing():
    bad, good = pair(
        """
        def train(gpu):
            print("epoch done")
        """,
        """
        def train(gpu):
            if gpu == 0:
                print("epoch done")
        """,
    )
    assert bad == ["unguarded-print"] and good == []


def test_a_print_that_says_who_prints():
    bad, good = pair(
        """
        device = torch.device("cpu")
        print(f"running on {device}")
        """,
        """
        local_rank = int(os.environ["LOCAL_RANK"])
        print(f"[GPU{local_rank}] running")
        print(f"[{os.getpid()}] running")
        """,
    )
    assert bad == ["unguarded-print"] and good == []


def test_a_label_made_from_the_rank_says_who_prints():
    bad, good = pair(
        """
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cpu")
        loss = torch.ones(1, device=f"cuda:{local_rank}").sum()
        print(device, loss)
        """,
        """
        local_rank = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda:{}".format(local_rank))
        print("using", device)
        """,
    )
    assert bad == ["unguarded-print"] and good == []


def test_a_per_rank_pick_and_the_no_launcher_branch_are_single_voices():
    bad, good = pair(
        """
        pool = [1, 5, 6, 7]
        def work(rank):
            device = pool[0]
            print(f"training on {device}")
        if "RANK" in os.environ:
            print("launched")
        """,
        """
        pool = [1, 5, 6, 7]
        def work(rank):
            device = pool[rank]
            print(f"training on {device}")
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            pass
        else:
            print("not distributed: one process")
        """,
    )
    assert bad == ["unguarded-print"] and good == []
    found = lint_source(PG + "print('a')\nprint('b')\n" + END).findings
    assert [(f.line, f.also) for f in found if f.rule == "unguarded-print"] == [(5, [6])]


def test_prints_routed_through_a_replaced_builtin_print():
    """setup_for_distributed: `builtins.print = ...` keeps every print to the main process."""
    bad, good = pair(
        """
        print("epoch done")
        """,
        """
        import builtins
        def quiet_unless(is_master):
            builtin_print = builtins.print
            def print(*args, **kwargs):
                if is_master:
                    builtin_print(*args, **kwargs)
            builtins.print = print
        quiet_unless(dist.get_rank() == 0)
        print("epoch done")
        """,
    )
    assert bad == ["unguarded-print"] and good == []


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_a_print_filter_installed_on_the_spawn_path_only_leaves_torchrun_printing():
    source = (
        HEAD
        + """\
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
    )
    assert line_rules(source) == [(11, "unguarded-print")]
    everywhere = source.replace("args.multiprocessing_distributed and gpu != 0", "gpu != 0")
    assert line_rules(everywhere) == []  # installed on every path: the filter holds


# ------------------------------------------------------------- issue 28, third held-out set (was test_lint_heldout3.py)


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
    assert "unguarded-print" not in names(
        pretty.replace('pp.pprint({"lr": 0.1})', 'pp.pprint({"lr": 0.1}, stream=open("p.txt", "w"))'), show_all=True
    )


# ----------------------------------------------------------------- issue 28, fourth pass (was test_lint_mechanisms4.py)


FILTER_ORDER = """
import builtins

def setup_for_distributed(is_master):
    builtin_print = builtins.print
    def filtered(*args, **kwargs):
        if is_master or kwargs.pop("force", False):
            builtin_print(*args, **kwargs)
    builtins.print = filtered

def init_dist_and_get_args(extra):
    dist.init_process_group("gloo")
    if extra:
        print("WARNING: unexpected extra args", extra)
    setup_for_distributed(dist.get_rank() == 0)

def main():
    init_dist_and_get_args(os.environ.get("EXTRA"))
    print("training starts")
    dist.destroy_process_group()

main()
"""


def test_print_before_the_filter_is_installed_runs_on_every_rank():
    """The print filter (`builtins.print = ...`) is installed by setup_for_distributed at the end of
    init_dist_and_get_args: the warning printed before it, in the same function, comes from every rank."""
    found = [f for f in lint_source(HEAD_TIME + textwrap.dedent(FILTER_ORDER)).findings if f.rule == "unguarded-print"]
    assert [f.line for f in found] == [18] and not found[0].also


def test_print_after_the_filter_is_installed_is_quiet():
    """The same warning printed after setup_for_distributed goes through the filter (rank 0 only)."""
    after = FILTER_ORDER.replace(
        '        print("WARNING: unexpected extra args", extra)\n    setup_for_distributed(dist.get_rank() == 0)\n',
        "        pass\n    setup_for_distributed(dist.get_rank() == 0)\n"
        '    print("WARNING: unexpected extra args", extra)\n',
    )
    assert "unguarded-print" not in names_time(after, show_all=True)


def test_the_main_block_that_hands_its_worker_to_a_project_spawner_runs_once(tmp_path):
    from lintcase import found, write

    utils = (
        "import torch.multiprocessing as mp\n\ndef run(fn, world_size):\n"
        "    mp.spawn(fn, args=(world_size,), nprocs=world_size, join=True)\n"
    )
    train = (
        "import torch\nimport torch.distributed as dist\nimport utils\n\n"
        "def worker(rank, world_size):\n"
        "    dist.init_process_group('gloo', rank=rank, world_size=world_size)\n\n"
        "if __name__ == '__main__':\n    print('starting')\n    utils.run(worker, 2)\n"
    )
    spawner = write(tmp_path / "a", {"train.py": train, "utils.py": utils})
    assert not [f for f in found(spawner) if f[2] == "unguarded-print"]
    # quiet twin the other way: the helper does not spawn, so the block runs on every launched rank
    plain = write(tmp_path / "b", {"train.py": train, "utils.py": "def run(fn, world_size):\n    fn(0, world_size)\n"})
    assert [f for f in found(plain) if f[2] == "unguarded-print"]


# ------------------------------------------------------------------ issue 28, fifth pass (was test_lint_mechanisms5.py)


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
    src = (
        SETUP + "import wandb\nrun = wandb.init() if rank == 0 else None\nif run:\n    print('logging')\n"
        "if run is not None:\n    print('again')\ndist.destroy_process_group()\n"
    )
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace("if rank == 0 else None", "if rank >= 0 else 1"))


def test_rank_compared_with_a_module_constant_is_one_rank():
    """`local_rank == OFFSET + 1` with `OFFSET = 1` at module level: one process per node, like rank 0."""
    src = "OFFSET = 1\n" + SETUP + "if rank == OFFSET + 1:\n    print('one voice')\ndist.destroy_process_group()\n"
    assert "unguarded-print" not in names(src)
    assert "unguarded-print" in names(src.replace("OFFSET = 1\n", "OFFSET = int(os.environ['X'])\n"))


def test_else_of_a_group_flag_is_one_process():
    """`args.distributed = False; return` before the group, `= True` where it is made: `else:` of `if
    args.distributed:` runs without a group; so it does where an option sets the flag (a launch without it has no
    group: each process trains alone, whatever it prints). The same print after the if/else runs on every rank."""
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
    assert "unguarded-print" not in names(src.replace("args.distributed = False", "args.distributed = args.flag"))
    assert "unguarded-print" in names(src.replace('else:\n        print("single")', 'print("single")'))


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


# DETR's util/misc.py, cut down: setup_for_distributed replaces builtins.print, init_distributed_mode calls it
DETR_MISC = (
    "import builtins\ndef setup_for_distributed(is_master):\n"
    "    builtin_print = builtins.print\n"
    "    def p(*a, **k):\n        if is_master:\n            builtin_print(*a, **k)\n"
    "    builtins.print = p\n\ndef init_distributed_mode(rank):\n"
    "    setup_for_distributed(rank == 0)\n"
)


def test_print_filter_nothing_installs_filters_nothing(tmp_path):
    """DETR's setup_for_distributed (builtins.print replaced) in a module, inside an init_distributed_mode the
    script never calls: every rank still prints."""
    from lintcase import lint_file

    (tmp_path / "misc.py").write_text(DETR_MISC)
    script = HEAD + "import misc\n" + SETUP + "print('hello')\ndist.destroy_process_group()\n"
    (tmp_path / "train.py").write_text(script)
    assert "unguarded-print" in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(
        script.replace("print('hello')", "misc.init_distributed_mode(rank)\nprint('hi')")
    )
    assert "unguarded-print" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_a_print_filter_installed_by_a_function_handed_over_filters(tmp_path):
    """The installer's caller is called by a dispatcher, not by name (round 30's SSQL: `parser.set_defaults(
    func=ssl)`, then `args.func(args)`; ssl() calls init_distributed_mode): the filter is installed, the prints after
    it are rank 0's. Handed nowhere, nothing installs it."""
    from lintcase import lint_file

    (tmp_path / "misc.py").write_text(DETR_MISC)
    script = HEAD + (
        "import argparse\nimport misc\n\ndef ssl(args):\n"
        "    dist.init_process_group('gloo')\n    misc.init_distributed_mode(dist.get_rank())\n"
        "    print('epoch done')\n    dist.destroy_process_group()\n\n"
        "parser = argparse.ArgumentParser()\nparser.set_defaults(func=ssl)\nargs = parser.parse_args()\n"
        "args.func(args)\n"
    )
    (tmp_path / "train.py").write_text(script)
    assert "unguarded-print" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("parser.set_defaults(func=ssl)", "parser.set_defaults()"))
    assert "unguarded-print" in [f.rule for f in lint_file(tmp_path / "train.py", show_all=True).findings]


def test_branch_beside_an_else_that_makes_the_group_is_one_process(tmp_path):
    """`if single_gpu: print(...) else: main()` where main (or a module's setup it calls) makes the process group:
    the if branch runs without a group, as one process."""
    from lintcase import lint_file

    (tmp_path / "utils.py").write_text(
        HEAD + "def ddp_setup(rank, n):\n    dist.init_process_group('gloo', rank=rank, world_size=n)\n"
    )
    script = (
        HEAD + "import argparse\nfrom utils import ddp_setup\n\ndef main(rank):\n    ddp_setup(rank, 2)\n"
        "    dist.destroy_process_group()\n\nif __name__ == '__main__':\n    args = argparse.Namespace(multi=False)\n"
        "    single_gpu = not args.multi\n    if single_gpu:\n        print('one gpu')\n    else:\n"
        "        main(int(os.environ['RANK']))\n"
    )
    (tmp_path / "train.py").write_text(script)
    assert "unguarded-print" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(
        script.replace("        main(int(os.environ['RANK']))\n", "        pass\n    main(int(os.environ['RANK']))\n")
    )
    assert "unguarded-print" in [f.rule for f in lint_file(tmp_path / "train.py").findings]


# ------------------------------------------------------------------ issue 28, sixth pass (was test_lint_mechanisms6.py)


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


def test_a_print_that_says_why_the_process_fails_is_each_ranks_own():
    """modded-nanogpt's data loader: `print("ERROR: magic number mismatch ..."); exit(1)` on every rank that reads a
    bad file. Each failing rank says why, as it should (a rank-0 test would hide rank 1's failure); so does a print
    before a raise, an `except` block's print of what failed, and a branch that leaves the process whatever its
    status (pytorch/examples' minGPT-ddp: `if not verify_min_gpu_count(): print("... Exiting."); sys.exit()`). A
    print the process goes on after, or before an exit that is not a branch's (the end of a script), is still the
    noise the rule is about."""
    source = PG + textwrap.dedent("""\
        import sys
        def peek(header):
            if header != 20240520:
                print("ERROR: magic number mismatch in the data file")
                exit(1)
            if header == 0:
                print("empty data file, exiting")
                sys.exit()
            if header < 0:
                print("negative header")
                raise ValueError(header)
            try:
                header.check()
            except AttributeError:
                print("no check")
                sys.exit("cannot check the header")
            try:
                header.load()
            except KeyError as e:
                print(e)
            return header
        peek(int(sys.argv[1]))  # read at run time: no branch is decided by the call
        dist.destroy_process_group()
    """)
    assert line_rules(source) == []
    noise = source.replace("        sys.exit()\n", "        header = 1\n")
    assert noise != source and line_rules(noise) == [(11, "unguarded-print")]
    at_the_end = PG + 'import sys\nprint("done")\ndist.destroy_process_group()\nsys.exit(0)\n'
    assert line_rules(at_the_end) == [(at_the_end.splitlines().index('print("done")') + 1, "unguarded-print")]


def test_a_function_that_hands_the_worker_to_a_launcher_prints_once():
    """detectron2's plain_train_net.py: `print("Command Line Args:", args)`, then `launch(main, num_gpus)` with main
    wrapping the model in DDP: the launcher process prints, once, before the ranks exist (mp.spawn's shape under a
    library's name). A function handed over that starts no rank work (a tokenizer to `map`) makes no launcher."""
    source = textwrap.dedent("""\
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        from somewhere import launch

        def main(args):
            dist.init_process_group("gloo")
            model = DistributedDataParallel(torch.nn.Linear(2, 2))
            dist.destroy_process_group()

        def invoke_main():
            args = {"num_gpus": 2}
            print("Command Line Args:", args)
            launch(main, args["num_gpus"])

        invoke_main()
    """)
    assert [r for r in line_rules(source) if r[1] == "unguarded-print"] == []
    mapped = source.replace("def main(args):", "def tokenize(args):\n    return args\n\ndef main(args):").replace(
        'launch(main, args["num_gpus"])', 'launch(tokenize, args["num_gpus"])\n    main(args)'
    )
    assert mapped != source and [r for r in line_rules(mapped) if r[1] == "unguarded-print"] == [
        (16, "unguarded-print")
    ]


def test_a_name_set_only_on_rank0_and_none_elsewhere_is_the_rank_test():
    """cleanrl's ppo_atari_multigpu: `writer = None`, `if local_rank == 0: writer = SummaryWriter(...)`, then in the
    loop `if not writer: continue` before the print: the print runs where the writer is, rank 0 (round 11). A writer
    made on every rank guards nothing."""
    source = """
    from torch.utils.tensorboard import SummaryWriter
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo")
    writer = None
    if local_rank == 0:
        writer = SummaryWriter("runs")
    for step in range(10):
        if not writer:
            continue
        print(f"step={step}")
    dist.destroy_process_group()
    """
    assert "unguarded-print" not in names(source)
    assert "unguarded-print" not in names(source.replace("if not writer:", "if writer is None:"))
    assert "unguarded-print" in names(source.replace("if local_rank == 0:", "if local_rank >= 0:"))


# ------------------------------------------------------------------------------------------- round 36 (issue 39)

DEAD_HELPERS = """\
import os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


class Sampler:
    def sample(self, model, x):
        return model(x)


def sample(model, sampler):
    print("Sample batch")
    return sampler.sample(model, torch.randn(2, 4))


def run(main_fn, world_size):
    print("Running DDP with world size: ", world_size)
    mp.spawn(main_fn, args=(world_size,), nprocs=world_size, join=True)


def main(world_size):
    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        run = world_size  # a local of main(), not the function run()
        print("world", run)
    print("Data loaded!")
    net = torch.nn.Linear(4, 4)
    net.load_state_dict(torch.load("model.pt"))
    model = DDP(net)
    out = Sampler().sample(model, torch.randn(2, 4))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(world_size=2)
"""


def test_helpers_nothing_calls_are_dead_whatever_shares_their_names():
    """Round 36's GraphaRNA, launched by torchrun: `sample()` and `run()` are never called (`sampler.sample(...)` is
    another object's method; `run` in main() is a local), so their prints are not the ranks'; and the mp.spawn in
    run() does not make the script its own launcher, so main()'s print and load run on every rank."""
    found = lint_source(DEAD_HELPERS, "train.py").findings
    lines = {f.rule: [f.line, *f.also] for f in found}
    assert lines["unguarded-print"] == [28] and lines["load-no-map-location"] == [30], lines
    # called, they run: sample()'s print on every rank; run() spawns the ranks, and main() is then each rank's
    called = DEAD_HELPERS.replace("    out = Sampler()", "    sample(model, Sampler())\n    out = Sampler()")
    assert {14, 28} <= {line for f in lint_source(called, "train.py").findings for line in [f.line, *f.also]}


def test_a_print_two_calls_down_in_the_module_the_script_calls_is_every_ranks(tmp_path):
    """Round 37's compositional_SLMs: the script builds a module's dataset on every rank and its __init__ calls
    `self.load()`, which prints; a module helper calling another is read the same way. Built on rank 0 only, or
    called under an `if` of the module's own, it is not every rank's print."""
    from lintcase import lint_file, write

    dataset = (
        "class TextDataset:\n    def __init__(self, path):\n        self.rows = self.load(path)\n\n"
        "    def load(self, path):\n        print('loading', path)\n        return [1, 2]\n\n\n"
        "def build(path):\n    return helper(path)\n\n\ndef helper(path):\n    print('built', path)\n    return path\n"
    )
    script = (
        "import os\nimport torch.distributed as dist\nfrom dataset import TextDataset, build\n\n"
        "dist.init_process_group('gloo')\nTextDataset('train.txt')\nbuild('x')\ndist.destroy_process_group()\n"
    )
    train = write(tmp_path / "a", {"train.py": script, "dataset.py": dataset})
    printed = [(f.path, f.line, f.also) for f in lint_file(train).findings if f.rule == "unguarded-print"]
    assert [(p.rsplit("/", 1)[-1], line, also) for p, line, also in printed] == [("dataset.py", 6, [15])]
    guarded = script.replace(
        "TextDataset('train.txt')\nbuild('x')", "if dist.get_rank() == 0:\n    TextDataset('t')\n    build('x')"
    )
    assert "unguarded-print" not in {
        f.rule
        for f in lint_file(write(tmp_path / "b", {"train.py": guarded, "dataset.py": dataset}), show_all=True).findings
    }
    inner_if = dataset.replace(
        "        self.rows = self.load(path)", "        if path:\n            self.rows = self.load(path)"
    )
    inner = write(tmp_path / "c", {"train.py": script, "dataset.py": inner_if})
    assert [f.line for f in lint_file(inner).findings if f.rule == "unguarded-print"] == [16]  # one line down
