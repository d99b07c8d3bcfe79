"""Which GPU each rank takes: hardcoded-cuda-device, no-set-device, ddp-no-device-ids, global-rank-device-ids,
local-rank-argparse (torchrun's missing --local_rank flag shown for real).

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

from conftest import torchrun
from lintcase import (
    HEAD,
    HEAD_TIME,
    NCCL,
    SCRIPTS,
    SETUP,
    line_names,
    line_rules,
    lint_file,
    lint_source,
    names,
    names_time,
    rules_after,
)
from lintcase import PG_OPEN as PG
from lintcase import rules_but_nccl as rules

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


def test_cuda_picked_from_local_rank_is_fine():
    assert (
        rules_after(
            PG.replace("'gloo'", "'nccl' if torch.cuda.is_available() else 'gloo'"),
            """
        from torch.nn.parallel import DistributedDataParallel as DDP
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(1, 1).cuda(), device_ids=[local_rank])
        state = torch.load("m.pt", map_location=f"cuda:{local_rank}")
        dist.destroy_process_group()
    """,
        )
        == []
    )


# --------------------------------------------------------------- issue 28's multi-GPU rules (was test_lint_multigpu.py)


def test_torchrun_does_not_pass_the_local_rank_flag(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_local_rank_flag.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("would use device index 0") == 2  # both ranks on one device


def test_local_rank_flag_only_when_it_picks_the_device_and_the_env_is_never_read():
    flag = textwrap.dedent("""
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--local-rank", type=int, default=0)
        args = p.parse_args()
    """)
    assert rules(flag + "torch.cuda.set_device(args.local_rank)\n") == ["local-rank-argparse"]
    assert rules(flag + "gpu = args.local_rank\nmodel = torch.nn.Linear(1, 1).cuda(gpu)\n") == ["local-rank-argparse"]
    assert rules(flag) == []  # accepted for the old launcher, never used
    assert rules(flag + "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n") == []
    # copied into a config (issue 39 round 13) it is still the flag; replaced by the rank it is not
    copied = (
        "class Cfg:\n    pass\ncfg = Cfg()\ncfg.local_rank = args.local_rank\ntorch.cuda.set_device(cfg.local_rank)\n"
    )
    assert rules(flag + copied) == ["local-rank-argparse"]
    assert rules(flag + "args.local_rank = dist.get_rank() % 8\ntorch.cuda.set_device(args.local_rank)\n") == []
    # a constant stored in the branch of one process (round 35's MathPoseGNN: `else: self.local_rank = 0`) replaces
    # nothing the launched ranks use
    fallback = (
        "class Engine:\n    def __init__(self):\n        if int(os.environ.get('WORLD_SIZE', 1)) > 1:\n"
        "            self.local_rank = args.local_rank\n            torch.cuda.set_device(self.local_rank)\n"
        "        else:\n            self.local_rank = 0\nEngine()\n"
    )
    assert rules(flag + fallback) == ["local-rank-argparse"]


def test_the_old_launcher_passes_a_dashed_flag_a_local_rank_parser_refuses(tmp_path, no_leftover_workers):
    """What the finding says of torch.distributed.launch, shown on this torch: it passes --local-rank=0, which a
    parser that knows only --local_rank refuses before the script does anything."""
    import os
    import subprocess
    import sys

    script = tmp_path / "lint_local_rank_flag.py"
    script.write_text((SCRIPTS / script.name).read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.launch", "--standalone", "--nproc-per-node", "1", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**env, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode != 0 and "unrecognized arguments: --local-rank=0" in done.stderr, done.stderr[-2000:]
    found = lint_file(script).findings
    assert [f.rule for f in found] == ["local-rank-argparse"] and "--local-rank=N since PyTorch 2.0" in found[0].message


def test_current_device_never_set():
    assert rules("torch.accelerator.device_index(0)\n") == ["no-set-device"]  # a context manager, alone
    assert rules("with torch.accelerator.device_index(0):\n    pass\n") == []
    assert rules("x = torch.zeros(1).to('cuda')\n", setup=NCCL) == ["no-set-device"]
    assert (
        rules("torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\nx = torch.zeros(1).to('cuda')\n", setup=NCCL) == []
    )
    # nccl and nothing that uses the current device by itself: possible only
    assert rules("x = 1\n", setup=NCCL) == [] and rules("x = 1\n", setup=NCCL, show_all=True) == ["no-set-device"]
    assert rules("torch.cuda.synchronize()\n", setup=NCCL) == ["no-set-device"]
    branch = """
        from torch.nn.parallel import DistributedDataParallel as DDP
        gpu = os.environ.get("GPU")
        model = torch.nn.Linear(1, 1)
        if gpu is not None:
            torch.cuda.set_device(int(gpu))
            model = DDP(model.cuda(int(gpu)), device_ids=[int(gpu)])
        else:
            model.cuda()
            model = DDP(model)
    """
    assert "no-set-device" in rules(branch)


def test_global_rank_as_a_device_index():
    assert rules("""
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank)
    """) == ["global-rank-device-ids"]
    assert rules("""
        from torch.nn.parallel import DistributedDataParallel as DDP
        m = DDP(torch.nn.Linear(1, 1), device_ids=[dist.get_rank()])
    """) == ["global-rank-device-ids"]
    assert (
        rules("""
        rank = int(os.environ["RANK"])
        torch.cuda.set_device(rank % torch.cuda.device_count())
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        def worker(rank):  # an mp.spawn index: the local one
            torch.cuda.set_device(rank)
    """)
        == []
    )


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_ddp_without_device_ids_only_where_the_model_is_on_the_default_gpu():
    on_default = (
        HEAD
        + """\
        dist.init_process_group("gloo")
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).to(device))
        dist.destroy_process_group()
    """
    )
    assert line_rules(on_default) == [(5, "no-set-device"), (6, "ddp-no-device-ids")]
    device_set = (
        HEAD
        + """\
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
        dist.destroy_process_group()
    """
    )
    assert line_rules(device_set) == []  # a single-device module on this process's GPU needs no device_ids
    one_path = (
        HEAD
        + """\
        dist.init_process_group("gloo")
        if os.environ.get("GPU"):
            torch.cuda.set_device(int(os.environ["GPU"]))
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda(), device_ids=[0])
        else:
            model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).cuda())
        dist.destroy_process_group()
    """
    )
    assert (9, "ddp-no-device-ids") in line_rules(one_path)


def test_a_third_party_ddp_wrapper_is_judged_by_its_own_signature():
    apex = (
        HEAD
        + """\
        from apex.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(2, 2).cuda())
        dist.destroy_process_group()
    """
    )
    assert "ddp-no-device-ids" not in line_names(apex)  # apex's DDP has no device_ids
    torch_ddp = apex.replace("from apex.parallel import", "from torch.nn.parallel import")
    assert "ddp-no-device-ids" in line_names(torch_ddp)


# ------------------------------------------------------------- issue 28, third held-out set (was test_lint_heldout3.py)


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


# ----------------------------------------------------------------- issue 28, fourth pass (was test_lint_mechanisms4.py)


GLOBAL_GPU = """
from torch.nn.parallel import DistributedDataParallel as DDP

def build(model, device):
    model = model.to(device)
    return DDP(model, device_ids=[device])

dist.init_process_group("nccl")
rank = dist.get_rank()
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = build(torch.nn.Linear(4, 1), rank)
x = torch.ones(2, 4).to(f"cuda:{rank}")
dist.destroy_process_group()
"""


def test_global_rank_through_a_helper_parameter_and_cuda_fstring():
    """`build(model, rank)` where build does DDP(device_ids=[device]) and .to(device), and .to(f"cuda:{rank}"): the
    global rank picks the GPU by data flow (through the parameter every call fills with it). A `.to()` of a rank
    already reported at its DDP/set_device use is that same mistake, not another (`model.to(device)` in build)."""
    lines = sorted(
        f.line
        for f in lint_source(HEAD_TIME + textwrap.dedent(GLOBAL_GPU)).findings
        if f.rule == "global-rank-device-ids"
    )
    assert lines == [10, 17]


def test_local_rank_through_the_same_helper_is_quiet():
    """The same helper given the local rank, and .to(f"cuda:{local_rank}"): the GPU of this machine."""
    local = GLOBAL_GPU.replace(
        "build(torch.nn.Linear(4, 1), rank)", "build(torch.nn.Linear(4, 1), local_rank)"
    ).replace('f"cuda:{rank}"', 'f"cuda:{local_rank}"')
    assert "global-rank-device-ids" not in names_time(local, show_all=True)


# ------------------------------------------------------------------ issue 28, fifth pass (was test_lint_mechanisms5.py)


def test_an_options_default_device_is_the_users_choice():
    """`parser.add_argument("--device", default="cuda:0")` is an option (like a backend option), not a literal use."""
    src = (
        "import argparse\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--device', default='cuda:0')\nargs = parser.parse_args()\n"
        + SETUP
        + "x = torch.zeros(2).to(args.device)\ndist.destroy_process_group()\n"
    )
    assert "hardcoded-cuda-device" not in names(src)
    assert "hardcoded-cuda-device" in names(src.replace(".to(args.device)", ".to('cuda:0')"))


def test_local_rank_flag_of_an_options_module(tmp_path):
    """The parser is built in options.py; the script picks the device from opt.local_rank: reported once, in the
    script. A flag value replaced before use (`opt.local_rank = dist.get_rank()`) is not the flag's."""
    from lintcase import lint_file

    (tmp_path / "options.py").write_text(
        "import argparse\ndef parse():\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--local_rank', type=int, default=0)\n"
        "    return p.parse_args()\n"
    )
    script = (
        HEAD + "import options\nopt = options.parse()\ndist.init_process_group('gloo')\n"
        "torch.cuda.set_device(opt.local_rank)\ndist.destroy_process_group()\n"
    )
    (tmp_path / "train.py").write_text(script)
    found = [f for f in lint_file(tmp_path / "train.py").findings if f.rule == "local-rank-argparse"]
    assert len(found) == 1 and found[0].path is None
    (tmp_path / "train.py").write_text(
        script.replace(
            "dist.init_process_group('gloo')\n", "dist.init_process_group('gloo')\nopt.local_rank = dist.get_rank()\n"
        )
    )
    assert "local-rank-argparse" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_ddp_device_ids_given_by_position_pick_the_device():
    """`DistributedDataParallel(model, device_ids)`: the second positional argument is device_ids."""
    src = (
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--local_rank', type=int, default=0)\n"
        "args = p.parse_args()\ndist.init_process_group('nccl')\n"
        "from torch.nn.parallel import DistributedDataParallel\nids = [args.local_rank]\n"
        "model = DistributedDataParallel(torch.nn.Linear(2, 2), ids)\ndist.destroy_process_group()\n"
    )
    assert "local-rank-argparse" in names(src)
    assert "local-rank-argparse" not in names(src.replace("torch.nn.Linear(2, 2), ids)", "torch.nn.Linear(2, 2))"))


# ------------------------------------------------------------------ issue 28, sixth pass (was test_lint_mechanisms6.py)


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


def test_namespace_package_above_the_script(tmp_path):
    """`from utils.init import init` in scripts/train.py, utils/ beside scripts/ without an __init__.py (run with
    PYTHONPATH=./): the module is read, so its --local_rank flag is seen."""
    (tmp_path / "utils").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "utils" / "init.py").write_text(
        "import argparse\ndef init():\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--local_rank', type=int)\n    return p.parse_args()\n"
    )
    (tmp_path / "scripts" / "train.py").write_text(
        HEAD + "from utils.init import init\nargs = init()\ntorch.cuda.set_device(args.local_rank)\n"
        "dist.init_process_group('gloo')\ndist.destroy_process_group()\n"
    )
    assert "local-rank-argparse" in [f.rule for f in lint_file(tmp_path / "scripts" / "train.py").findings]


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


def test_local_rank_flag_replaced_in_the_script_for_an_options_module_that_reads_it(tmp_path):
    """options.py defines --local_rank and a set_dist(args) that picks the device from it; the script assigns
    `args.local_rank = dist.get_rank() % gpus` itself: the flag's value is replaced, in the module too."""
    from lintcase import lint_file

    (tmp_path / "options.py").write_text(
        HEAD + "import argparse\ndef parse():\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('--local_rank', type=int, default=-1)\n"
        "    return p.parse_args()\n\n"
        "def set_dist(args):\n    torch.cuda.set_device(args.local_rank)\n"
    )
    script = (
        HEAD + "from options import parse, set_dist\nargs = parse()\ndist.init_process_group('gloo')\n"
        "args.local_rank = dist.get_rank() % torch.cuda.device_count()\n"
        "torch.cuda.set_device(args.local_rank)\ndist.destroy_process_group()\n"
    )
    (tmp_path / "train.py").write_text(script)
    assert "local-rank-argparse" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(script.replace("args.local_rank = dist.get_rank()", "gpu = dist.get_rank()"))
    assert "local-rank-argparse" in [f.rule for f in lint_file(tmp_path / "train.py").findings]


# ------------------------------------------------------------------------ round 4: where the flag's value goes


def test_local_rank_flag_copied_into_a_config_attribute(tmp_path):
    """RepVGG / SimMIM: `config.LOCAL_RANK = args.local_rank` in a config module (yacs: `_C.LOCAL_RANK = 0` its
    default), then set_device(config.LOCAL_RANK): the attribute holds the flag's value, so under torchrun every rank
    takes the default. A copy from anything else (`dist.get_rank() % n`) gives each rank its own."""
    (tmp_path / "config.py").write_text(
        "class C:\n    pass\n_C = C()\n_C.LOCAL_RANK = 0\n"
        "def update(config, args):\n    config.LOCAL_RANK = args.local_rank\n    return config\n"
    )
    script = (
        HEAD + "import argparse\nimport config as cfg\np = argparse.ArgumentParser()\n"
        "p.add_argument('--local_rank', type=int, default=0)\nargs = p.parse_args()\n"
        "config = cfg.update(cfg._C, args)\ndist.init_process_group('nccl')\n"
        "torch.cuda.set_device(config.LOCAL_RANK)\ndist.destroy_process_group()\n"
    )
    (tmp_path / "train.py").write_text(script)
    assert "local-rank-argparse" in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "train.py").write_text(
        script.replace(
            "dist.init_process_group('nccl')\n",
            "dist.init_process_group('nccl')\nconfig.LOCAL_RANK = dist.get_rank() % torch.cuda.device_count()\n",
        )
    )
    assert "local-rank-argparse" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]


def test_local_rank_flag_stores_into_its_first_long_option():
    """ParallelWaveGAN: `add_argument("--rank", "--local_rank")` stores into args.rank (argparse's dest is the first
    long option), and set_device(args.rank) takes the default on every rank under torchrun."""
    src = (
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--rank', '--local_rank', type=int, default=0)\n"
        "args = p.parse_args()\ntorch.cuda.set_device(args.rank)\ndist.init_process_group('nccl')\n"
        "dist.destroy_process_group()\n"
    )
    assert "local-rank-argparse" in names(src)
    assert "local-rank-argparse" not in names(
        src.replace("args = p.parse_args()\n", "args = p.parse_args()\nargs.rank %= 8\n")
    )
