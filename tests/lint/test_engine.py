"""What the engine does for every rule: rank-0 guards in any boolean form, a finding's line, the project's own names
from pyproject.toml, SARIF output, the one line that points to a run where lint is unsure. In process (fast tier)."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from conftest import refused
from lintcase import lint_file, lint_source

from ddplab.cli import main
from ddplab.lint import vocabulary
from ddplab.lint.rules import all_rules
from ddplab.lint.scriptread import GLOBAL_RANK_NAMES

SAVE = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
use_ddp = True
model = DDP(torch.nn.Linear(2, 2))
if {test}:
    torch.save(model.module.state_dict(), "model.pt")
dist.destroy_process_group()
"""


def _rules(source: str, **kw) -> list[str]:
    return sorted(f.rule for f in lint_source(source, "train.py", **kw).findings)


@pytest.mark.parametrize(
    "test",
    [
        "(not use_ddp) or rank == 0",
        "rank == 0 or not use_ddp",
        "not use_ddp or dist.get_rank() == 0",
        "not dist.is_initialized() or rank == 0",
        "rank == 0 and use_ddp",
        "not (rank != 0)",
        "not (use_ddp and rank != 0)",
        "(rank == 0 or not use_ddp) and model is not None",
        "use_ddp and (rank == 0 or rank is None)",
        "not use_ddp or not rank",
        "(rank == 0) == True",  # round 35's PointHMR: `if is_main_process()==True:`
        "(rank != 0) is False",
    ],
)
def test_a_rank0_guard_is_recognised_in_any_boolean_form(test):
    assert "unguarded-save" not in _rules(SAVE.format(test=test))


@pytest.mark.parametrize(
    "test",
    [
        "use_ddp or rank == 0",
        "rank != 0 or not use_ddp",
        "rank >= 0",
        "not (rank == 0 or not use_ddp)",
        "(rank == 0) == False",
        "(rank == 0) != True",
    ],
)
def test_a_test_that_holds_on_other_ranks_is_no_guard(test):
    assert "unguarded-save" in _rules(SAVE.format(test=test))


def test_a_finding_names_the_first_line_of_its_statement():
    source = SAVE.format(test="rank == 0").replace(
        'torch.save(model.module.state_dict(), "model.pt")',
        'torch.save(\n        model.state_dict(),\n        "m.pt",\n    )',
    )
    found = [f for f in lint_source(source, "train.py").findings if f.rule == "save-ddp-state-dict"]
    assert [f.line for f in found] == [10]  # the call is on line 10; model.state_dict() on 11


def _project(tmp_path: Path, pyproject: str | None, body: str) -> Path:
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    (tmp_path / "src").mkdir()
    script = tmp_path / "src" / "train.py"
    script.write_text(textwrap.dedent(body))
    return script


OWN_NAMES = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
proc_id = launcher_info()["id"]  # nothing lint knows a rank by
model = torch.nn.Linear(2, 2)
write_ckpt(model.state_dict(), "a.pt")
if proc_id == 0:
    torch.save(model.state_dict(), "b.pt")
dist.destroy_process_group()
"""


def test_a_projects_own_names_come_from_its_pyproject(tmp_path):
    before = set(GLOBAL_RANK_NAMES)
    (tmp_path / "plain").mkdir()
    plain = _project(tmp_path / "plain", None, OWN_NAMES)
    assert [(f.line, f.rule) for f in lint_file(plain).findings] == [(9, "unguarded-save")]  # proc_id is no rank
    named = tmp_path / "named"
    named.mkdir()
    script = _project(
        named,
        """\
        [project]
        name = "x"
        [tool.ddplab.lint]
        rank-names = ["proc_id"]
        save-calls = ["write_ckpt"]
        """,
        OWN_NAMES,
    )
    assert [(f.line, f.rule) for f in lint_file(script).findings] == [(7, "unguarded-save")]
    assert set(GLOBAL_RANK_NAMES) == before  # for that lint only


@pytest.mark.parametrize(
    "table, says",
    [
        ("[tool.ddplab.lint]\nsave-call = ['x']\n", "has no key 'save-call': use one of rank-names"),
        ("[tool.ddplab.lint]\nsave-calls = 'x'\n", 'save-calls must be a list of names, e.g. save-calls = ["name"]'),
        ("[tool.ddplab.lint\nsave-calls = ['x']\n", "not valid TOML"),
    ],
)
def test_a_wrong_lint_table_is_one_line_and_exit_2(tmp_path, capsys, table, says):
    script = _project(tmp_path, table, OWN_NAMES)
    assert says in refused(capsys, "lint", str(script))


def test_without_a_toml_reader_the_table_is_skipped_with_a_note(tmp_path, monkeypatch):
    """Python 3.10 has no tomllib: without tomli installed the table is not read, and the output says so."""
    monkeypatch.setattr(vocabulary, "_toml", lambda: None)
    script = _project(tmp_path, "[tool.ddplab.lint]\nsave-calls = ['write_ckpt']\n", OWN_NAMES)
    result = lint_file(script)
    assert [f.line for f in result.findings] == [9]
    assert len(result.notes) == 1 and "pip install tomli" in result.notes[0]


def _sarif(capsys, *args: str) -> tuple[int, dict]:
    code = main(["lint", "--format", "sarif", *args])
    return code, json.loads(capsys.readouterr().out)


def test_sarif_is_a_minimal_valid_2_1_0_log(tmp_path, capsys):
    odd = tmp_path / "my run [1]"
    odd.mkdir()
    script = odd / "train.py"
    script.write_text(Path(__file__).parents[1].joinpath("scripts", "lint_bad.py").read_text())
    code, log = _sarif(capsys, str(script))
    assert code == 1  # the exit code is the text output's: errors found
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.id for r in all_rules()]
    assert all(r["shortDescription"]["text"] and r["help"]["text"] for r in rules)
    assert run["results"]
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        assert res["level"] in ("error", "warning", "note") and res["message"]["text"]
        (loc,) = res["locations"]
        assert loc["physicalLocation"]["region"]["startLine"] >= 1
        assert " " not in loc["physicalLocation"]["artifactLocation"]["uri"]  # a URI: escaped
        assert "%5B1%5D/train.py" in loc["physicalLocation"]["artifactLocation"]["uri"]


def test_sarif_and_json_together_are_refused(capsys):
    assert "--json and --format sarif" in refused(capsys, "lint", "--json", "--format", "sarif", "x.py")


def test_where_lint_is_unsure_one_line_says_a_run_will_show_it(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""\
        import torch.distributed as dist

        def log(path):
            with open(path, "a") as f:
                f.write("step\\n")

        def main(path):
            dist.init_process_group("gloo")
            log(path)
            dist.destroy_process_group()
        """)
    )
    assert main(["lint", str(script)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "    1 possible finding(s) not shown: --all shows them; run it under `ddplab launch` to see "
        "(several ranks writing one path)"
    )


def test_the_engine_names_no_rule():
    """Rules are units: what a rule needs from the engine is said in its module, so the engine (the package's
    __init__) holds no rule id."""
    ids = {r.id for r in all_rules()}
    engine = Path(__file__).parents[2] / "src" / "ddplab" / "lint" / "__init__.py"
    literals = {n.value for n in ast.walk(ast.parse(engine.read_text())) if isinstance(n, ast.Constant)}
    assert not ids & literals


def test_the_pre_commit_hook_runs_lint_on_the_files_a_commit_changes(capsys):
    """.pre-commit-hooks.yaml's entry, given file names as pre-commit gives them: the commit fails on an error."""
    root = Path(__file__).parents[2]
    hooks = (root / ".pre-commit-hooks.yaml").read_text()
    entries = {line.split(":", 1)[1].strip() for line in hooks.splitlines() if line.strip().startswith("entry:")}
    assert entries == {"ddplab lint"}
    assert {"- id: ddplab-lint", "- id: ddplab-lint-system", "  types: [python]"} <= set(hooks.splitlines())
    command = entries.pop().split()[1:]
    bad, good = root / "tests" / "scripts" / "lint_bad.py", root / "tests" / "scripts" / "good_ddp.py"
    assert main([*command, str(good)]) == 0
    assert main([*command, str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "good_ddp.py: OK" in out and "lint_bad.py:" in out


MODEL = """\
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)


def test():
    print(Net())


if __name__ == "__main__":
    test()
"""
SIBLING = """\
import torchvision


class Augment:
    pass


def prepare():
    return torchvision.datasets.MNIST("data", download=True)
"""
ENTRY = """\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from model import Net
from sibling import Augment, prepare

dist.init_process_group("gloo")
model = DDP(Net())
aug = Augment()
{call}
dist.destroy_process_group()
"""


@pytest.mark.parametrize("call, found", [("", []), ("data = prepare()", [("sibling.py", 9, "shared-path-write")])])
def test_imported_modules_count_only_where_the_script_calls_them(tmp_path, call, found):
    """A model file's own test() and its prints, a sibling script's download: code the entry never runs says nothing;
    the same download called by the script on every rank is a finding, in its file."""
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "sibling.py").write_text(SIBLING)
    (tmp_path / "train.py").write_text(ENTRY.format(call=call))
    result = lint_file(tmp_path / "train.py")
    assert [(Path(f.path or "train.py").name, f.line, f.rule) for f in result.findings] == found


SWITCHED = """\
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--multiprocessing-distributed", action="store_true")
parser.add_argument("--world-size", type=int, default=1)
args = parser.parse_args()
args.rank = 0
args.distributed = args.world_size > 1 or args.multiprocessing_distributed
if {maker}:
    dist.init_process_group("gloo")
model = torch.nn.Linear(2, 2)
if not args.multiprocessing_distributed or args.rank == 0:
    torch.save(model.state_dict(), "model.pt")
if dist.is_initialized():
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("maker, found", [("args.multiprocessing_distributed", []), ("args.distributed", [16])])
def test_the_switch_every_init_process_group_sits_under_is_the_group(maker, found):
    """`not X or rank == 0` is rank 0 or one process when X is what makes the process group; where another switch
    makes it (the pytorch/examples imagenet template under torchrun: `args.distributed`, X False), every rank saves."""
    result = lint_source(SWITCHED.format(maker=maker), "train.py")
    assert [f.line for f in result.findings if f.rule == "unguarded-save"] == found


# ------------------------------------------------------------------ issue 39 point 2: the default output is sure


def _write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder / next(iter(files))


def test_an_opt_in_rules_findings_are_shown_with_all_only(tmp_path):
    """A rule whose findings were too often wrong on the benchmark sets (Rule.opt_in) reads the script as before,
    but its findings are possible, saying why: the default output leaves them out and counts them."""
    from ddplab.lint import lint_file as real
    from ddplab.lint.rules import by_id

    script = _write(
        tmp_path,
        {
            "t.py": "import torch\nimport torch.distributed as dist\n"
            "dist.init_process_group('gloo')\nx = torch.randn(8, 4)\nm = x.cuda(0)\n"
            "dist.destroy_process_group()\n"
        },
    )
    rule = by_id()["hardcoded-cuda-device"]
    assert rule.opt_in
    shown = real(script)
    assert "hardcoded-cuda-device" not in {f.rule for f in shown.findings}
    assert "hardcoded-cuda-device" in shown.possible_rules
    [f] = [f for f in real(script, show_all=True).findings if f.rule == "hardcoded-cuda-device"]
    assert (f.confidence, f.why) == ("possible", rule.opt_in)


def test_a_module_print_is_sure_where_the_script_calls_it_and_possible_under_its_test(tmp_path, capsys):
    """A print on every rank is sure in the script, and in an imported module's function that the script itself calls
    on every rank (round 32's FSRE, pachyderm's engine); the same call under a test of the script's own (`if
    args.ssl:`, a branch a config may never take) is possible (whether it runs shows in a run), and the summary points
    to the sanitizer."""
    from ddplab.lint import AT_RUN
    from ddplab.lint import lint_file as real

    entry = (
        "import sys\nimport torch.distributed as dist\nfrom helpers import report\ndist.init_process_group('gloo')\n"
        "print('start')\nreport()\ndist.destroy_process_group()\n"
    )
    script = _write(tmp_path, {"t.py": entry, "helpers.py": "def report():\n    print('done')\n"})
    assert [(f.path and Path(f.path).name, f.rule) for f in real(script).findings] == [
        (None, "unguarded-print"),
        ("helpers.py", "unguarded-print"),
    ]
    script = _write(tmp_path, {"t.py": entry.replace("report()", "if sys.argv[1:]:\n    report()")})
    assert [(f.path, f.rule) for f in real(script).findings] == [(None, "unguarded-print")]
    module = [f for f in real(script, show_all=True).findings if f.path and f.rule == "unguarded-print"]
    assert [(f.confidence, f.why) for f in module] == [("possible", AT_RUN)]
    capsys.readouterr()
    assert main(["lint", str(script)]) == 0
    assert capsys.readouterr().out.count("run it under `ddplab launch` to see") == 1


def test_a_load_without_map_location_in_a_module_is_possible(tmp_path):
    """torch.load without map_location is sure in the script; in an imported module (BiSeNet's evaluate.py, loading
    what train.py saved after net.cpu()) what the file holds, and who loads it, show in a run (round 10)."""
    from ddplab.lint import AT_RUN
    from ddplab.lint import lint_file as real

    load = "import torch\ndef restore():\n    return torch.load('model.pt')\n"
    entry = "import torch.distributed as dist\nfrom helpers import restore\ndist.init_process_group('gloo')\n"
    entry += "state = restore()\ndist.destroy_process_group()\n"
    script = _write(tmp_path, {"t.py": entry, "helpers.py": load})
    [f] = [f for f in real(script, show_all=True).findings if f.rule == "load-no-map-location"]
    assert (f.confidence, f.why) == ("possible", AT_RUN)
    script = _write(tmp_path, {"t.py": entry.replace("from helpers import restore\n", load), "helpers.py": ""})
    assert [f.confidence for f in real(script).findings if f.rule == "load-no-map-location"] == ["sure"]
