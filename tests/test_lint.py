"""ddplab lint: every rule on a script that makes every mistake, clean verdicts on correct scripts (the recipes,
what `ddplab new` writes), and the tricky cases that must not fire."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from conftest import cli
from ddplab.diagnose.lint import lint_file, lint_source

HERE = Path(__file__).parent
SRC = HERE.parent / "src" / "ddplab"
BAD = HERE / "scripts" / "lint_bad.py"


def expected(path: Path) -> set[tuple[int, str]]:
    """(line, rule) for every `# expect: RULE [RULE...]` comment in the file."""
    found = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"# expect: ([a-z0-9-]+(?: [a-z0-9-]+)*)\s*$", line)
        if m:
            found |= {(number, rule) for rule in m.group(1).split()}
    return found


def rules(setup: str, source: str) -> list[str]:
    return [f.rule for f in lint_source(setup + textwrap.dedent(source)).findings]


def test_every_mistake_is_found_on_its_line_and_nothing_else():
    result = lint_file(BAD)
    assert {(f.line, f.rule) for f in result.findings} == expected(BAD)
    assert result.backend == "nccl" and not result.ok
    assert all(f.message and f.fix for f in result.findings)


def test_all_rules_exist_in_the_bad_script():
    fired = {rule for _, rule in expected(BAD)}
    assert {"sets-master-env", "nccl-hardcoded", "hardcoded-cuda-device", "unseeded-random-data",
            "sampler-no-set-epoch", "shuffle-with-sampler", "save-ddp-state-dict", "unguarded-save",
            "unguarded-print", "load-no-map-location", "no-destroy", "ddp-no-device-ids", "local-rank-save"} <= fired


CLEAN = sorted([HERE / "scripts" / "good_ddp.py", *SRC.glob("recipes/*.py"), *SRC.glob("train/*.py")])


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_correct_scripts_lint_clean(path):
    result = lint_file(path)
    assert result.findings == [], [(f.line, f.rule, f.message) for f in result.findings]


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_the_script_ddplab_new_writes_lints_clean(task):
    from ddplab.commands.new import render_script

    result = lint_source(render_script(task), "train.py")
    assert result.findings == [], [(f.line, f.rule, f.message) for f in result.findings]


def test_cli_exit_codes_and_json(tmp_path):
    ran = cli("lint", str(BAD), "--json")
    assert ran.code == 1
    data = ran.json()
    assert {(f["line"], f["rule"]) for f in data["findings"]} == expected(BAD)
    assert data["errors"] == sum(f["level"] == "error" for f in data["findings"]) > 0

    ran = cli("lint", str(HERE / "scripts" / "good_ddp.py"))
    assert ran.code == 0 and "no DDP mistake found" in ran.out

    warnings_only = tmp_path / "warn.py"
    warnings_only.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    ran = cli("lint", str(warnings_only))
    assert ran.code == 0 and "[no-destroy]" in ran.out

    broken = tmp_path / "broken.py"
    broken.write_text("def f(:\n")
    for path in (broken, tmp_path / "missing.py"):
        ran = cli("lint", str(path))
        assert ran.code == 2 and "Traceback" not in ran.err and len(ran.err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------------- must not fire

PG = "import os\nimport torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"


def test_launcher_env_only_as_a_fallback_is_fine():
    assert rules(PG, """
        os.environ.setdefault("MASTER_PORT", "29500")
        if "MASTER_ADDR" not in os.environ:
            os.environ["MASTER_ADDR"] = "127.0.0.1"
        dist.destroy_process_group()
    """) == []


def test_rank_guards_in_their_usual_shapes():
    assert rules(PG, """
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
    """) == []


def test_collectives_paired_across_a_rank_branch_are_fine():
    assert rules(PG, """
        t = torch.ones(1)
        if dist.get_rank() == 0:
            out = [torch.zeros(1) for _ in range(dist.get_world_size())]
            dist.gather(t, gather_list=out, dst=0)
        else:
            dist.gather(t, dst=0)
        dist.destroy_process_group()
    """) == []


def test_early_return_before_a_collective_hangs():
    assert rules(PG, """
        def sync(rank):
            if rank != 0:
                return
            dist.barrier()
        dist.destroy_process_group()
    """) == ["collective-in-rank-branch"]


def test_cuda_picked_from_local_rank_is_fine():
    assert rules(PG.replace("'gloo'", "'nccl' if torch.cuda.is_available() else 'gloo'"), """
        from torch.nn.parallel import DistributedDataParallel as DDP
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        model = DDP(torch.nn.Linear(1, 1).cuda(), device_ids=[local_rank])
        state = torch.load("m.pt", map_location=f"cuda:{local_rank}")
        dist.destroy_process_group()
    """) == []


def test_hard_coded_rank_and_init_method_are_errors():
    found = lint_source(textwrap.dedent("""
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="tcp://10.0.0.1:23456", rank=0, world_size=2)
        dist.destroy_process_group()
    """))
    assert sorted(f.rule for f in found.findings) == ["sets-master-env", "sets-rank-env"]
    assert not found.ok


def test_the_guides_tutorial_example_shows_its_quiet_mistakes():
    """docs/examples/tutorial_ddp.py: the script learners copy; random data used straight in the loop, no Dataset."""
    from pathlib import Path

    from conftest import cli

    script = Path(__file__).parents[1] / "docs" / "examples" / "tutorial_ddp.py"
    ran = cli("lint", "--json", str(script))
    assert ran.code == 1
    rules = sorted((f["rule"], f["line"]) for f in ran.json()["findings"])
    for expected in [("sets-master-env", 13), ("sets-master-env", 14), ("unseeded-random-data", 18),
                     ("save-ddp-state-dict", 28), ("unguarded-save", 28)]:
        assert expected in rules, rules
