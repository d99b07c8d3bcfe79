"""One file written by every rank at once: unguarded-save, local-rank-save, shared-path-write (two ranks losing
lines for real), and the paths a caller hands over.

Each test is a minimal script that shows a mechanism and, most often, its twin that must behave the other way;
the section comments say which evaluation round (issue 28) a test came from."""

from __future__ import annotations

import textwrap

from conftest import torchrun
from lintcase import HEAD, PG_OPEN, SCRIPTS, SETUP, found, lint_file, lint_source, names, pair, rules_but_nccl, write
from lintcase import line_rules as rules
from lintcase import write_train as _write

# ----------------------------------------------------------------------------------- the first rules (was test_lint.py)


def test_a_method_called_only_under_a_guard_is_guarded():
    bad, good = pair(
        """
        class T:
            def _save(self):
                torch.save({}, "s.pt")
            def run(self, every):
                if every:
                    self._save()
        """,
        """
        class T:
            def _save(self):
                torch.save({}, "s.pt")
                print("saved")
            def run(self, every):
                if dist.get_rank() == 0 and every:
                    self._save()
        """,
    )
    assert bad == ["unguarded-save"] and good == []


def test_an_early_exit_guards_the_rest_of_the_function():
    bad, good = pair(
        """
        def finish(rank):
            if rank != 0:
                rank = 0
            torch.save({}, "f.pt")
        """,
        """
        def finish(rank):
            if rank != 0:
                return
            torch.save({}, "f.pt")
            print("saved")
        """,
    )
    assert bad == ["unguarded-save"] and good == []


def test_a_guard_stored_in_a_variable():
    bad, good = pair(
        """
        leader = int(os.environ["RANK"]) != 0
        if leader:
            torch.save({}, "x.pt")
        """,
        """
        leader = int(os.environ["RANK"]) == 0
        if leader:
            torch.save({}, "x.pt")
            print("saved")
        """,
    )
    assert bad == ["unguarded-save"] and good == []


def test_an_attribute_keeps_the_kind_of_rank_it_was_given():
    """self.gpu_id from LOCAL_RANK: a guard for printing, a mistake for saving; from RANK: fine for both."""
    local, global_ = pair(
        """
        class T:
            def __init__(self):
                self.gpu_id = int(os.environ["LOCAL_RANK"])
            def end(self):
                if self.gpu_id == 0:
                    print("done")
                    torch.save({}, "t.pt")
        T().end()
        """,
        """
        class T:
            def __init__(self):
                self.gpu_id = int(os.environ["RANK"])
            def end(self):
                if self.gpu_id == 0:
                    print("done")
                    torch.save({}, "t.pt")
        T().end()
        """,
    )
    assert local == ["local-rank-save"] and global_ == []


def test_saves_that_write_no_shared_file():
    bad, good = pair(
        """
        import io
        buffer = "state.pt"
        torch.save({}, buffer)
        """,
        """
        import io
        buffer = io.BytesIO()
        torch.save({}, buffer)
        torch.save({}, f"state-{dist.get_rank()}.pt")
        """,
    )
    assert bad == ["unguarded-save"] and good == []


# --------------------------------------------------------------- issue 28's multi-GPU rules (was test_lint_multigpu.py)


def test_two_ranks_writing_one_file_lose_one_ranks_lines(tmp_path, no_leftover_workers):
    script = tmp_path / "lint_shared_write.py"
    script.write_text((SCRIPTS / script.name).read_text())
    done = torchrun(script, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = (tmp_path / "run.log").read_text().splitlines()
    # each rank wrote 1000 lines from offset 0 of the same file: the file cannot hold both ranks' lines
    per_rank = [sum(line.startswith(f"rank {r} ") for line in lines) for r in (0, 1)]
    assert len(lines) == 1000 and per_rank != [1000, 1000] and sum(per_rank) == 1000


def test_files_every_rank_writes():
    assert (
        rules_but_nccl("""
        import json
        from torch.utils.tensorboard import SummaryWriter
        with open("config.json", "w") as f:
            json.dump({}, f)
        writer = SummaryWriter("runs/x")
        os.makedirs("runs/x")
        import torchvision
        data = torchvision.datasets.MNIST("data", download=True)
    """)
        == ["shared-path-write"] * 4
    )
    assert (
        rules_but_nccl("""
        rank = dist.get_rank()
        if rank == 0:
            open("config.json", "w").write("{}")
            os.makedirs("runs/x")
        open(f"rank{rank}.log", "w").write("")
        os.makedirs("runs/y", exist_ok=True)
        text = open("config.json").read()
    """)
        == []
    )


# ---------------------------------------------------------- issue 28, second held-out set (was test_lint_mechanisms.py)


def test_a_branch_no_caller_takes_is_not_run(tmp_path):
    script = write(
        tmp_path,
        {
            "train.py": """\
        import torch.distributed as dist
        from data import create_dataset
        dist.init_process_group("gloo")
        train = create_dataset("coco", {"root": "ann"})
        dist.destroy_process_group()
    """,
            "data/__init__.py": """\
        from data.datasets import Coco, Flickr

        def create_dataset(name, config):
            if name == "flickr":
                return Flickr(config["root"])
            elif name == "coco":
                return Coco(config["root"])
    """,
            "data/datasets.py": """\
        from torchvision.datasets.utils import download_url

        class Coco:
            def __init__(self, root):
                download_url("https://example.org/coco.json", root)

        class Flickr:
            def __init__(self, root):
                download_url("https://example.org/flickr.json", root)
    """,
        },
    )
    assert found(script) == {("datasets.py", 5, "shared-path-write")}


def test_a_path_the_caller_builds_is_the_callers_to_decide(tmp_path):
    script = write(
        tmp_path,
        {
            "train.py": """\
        import torch.distributed as dist
        from logs import Writer
        dist.init_process_group("gloo")
        suffix = "-rank%d" % dist.get_rank()
        name = "log" + suffix + ".txt"
        Writer(name).write("start")
        dist.destroy_process_group()
    """,
            "logs.py": """\
        class Writer:
            def __init__(self, path):
                self.path = path

            def write(self, text):
                with open(self.path, "a") as f:
                    f.write(text)
    """,
        },
    )
    assert found(script) == set()
    assert ("logs.py", 6, "shared-path-write") in found(script, show_all=True)
    script.write_text(script.read_text().replace("Writer(name)", 'Writer("log.txt")'))
    assert found(script) == {("logs.py", 6, "shared-path-write")}


def test_a_path_with_the_rank_formatted_in_is_per_rank():
    source = (
        HEAD
        + """\
        dist.init_process_group("gloo")
        result_file = os.path.join("out", "%s_rank%d.json" % ("val", dist.get_rank()))
        with open(result_file, "w") as f:
            f.write("{}")
        with open("out/" + str(dist.get_rank()) + ".txt", "w") as f:
            f.write("")
        dist.destroy_process_group()
    """
    )
    assert rules(source) == []
    assert rules(source.replace(", dist.get_rank()))", ", 0))")) == [(6, "shared-path-write")]


def test_a_save_helper_called_once_per_node_is_reported_at_that_call():
    source = (
        HEAD
        + """\
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
    )
    assert rules(source) == [(8, "unguarded-save"), (11, "local-rank-save")]
    assert rules(source.replace("rank % gpus == 0", "rank == 0")) == [(8, "unguarded-save")]


def test_a_file_opened_for_torch_save_is_left_to_the_save_rules():
    source = (
        HEAD
        + """\
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
    )
    assert rules(source, show_all=True) == [(12, "shared-path-write")]  # the notes, not the checkpoint


def test_any_call_that_writes_a_path_on_every_rank():
    source = (
        HEAD
        + """\
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
    )
    assert rules(source) == [
        (10, "shared-path-write"),
        (11, "shared-path-write"),
        (12, "shared-path-write"),
        (13, "shared-path-write"),
    ]
    # a name made from the process id (or the rank) with pathlib's / is a per-process path
    per_process = source.replace(
        'Path("run/config.json").write_text("{}")',
        'probe = Path("run") / f"probe-{os.getpid()}"; probe.write_text("{}")',
    )
    assert (11, "shared-path-write") not in rules(per_process) and len(rules(per_process)) == 3


# ------------------------------------------------------------- issue 28, third held-out set (was test_lint_heldout3.py)


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


def test_a_path_made_from_the_batch_is_possible():
    """One file per sample, named from the batch (`np.save(f"{out}/{names[i]}.npy", ...)`, a feature-extraction
    pass): each rank's own samples under a DistributedSampler, so lint cannot be sure they collide; the same save to
    a name made from the epoch or the batch's number alone is every rank's one path (FourCastNet's validation
    images, `experiment_dir/<i>/<epoch>.png`)."""
    per_sample = """
    import numpy as np
    from torch.utils.data import DataLoader, DistributedSampler
    dist.init_process_group("gloo")
    data = list(range(8))
    loader = DataLoader(data, sampler=DistributedSampler(data))
    for epoch in range(2):
        for batch_idx, batch in enumerate(loader):
            filename = f"features/{batch[0]}_features.npy"
            np.save(filename, {"x": batch})
    dist.destroy_process_group()
    """
    assert "shared-path-write" not in names(per_sample)
    [f] = [
        f
        for f in lint_source(HEAD + textwrap.dedent(per_sample), show_all=True).findings
        if f.rule == "shared-path-write"
    ]
    assert (f.rule, f.confidence) == ("shared-path-write", "possible") and "batch" in f.why
    per_epoch = per_sample.replace('f"features/{batch[0]}_features.npy"', 'f"features/{epoch}_features.npy"')
    assert "shared-path-write" in names(per_epoch)
    per_step = per_sample.replace('f"features/{batch[0]}_features.npy"', 'f"features/{batch_idx}_features.npy"')
    assert "shared-path-write" in names(per_step)  # enumerate's counter: the same on every rank
    payload = per_sample.replace('f"features/{batch[0]}_features.npy"', '"features/all.npy"')
    assert "shared-path-write" in names(payload)  # the batch is what is written, not where


def test_a_function_decorated_to_run_on_rank_0_writes_once(tmp_path):
    """`@master_only` (a project decorator whose wrapper calls the function under `if dist.get_rank() == 0:`, as
    mmcv's does; vaccslr's save_arg) or Lightning's `@rank_zero_only`: the write runs on rank 0 only. A decorator that
    calls it on every rank guards nothing."""
    utils = """
    import functools
    import torch.distributed as dist

    def master_only(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if dist.get_rank() == 0:
                return func(*args, **kwargs)
        return wrapper
    """
    script = """
    import torch.distributed as dist
    from utils import master_only

    @master_only
    def save_arg(cfg):
        with open("runs/config.yaml", "w") as f:
            f.write(str(cfg))

    dist.init_process_group("gloo")
    save_arg({"lr": 0.1})
    dist.destroy_process_group()
    """
    entry = write(tmp_path / "a", {"train.py": script, "utils.py": utils})
    assert "shared-path-write" not in {rule for _, _, rule in found(entry, show_all=True)}
    library = script.replace("from utils import master_only", "from lightning.pytorch.utilities import rank_zero_only")
    entry = write(tmp_path / "b", {"train.py": library.replace("@master_only", "@rank_zero_only")})
    assert "shared-path-write" not in {rule for _, _, rule in found(entry, show_all=True)}
    own = {
        "train.py": script.replace("master_only", "chief_only"),
        "utils.py": utils.replace("master_only", "chief_only"),
    }
    entry = write(tmp_path / "c", own)
    assert "shared-path-write" not in {rule for _, _, rule in found(entry, show_all=True)}  # known by its body
    own["utils.py"] = own["utils.py"].replace(
        "            if dist.get_rank() == 0:\n                return", "            return"
    )
    entry = write(tmp_path / "d", own)
    assert "shared-path-write" in {rule for _, _, rule in found(entry)}


def test_a_path_made_from_the_scripts_own_location_is_every_ranks(tmp_path):
    """`load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.json"))` whose helper rewrites
    the file: `__file__` is the same script on every rank, so the path is one (sanitizer round 14's stepcfg)."""
    script = """
    import json
    import os
    import torch.distributed as dist

    def load_config(path):
        with open(path, "w") as f:
            json.dump({"lr": 0.1}, f)

    dist.init_process_group("gloo")
    load_config(os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.json"))
    dist.destroy_process_group()
    """
    entry = write(tmp_path, {"train.py": script})
    assert "shared-path-write" in {rule for _, _, rule in found(entry)}


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
    assert (
        names(guarded.replace("with_tb = is_master()", "with_tb = bool(os.environ.get('TB'))")).count(
            "shared-path-write"
        )
        == 1
    )
    assert (
        names(
            guarded.replace(
                "(is_master() if only_master else is_local_master())", "(is_master() if only_master else True)"
            )
        ).count("shared-path-write")
        == 1
    )


# ----------------------------------------------------------------- issue 28, fourth pass (was test_lint_mechanisms4.py)


LOG_HELPERS = """
import os

def setup_logging(save_path, run_name):
    results_dir = os.path.join(save_path, run_name)
    os.makedirs(results_dir, exist_ok=True)
    return [save_path, results_dir]

def save_train_logging(arg, save_path):
    with open(f"{save_path}/train.log", "a") as f:
        f.write(f"{arg}\\n")
"""


LOG_MAIN = """
import argparse
import torch
import torch.distributed as dist
from utils import setup_logging, save_train_logging

def train(args):
    dist.init_process_group("gloo")
    results_logging = setup_logging(save_path=args.result_path, run_name=args.run_name)
    results_dir = results_logging[1]
    save_train_logging(arg=args, save_path=results_dir)
    dist.destroy_process_group()

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--result_path", default="results")
    parser.add_argument("--run_name", default="run")
    train(parser.parse_args())
"""


def _shared(path, show_all=False):
    from lintcase import lint_file

    return [
        (f.line, f.confidence) for f in lint_file(path, show_all=show_all).findings if f.rule == "shared-path-write"
    ]


def test_path_parameter_given_a_config_path_through_a_helper_is_shared(tmp_path):
    """`save_train_logging(save_path=results_dir)` where results_dir = setup_logging(args.result_path, ...)[1]:
    by data flow in the caller the path is the same on every rank, so the helper's append is a race; the script
    itself calls it on every rank, so it is sure as in the script. Called only from another module's function,
    whether every rank runs it shows in a run: possible (Rule.modules_at_run)."""
    from ddplab.lint import lint_file

    script = _write(tmp_path / "a", {"train.py": LOG_MAIN, "utils.py": LOG_HELPERS})
    assert [c for _, c in _shared(script)] == ["sure"]
    assert [f.why for f in lint_file(script).findings if f.rule == "shared-path-write"] == [
        "called on every rank (train.py:11)"
    ]
    helpers = (
        LOG_HELPERS + "\ndef log_run(args, results_dir):\n    save_train_logging(arg=args, save_path=results_dir)\n"
    )
    through = LOG_MAIN.replace("save_train_logging(arg=args, save_path=results_dir)", "log_run(args, results_dir)")
    script = _write(tmp_path / "b", {"train.py": through.replace("save_train_logging", "log_run"), "utils.py": helpers})
    assert _shared(script) == [] and [c for _, c in _shared(script, show_all=True)] == ["possible"]


def test_path_parameter_stamped_per_process_stays_possible(tmp_path):
    """The same call where the helper stamps the folder with the clock, or the caller passes the rank's own folder:
    the paths may differ per rank, so the finding stays possible (hidden by default)."""
    stamped = LOG_HELPERS.replace(
        "os.path.join(save_path, run_name)", "os.path.join(save_path, run_name + time.strftime('%H%M%S'))"
    )
    script = _write(tmp_path / "b", {"train.py": LOG_MAIN, "utils.py": "import time\n" + stamped})
    assert _shared(script) == [] and [c for _, c in _shared(script, show_all=True)] == ["possible"]
    per_rank = LOG_MAIN.replace(
        "results_dir = results_logging[1]", "results_dir = os.path.join(results_logging[1], str(dist.get_rank()))"
    )
    script = _write(tmp_path / "c", {"train.py": "import os\n" + per_rank, "utils.py": LOG_HELPERS})
    assert _shared(script) == []


# ------------------------------------------------------------------ issue 28, fifth pass (was test_lint_mechanisms5.py)


def test_numpy_text_file_is_not_a_checkpoint_save():
    """np.savetxt under a local-rank test writes a data file (the shared-write rule's business), not a checkpoint."""
    src = (
        "import numpy as np\n" + SETUP + "model = torch.nn.Linear(2, 2)\nif rank == 0:\n"
        "    np.savetxt('iter.txt', [1, 2])\ndist.destroy_process_group()\n"
    )
    assert "local-rank-save" not in names(src)
    assert "local-rank-save" in names(
        src.replace("np.savetxt('iter.txt', [1, 2])", "torch.save(model.state_dict(), 'm.pt')")
    )


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
    from lintcase import lint_file

    (tmp_path / "helpers.py").write_text(
        "def f():\n    return 1\n\nif __name__ == '__main__':\n    open('demo.txt', 'w').write('x')\n"
    )
    (tmp_path / "train.py").write_text(
        HEAD + "import helpers\n" + SETUP + "helpers.f()\ndist.destroy_process_group()\n"
    )
    assert "shared-path-write" not in [f.rule for f in lint_file(tmp_path / "train.py").findings]
    (tmp_path / "helpers.py").write_text("def f():\n    open('demo.txt', 'w').write('x')\n")
    assert "shared-path-write" in [f.rule for f in lint_file(tmp_path / "train.py").findings]


# ------------------------------------------------------------------ issue 28, sixth pass (was test_lint_mechanisms6.py)


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


def test_parameter_every_caller_fills_with_the_rank(tmp_path):
    """`setup_logger(name, save_dir, distributed_rank)` in another module returns early when distributed_rank > 0,
    and the script passes get_rank(): what follows runs on rank 0 only (makedirs without exist_ok is fine)."""
    (tmp_path / "logger.py").write_text(
        textwrap.dedent("""
    import os
    def setup_logger(name, save_dir, distributed_rank):
        if distributed_rank > 0:
            return None
        if not os.path.exists(save_dir):
            os.makedirs(save_dir)
    """)
    )
    script = (
        HEAD + "from logger import setup_logger\ndist.init_process_group('gloo')\n"
        "setup_logger('x', 'logs', dist.get_rank())\ndist.destroy_process_group()\n"
    )
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


def test_a_save_known_by_its_name_is_reported_where_the_local_rank_test_is():
    """`def save_model(model, epoch): model.save(epoch)` (a method written in another file), called under
    `local_rank == 0`: the finding is at the call under the test, which is what to change (round 10, ACGPN)."""
    source = HEAD + textwrap.dedent(
        """\
        dist.init_process_group("gloo")
        local_rank = int(os.environ["LOCAL_RANK"])

        def save_model(model, epoch):
            model.save(epoch)

        if local_rank == 0:
            save_model(torch.nn.Linear(2, 2), 1)
        dist.destroy_process_group()
    """
    )
    assert rules(source) == [(11, "local-rank-save")]


def test_a_branch_the_distributed_run_refuses_runs_in_one_process():
    """YOLOv5's train.py: `assert not opt.evolve` where the group is made (evolution is not compatible with DDP), and
    the evolution, which writes one file, under `if not opt.evolve: ... else:`: that write runs in one process. The
    same script without the assert writes the file from every rank."""
    source = (
        HEAD
        + """\
        import argparse
        LOCAL_RANK = int(os.getenv("LOCAL_RANK", -1))
        opt = argparse.ArgumentParser().parse_args()
        if LOCAL_RANK != -1:
            assert not opt.evolve, "--evolve is not compatible with DDP training"
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        if not opt.evolve:
            pass
        else:
            with open("evolve_population.yaml", "w") as f:
                f.write("population")
        if LOCAL_RANK != -1:
            dist.destroy_process_group()
    """
    )
    assert rules(source) == []
    unchecked = source.replace('    assert not opt.evolve, "--evolve is not compatible with DDP training"\n', "")
    assert unchecked != source and rules(unchecked) == [(12, "shared-path-write")]


ZERO_FIRST = {
    "train.py": """\
        import os
        import torch
        import torch.distributed as dist
        from utils.datasets import create_dataloader

        def main():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
            rank = dist.get_rank()
            loader = create_dataloader("data/", rank)
            dist.destroy_process_group()

        main()
    """,
    "utils/__init__.py": "",
    "utils/torch_utils.py": """\
        from contextlib import contextmanager
        import torch

        @contextmanager
        def torch_distributed_zero_first(local_rank):
            if local_rank not in [-1, 0]:
                torch.distributed.barrier()
            yield
            if local_rank == 0:
                torch.distributed.barrier()
    """,
    "utils/datasets.py": """\
        import os
        import torch
        from utils.torch_utils import torch_distributed_zero_first

        class Labels:
            def __init__(self, path):
                cache = path + "labels.cache"
                if not os.path.exists(cache):
                    torch.save({"labels": []}, cache)

        def create_dataloader(path, rank):
            with torch_distributed_zero_first(rank):
                dataset = Labels(path)
            return torch.utils.data.DataLoader(dataset)
    """,
}


def test_a_write_under_a_context_that_lets_rank_0_through_first_is_not_every_rank_at_once(tmp_path):
    """YOLOv7's labels cache: Labels(path) saves the cache, built under `with torch_distributed_zero_first(rank):`
    (a @contextmanager whose ranks wait at a barrier around its yield): rank 0 writes it first, the others find it
    there. Not said by default (whether the others write again shows in a run); without the `with`, every rank
    saves at once."""
    train = write(tmp_path / "first", ZERO_FIRST)
    assert not {rule for _, _, rule in found(train) if rule == "unguarded-save"}
    at_once = dict(ZERO_FIRST)
    at_once["utils/datasets.py"] = ZERO_FIRST["utils/datasets.py"].replace(
        "with torch_distributed_zero_first(rank):\n                dataset", "if True:\n                dataset"
    )
    assert at_once != ZERO_FIRST
    assert ("datasets.py", 9, "unguarded-save") in found(write(tmp_path / "at_once", at_once))


def test_an_assert_that_no_launcher_runs_makes_the_rest_one_process():
    """YOLOv7's --evolve branch: `assert opt.local_rank == -1, 'DDP mode not implemented for --evolve'` (a rank of
    -1: no launcher set it), then prints: one process prints them."""
    source = (
        HEAD
        + """\
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--local_rank", type=int, default=-1)
        p.add_argument("--evolve", action="store_true")
        opt = p.parse_args()
        if opt.local_rank != -1:
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        if opt.evolve:
            assert opt.local_rank == -1, "DDP mode not implemented for --evolve"
            print("evolving")
        if opt.local_rank != -1:
            dist.destroy_process_group()
    """
    )
    assert [r for r in rules(source) if r[1] == "unguarded-print"] == []
    unchecked = source.replace('    assert opt.local_rank == -1, "DDP mode not implemented for --evolve"\n', "")
    assert unchecked != source and [r for r in rules(unchecked) if r[1] == "unguarded-print"] == [
        (12, "unguarded-print")
    ]


def test_a_write_rank_0_makes_first_behind_barriers_is_not_sure():
    """`if local_rank not in [-1, 0]: dist.barrier()` ... `if local_rank == 0: dist.barrier()` (the older
    transformers examples): rank 0 makes the folder first and the others find it made. Whether they write again
    shows in a run: possible, not sure. Without the barriers every rank races in makedirs."""
    source = """\
import os
import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")
if local_rank not in [-1, 0]:
    dist.barrier()
if not os.path.exists("output"):
    os.makedirs("output")
if local_rank == 0:
    dist.barrier()
dist.destroy_process_group()
"""

    def writes(text: str, show_all: bool) -> list[str]:
        found = lint_source(text, "train.py", show_all=show_all).findings
        return [f.confidence for f in found if f.rule == "shared-path-write"]

    assert writes(source, show_all=False) == []
    assert writes(source, show_all=True) == ["possible"]
    bare = source.replace("if local_rank not in [-1, 0]:\n    dist.barrier()\n", "")
    assert writes(bare.replace("if local_rank == 0:\n    dist.barrier()\n", ""), show_all=False) == ["sure"]


def test_local_rank_zero_and_another_zero_test_is_not_sure_to_be_every_node():
    """XLM: `is_master = node_id == 0 and local_rank == 0`, then `if not is_master: return` before the save: the
    other `== 0` test may well be the node's index, so the local rank alone does not say every node saves (round 11).
    Without it, `local_rank == 0` alone, the save is one per node."""
    source = HEAD + textwrap.dedent(
        """\
        dist.init_process_group("gloo")
        local_rank = int(os.environ["LOCAL_RANK"])
        node_id = int(os.environ["GROUP_RANK"])
        is_master = node_id == 0 and local_rank == 0

        def save(model):
            if not is_master:
                return
            torch.save(model.state_dict(), "model.pt")

        save(torch.nn.Linear(2, 2))
        dist.destroy_process_group()
    """
    )
    assert "local-rank-save" not in names(source)
    assert "local-rank-save" in names(source.replace("node_id == 0 and ", ""))


def test_a_path_removed_by_every_rank_is_a_race_an_archive_written_by_every_rank_too():
    """Issue 39 round 13: keeping the last N checkpoints by deleting the oldest on every rank (the second rank's
    os.remove finds the file gone: FileNotFoundError), and a source-code archive made by every rank into one zip."""
    bad, good = pair(
        """
        os.remove("ckpt/old.pt")
        """,
        """
        if dist.get_rank() == 0:
            os.remove("ckpt/old.pt")
        try:
            os.unlink("ckpt/stale.lock")
        except FileNotFoundError:
            pass
        shutil.rmtree("tmp_cache", ignore_errors=True)
        """,
        PG_OPEN + "import shutil\n",
    )
    assert bad == ["shared-path-write"] and good == []
    archive = (
        PG_OPEN + 'import shutil\nshutil.make_archive("out/source_code", "zip", ".")\ndist.destroy_process_group()\n'
    )
    assert rules_but_nccl(archive, setup="") == ["shared-path-write"]
