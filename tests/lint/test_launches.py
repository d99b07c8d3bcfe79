"""A project's own launch commands (its shell scripts, Slurm files, README) decide what a line that depends on them
means: one writer per machine, the global rank as a device, the local rank as the rank are right on one machine and
wrong past it; a `--local_rank` flag is passed by the legacy launcher and not by torchrun."""

from __future__ import annotations

import textwrap

from lintcase import write

from ddplab.lint import lint_file, lint_source
from ddplab.lint.launches import Launches, of_script

SAVES = """\
    import os
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = DDP(torch.nn.Linear(2, 2))
    if local_rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
    dist.destroy_process_group()
"""

FLAG = """\
    import argparse
    import torch
    import torch.distributed as dist
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    dist.init_process_group("nccl")
    dist.destroy_process_group()
"""


def _verdict(folder, rule):
    """(confidence, why) of the script's one finding of `rule`."""
    result = lint_file(folder / "train.py", show_all=True)
    (finding,) = [f for f in result.findings if f.rule == rule]
    return finding.confidence, finding.why


def test_one_writer_per_machine_is_possible_where_the_project_launches_on_one(tmp_path):
    one = write(tmp_path / "one", {"train.py": SAVES, "run.sh": "torchrun --nproc_per_node=4 train.py\n"}).parent
    assert _verdict(one, "local-rank-save") == (
        "possible",
        "the project's launch is on one machine (run.sh:1), where local rank 0 is the only writer",
    )
    # a machine count other than 1 anywhere among the script's launches (continued lines joined, Slurm's too) makes
    # it a mistake again; so does a project that says nothing of its launch
    two = "torchrun \\\n  --nnodes=2 --nproc_per_node=4 \\\n  train.py\n"
    ranked = "python -m torch.distributed.launch --nproc_per_node=8 --node_rank=$RANK train.py\n"
    for files in ({"run.sh": two}, {"job.slurm": "#SBATCH --nodes=4\nsrun python train.py\n"}, {"a.sh": ranked}, {}):
        folder = write(tmp_path / str(len(list(tmp_path.iterdir()))), {"train.py": SAVES, **files}).parent
        assert _verdict(folder, "local-rank-save")[0] == "sure", files
    assert of_script(write(tmp_path / "t", {"train.py": SAVES, "run.sh": two})).machines == "run.sh:1"


def test_a_launch_of_another_script_says_nothing_of_this_one(tmp_path):
    files = {"train.py": SAVES, "eval.py": "print(1)\n", "README.md": "torchrun --nproc_per_node=2 eval.py\n"}
    assert _verdict(write(tmp_path, files).parent, "local-rank-save")[0] == "sure"


def test_the_local_rank_flag_is_possible_where_the_legacy_launcher_passes_it(tmp_path):
    readme = "Train:\n\n    python -m torch.distributed.launch --nproc_per_node=8 train.py\n"
    legacy = write(tmp_path / "legacy", {"train.py": FLAG, "README.md": readme}).parent
    # the README's name in any case (round 36's PytorchOCR: readme.md), found up from a script in a folder of its own
    lower = write(
        tmp_path / "lower", {"tools/train.py": FLAG, "readme.md": readme.replace(" train.py", " tools/train.py")}
    )
    assert _verdict(lower.parent, "local-rank-argparse")[0] == "possible"
    assert _verdict(legacy, "local-rank-argparse") == (
        "possible",
        "the project launches with torch.distributed.launch (README.md:3), which passes the flag",
    )
    both = write(
        tmp_path / "both", {"train.py": FLAG, "README.md": readme + "or: torchrun --nproc_per_node=8 train.py\n"}
    )
    assert _verdict(both.parent, "local-rank-argparse")[0] == "sure"


def test_source_without_a_file_reads_no_launch(tmp_path, monkeypatch):
    """Text handed over as source has no project: the folder it is linted from is not read as one."""
    write(tmp_path, {"README.md": "torchrun --nproc_per_node=2 train.py\n"})
    monkeypatch.chdir(tmp_path)
    findings = lint_source(textwrap.dedent(SAVES), "train.py", show_all=True).findings
    (finding,) = [f for f in findings if f.rule == "local-rank-save"]
    assert finding.confidence == "sure"


def test_a_script_with_no_project_around_it_reads_its_own_folders_not_its_neighbours(tmp_path):
    """No README or project file up from the script: its own folders count (CenterLineDet's bash/*.bash), a folder
    that is a project of its own beside it (another clone in the same /tmp) does not."""
    script = write(
        tmp_path,
        {
            "train.py": SAVES,
            "bash/train.bash": "python -m torch.distributed.launch --nproc_per_node=4 train.py\n",
            "other/README.md": "torchrun --nnodes=2 train.py\n",
        },
    )
    assert of_script(script) == Launches(legacy="bash/train.bash:1", one_machine="bash/train.bash:1")


def test_a_file_whose_name_begins_with_readme_is_no_readme(tmp_path):
    """A log named readme_try.log beside the script's folder does not make the folder above a project: its
    neighbours' notes (a note naming torch.distributed.launch) are not the script's launch."""
    script = write(
        tmp_path,
        {
            "corpus/train.py": SAVES,
            "readme_try.log": "ddplab check\n",
            "briefs/round.md": "python -m torch.distributed.launch --nproc_per_node=2 train.py\n",
        },
    )
    assert of_script(script) == Launches()
    translated = write(tmp_path / "p", {"train.py": SAVES, "README.zh-CN.md": "torchrun --nnodes=1 train.py\n"})
    assert of_script(translated) == Launches(elastic="README.zh-CN.md:1", one_machine="README.zh-CN.md:1")
