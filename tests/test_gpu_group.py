"""The suite runs on CPU by default, even on a GPU machine; the GPU group runs only when asked for by name."""

import os
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

TESTS = Path(__file__).parent


class Config:
    def __init__(self, markexpr: str):
        self.markexpr = markexpr

    def getoption(self, name: str):
        assert name == "markexpr"
        return self.markexpr


@pytest.mark.parametrize(
    "markexpr, asked",
    [
        ("", False),
        ("not slow", False),
        ("not gpu", False),
        ("not slow and not gpu", False),
        ("gpu", True),
        ("gpu and not slow", True),
        ("slow or gpu", True),
        ("gpus", False),
    ],
)
def test_the_gpu_group_is_asked_for_by_name(markexpr, asked):
    assert conftest.gpu_group_asked(Config(markexpr)) is asked


def test_this_run_and_its_subprocesses_see_no_gpu():
    assert conftest.PINNED_TO_CPU and os.environ["CUDA_VISIBLE_DEVICES"] == ""
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.strip() == "0", out.stderr


def _pytest(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_without_a_gpu_the_gpu_group_skips_with_one_reason():
    from ddplab.envinfo import nvidia_driver

    if nvidia_driver() is not None:
        pytest.skip("an NVIDIA driver is here: the GPU group may run rather than skip")
    ran = _pytest("-m", "gpu")  # the command the issue names: the whole suite, the GPU group selected
    assert ran.returncode == 0, ran.stdout + ran.stderr
    skipped = [line for line in ran.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "no CUDA GPU visible" in skipped[0], ran.stdout
    assert ran.stdout.splitlines()[-1].startswith("1 skipped, ") and "passed" not in ran.stdout, ran.stdout


def test_a_default_run_does_not_collect_the_gpu_group():
    ran = _pytest("--collect-only", "-m", "not slow", "tests/test_gpu_group.py", "tests/gpu")
    assert "tests/gpu" in ran.stdout  # named explicitly: collected, and skipped for want of -m gpu
    # A default run (testpaths, no -m gpu) walks tests/ and meets tests/gpu; everything else it would import (every
    # test module: seconds of CPU) is set aside with --ignore, which tests/gpu is not: the hook alone keeps it out.
    others = [f"--ignore={p.relative_to(TESTS.parent)}" for p in TESTS.iterdir() if p.name != "gpu"]
    ran = _pytest("--collect-only", "-q", "-m", "not slow", *others)
    assert "tests/gpu/" not in ran.stdout and "Error" not in ran.stdout, ran.stdout[-2000:]
