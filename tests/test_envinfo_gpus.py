"""envinfo's reading of CUDA_VISIBLE_DEVICES and of a driver that sees GPUs torch cannot use.

The driver case needs NVIDIA's driver and a CUDA build of torch, neither of which this machine has: the torch
passed in is a stand-in that answers as torch does there (is_available() False, with torch's own warning)."""

import warnings
from types import SimpleNamespace

import pytest

from ddplab import envinfo


@pytest.mark.parametrize(
    "raw, ids",
    [
        (None, None),
        ("", []),
        ("-1", []),
        ("0,1", ["0", "1"]),
        ("0,-1,1", ["0"]),
        (" 2 , 3 ", ["2", "3"]),
        ("GPU-8f3a", ["GPU-8f3a"]),
        ("0,,1", ["0"]),
    ],
)
def test_visible_gpus_as_cuda_reads_them(raw, ids):
    assert envinfo.visible_gpus(raw) == ids


def fake_torch(cuda: str | None, available: bool, says: str = ""):
    def is_available():
        if says:
            warnings.warn(says, UserWarning)
        return available

    return SimpleNamespace(
        __version__="2.9.0+cu126", version=SimpleNamespace(cuda=cuda), cuda=SimpleNamespace(is_available=is_available)
    )


TOO_OLD = (
    "CUDA initialization: The NVIDIA driver on your system is too old (found version 11040). Please update "
    "your GPU driver by downloading and installing a new version from the URL: ..."
)


def test_a_driver_older_than_torchs_cuda_is_named_with_the_version_needed():
    problem = envinfo.unusable_gpus(fake_torch("12.6", False, TOO_OLD), {}, driver="470.57.02", gpus=8)
    assert "470.57.02 is older than torch's CUDA 12.6 needs (>= 525.60.13)" in problem.problem
    assert "too old (found version 11040)" in problem.problem  # torch's own words, first line
    assert "update the driver to 525.60.13" in problem.fix and "CUDA_VISIBLE_DEVICES=-1" in problem.fix


def test_a_recent_driver_torch_cannot_use_is_still_a_problem():
    problem = envinfo.unusable_gpus(fake_torch("12.6", False), {}, driver="550.54.15", gpus=2)
    assert "sees 2 GPU(s) but torch 2.9.0+cu126 (CUDA 12.6) can use none" in problem.problem
    assert "--gpus all" in problem.fix


@pytest.mark.parametrize(
    "torch_, environ, gpus",
    [
        (fake_torch("12.6", True), {}, 8),  # torch uses them
        (fake_torch("12.6", False, TOO_OLD), {"CUDA_VISIBLE_DEVICES": "-1"}, 8),  # hidden on purpose
        (fake_torch("12.6", False, TOO_OLD), {"CUDA_VISIBLE_DEVICES": ""}, 8),
        (fake_torch(None, False), {}, 8),  # a CPU build: `ddplab env` says so on its own
        (fake_torch("12.6", False), {}, 0),  # no GPU for the driver to see
    ],
)
def test_no_problem_where_cpu_ranks_are_right(torch_, environ, gpus):
    assert envinfo.unusable_gpus(torch_, environ, driver="470.57.02", gpus=gpus) is None


def test_on_this_machine_nothing_is_claimed():
    import torch

    if envinfo.nvml_gpu_count():
        pytest.skip("a driver sees GPUs here")
    assert envinfo.unusable_gpus(torch) is None


def test_preflight_fails_cpu_ranks_where_the_driver_sees_unusable_gpus(monkeypatch):
    # check, train and launch all read environment_findings: none of them may fall back to CPU ranks in silence.
    from ddplab.checks import preflight

    seen = []

    def unusable(torch, environ=None, **_):
        seen.append(torch.__name__)
        return envinfo.Warning_("NVIDIA driver 470.57.02 is older than torch's CUDA 12.6 needs", "update the driver")

    monkeypatch.setattr(envinfo, "unusable_gpus", unusable)
    # A CUDA build whose driver sees 2 GPUs: only then is torch imported and asked (launch's CLI imports no torch).
    monkeypatch.setattr(envinfo, "cuda_possible", lambda: True)
    monkeypatch.setattr(envinfo, "nvml_gpu_count", lambda: 2)
    for ranks_vs_devices in (True, False):  # train asks without the ranks-vs-devices finding
        found = preflight.environment_findings(2, "cpu", "gloo", ranks_vs_devices=ranks_vs_devices)
        assert [(f.level, f.fix) for f in found if "driver" in f.what] == [("fail", "update the driver")]
    assert not [
        f for f in preflight.environment_findings(1, "cuda", "nccl", ranks_vs_devices=False) if "driver 470" in f.what
    ]
    assert seen == ["torch", "torch"]
