"""The opt-in GPU group: `python -m pytest -m gpu` runs check, bench and train (ddp, zero1, fsdp; bf16, fp16,
compile; resume) through the real CLI on the visible GPUs, world size = GPU count, NCCL.

Without a GPU the whole module is skipped with one reason. Every other test file is pinned to CPU (conftest.py);
this one sees whatever CUDA_VISIBLE_DEVICES the run was started with. benchmarks/gpu_validate.sh runs it and adds
the memory and MFU figures.
"""

from __future__ import annotations

from pathlib import Path

import conftest
import pytest
import torch
from conftest import cli

if conftest.PINNED_TO_CPU:  # tests/gpu named without -m gpu: the run hid every GPU
    pytest.skip("the GPU group runs only when asked for: python -m pytest -m gpu", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip(
        f"no CUDA GPU visible to torch {torch.__version__} (CUDA build: {torch.version.cuda or 'none'}): "
        "the GPU group needs one",
        allow_module_level=True,
    )

pytestmark = pytest.mark.gpu
GPUS = torch.cuda.device_count()
GPT = [
    "gpt",
    "--n-layer",
    "2",
    "--n-embd",
    "64",
    "--n-head",
    "2",
    "--block-size",
    "64",
    "--max-steps",
    "8",
    "--log-every",
    "4",
]


def run(*args: str, timeout: float = 300, env: dict | None = None, code: int = 0):
    ran = cli(*args, timeout=timeout, env=env)
    assert ran.code == code, ran.err[-4000:] + ran.out[-2000:]
    return ran


def test_check_passes_on_every_gpu_with_nccl(no_leftover_workers):
    result = run("check", "--json").json()
    assert result["ok"] and result["backend"] == "nccl" and result["nproc"] == GPUS and result["device"] == "cuda"
    stages = {s["name"]: s for s in result["stages"]}
    assert all(s["status"] == "PASS" for s in stages.values()), stages
    wrong = stages["collectives"]["details"]["wrong"]
    assert ("send_recv_ring" in wrong) == (GPUS >= 2) and sum(wrong.values()) == 0


def test_check_passes_with_tf32_forced_as_nvidias_containers_do(no_leftover_workers):
    result = run("check", "--json", "--stages", "devices,ddp", env={"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}).json()
    devices = {s["name"]: s for s in result["stages"]}["devices"]
    assert devices["status"] == "PASS", devices
    assert all(r["float32_as"] == "tf32" for r in devices["details"]["ranks"])
    assert result["ok"], result["stages"]


def test_bench_measures_and_verifies_every_op(no_leftover_workers):
    result = run("bench", "-b", "1K", "-e", "16M", "-n", "5", "-w", "2", "--json").json()
    assert result["backend"] == "nccl" and result["world_size"] == GPUS and result["wrong"] == 0
    assert result["rows"] and all(r["busbw"] > 0 for r in result["rows"])
    assert result["peak_fraction"] is None  # no HBM copy to compare an interconnect's bus bandwidth with


def test_bench_refuses_sizes_beyond_gpu_memory_in_one_line():
    total = torch.cuda.get_device_properties(0).total_memory
    ran = run("bench", "-e", f"{2 * total // 2**30 + 1}G", code=2, timeout=120)
    assert "GPU" in ran.err and len(ran.err.strip().splitlines()) == 1 and "Traceback" not in ran.err


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "fsdp"])
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_train_gpt_on_every_gpu(strategy, amp, tmp_path, no_leftover_workers):
    result = run(
        "train", *GPT, "--strategy", strategy, "--amp", amp, "--checkpoint-dir", str(tmp_path), "--json"
    ).json()
    assert result["status"] == "PASS" and result["world_size"] == GPUS and result["backend"] == "nccl"
    assert result["params_identical"] and result["steps"] == 8
    assert result["tokens_per_sec"] > 0 and result["mfu_note"]
    assert result["sanitize"]["findings"] == [], result["sanitize"]  # each rank on its own GPU, nothing else wrong


def test_train_gpt_compiled(tmp_path, no_leftover_workers):
    result = run(
        "train", *GPT, "--compile", "--amp", "bf16", "--checkpoint-dir", str(tmp_path), "--json", timeout=600
    ).json()
    assert result["status"] == "PASS" and result["world_size"] == GPUS


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "fsdp"])
def test_stop_and_resume_on_gpus(strategy, tmp_path, no_leftover_workers):
    common = [
        "train",
        *GPT[:-4],
        "--strategy",
        strategy,
        "--checkpoint-dir",
        str(tmp_path),
        "--checkpoint-every",
        "2",
        "--json",
    ]
    first = run(*common, "--max-steps", "4").json()
    assert first["stopped_early"] and first["total_steps"] == 4
    resumed = run(*common, "--max-steps", "8", "--resume").json()
    assert resumed["resumed_from"] and "step-00000004" in resumed["resumed_from"]
    assert resumed["total_steps"] == 8 and resumed["status"] == "PASS"


def test_the_sanitizer_names_two_ranks_on_one_gpu(no_leftover_workers):
    """tests/scripts/sanitize_gpu_plant.py: both ranks `model.cuda()` without set_device (gloo: one GPU is enough)."""
    script = Path(__file__).parent.parent / "scripts" / "sanitize_gpu_plant.py"
    result = run("launch", "--nproc-per-node", "2", "--json", str(script)).json()
    found = [f for f in result["sanitize"]["findings"] if f["check"] == "device-placement"]
    assert found and found[0]["evidence"]["ranks"] == [0, 1], result["sanitize"]
    assert "train on one GPU" in found[0]["observed"] and "set_device(local_rank)" in found[0]["fix"]
