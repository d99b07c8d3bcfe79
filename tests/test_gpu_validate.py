"""benchmarks/gpu_validate.sh and its report, on CPU: the script parses and refuses to run without a GPU; the
report renders real command outputs, and says which steps failed, timed out or were not run.

env and memory are run here (in this process: they start none); check, bench and train's outputs, which only the
report reads, are real --json outputs kept in tests/logs/made/gpu_*.json (tools/make_test_logs.py makes them again);
their keys are pinned by those commands' own tests, which run them for real."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from inproc import here

ROOT = Path(__file__).parent.parent
MADE = ROOT / "tests" / "logs" / "made"
SCRIPT = ROOT / "benchmarks" / "gpu_validate.sh"


def test_the_script_parses():
    ran = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert ran.returncode == 0, ran.stderr


def test_without_a_gpu_it_says_so_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "results.md"
    ran = subprocess.run(
        ["bash", str(SCRIPT), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert ran.returncode == 2 and ran.stderr.strip().count("\n") == 0 and "no CUDA GPU" in ran.stderr
    assert not out.exists()


@pytest.mark.slow
def test_the_report_renders_real_outputs_and_names_what_did_not_run(tmp_path, no_leftover_workers):
    work = tmp_path / "work"
    work.mkdir()
    tiny = ["gpt", "--n-layer", "1", "--n-embd", "32", "--n-head", "2", "--block-size", "16"]
    runs = {"env": ["env", "--json"], "memory": ["memory", *tiny, "--json"]}
    rows = ["name\trc\tseconds\tlimit"]
    for name, args in runs.items():
        ran = here(*args)
        assert ran.code == 0, ran.err[-2000:]
        (work / f"{name}.out").write_text(ran.out)
        rows.append(f"{name}\t0\t3\t60")
    for name in ("check", "bench", "train_ddp"):
        (work / f"{name}.out").write_text((MADE / f"gpu_{name}.json").read_text())
        rows.append(f"{name}\t0\t3\t60")
    (work / "train_fsdp.err").write_text("starting\nrank 0: `[bold]` stuck | here\n")
    rows += ["train_fsdp\t124\t120\t120", "train_zero1\tskipped\t0\t120"]
    (work / "steps.tsv").write_text("\n".join(rows) + "\n")
    junit = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={work / 'gpu_tests.xml'}",
            "tests/test_gpu_group.py::test_the_gpu_group_is_asked_for_by_name",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert junit.returncode == 0, junit.stdout
    rows.append("gpu_tests\t0\t5\t270")
    (work / "steps.tsv").write_text("\n".join(rows) + "\n")

    out = tmp_path / "results.md"
    ran = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_report.py"),
            str(work),
            str(out),
            "--gpus",
            "1",
            "--seconds",
            "42",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    md = out.read_text()
    assert "in 42 s, world size 1" in md and "8 passed, 0 failed" in md
    assert "| collectives | PASS |" in md and "| all_reduce |" in md
    assert "| ddp |" in md and "not applicable on CPU" in md  # the MFU note, as train gave it
    assert "TIMEOUT after 120 s" in md and "`rank 0: '[bold]' stuck / here`" in md  # outside text kept a code span
    assert "| zero1 |" in md and "not run (budget spent)" in md
