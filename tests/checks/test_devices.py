"""The devices stage's float32 tolerance and its speed loop, on CPU: the choices GPUs depend on."""

import os
import subprocess
import sys
import time

import pytest
import torch

from ddplab.checks import devices


@pytest.mark.parametrize(
    "device_type, allow_tf32, precision, mode",
    [
        ("cuda", False, "highest", "ieee"),  # torch's default for matmul
        ("cuda", True, "highest", "tf32"),  # torch.backends.cuda.matmul.allow_tf32 = True
        ("cuda", True, "high", "tf32"),  # set_float32_matmul_precision("high"), or the cuBLAS override variable
        ("cuda", False, "medium", "bf16"),
        ("cpu", True, "highest", "ieee"),  # TF32 is a tensor-core format: the cuBLAS flag does not touch CPU matmuls
        ("cpu", False, "high", "tf32"),
        ("cpu", False, "medium", "bf16"),
    ],
)
def test_float32_mode_follows_torchs_flags(device_type, allow_tf32, precision, mode):
    assert devices.float32_mode(device_type, allow_tf32, precision) == mode


def test_tolerance_widens_only_float32_and_only_when_narrowed():
    assert devices.tolerance(torch.float32) == 1e-5
    assert devices.tolerance(torch.float32, "tf32") == devices.tolerance(torch.float16) > 1e-3  # TF32 errs ~1e-3
    assert devices.tolerance(torch.float32, "bf16") == devices.tolerance(torch.bfloat16)
    assert devices.tolerance(torch.bfloat16, "tf32") == devices.tolerance(torch.bfloat16)


def test_the_cublas_override_variable_reaches_the_chosen_mode():
    # NVIDIA's PyTorch containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1; torch folds it into allow_tf32 (no GPU
    # needed to read the flag), and the stage must then allow TF32's error on a GPU.
    code = (
        "import torch; from ddplab.checks import devices; print(devices.current_float32_mode(torch.device('cuda', 0)))"
    )
    for value, mode in (("1", "tf32"), (None, "ieee")):
        env = {k: v for k, v in os.environ.items() if k != "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"}
        if value:
            env["TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == mode, out.stderr


def test_a_tf32_sized_error_passes_only_where_tf32_is_allowed():
    # A float32 matmul whose inputs were rounded to TF32's 10 mantissa bits, as tensor cores round them.
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(devices.CHECK_N, devices.CHECK_N, generator=gen, dtype=torch.float64) for _ in range(2))
    tf32 = a.to(torch.float16).double() @ b.to(torch.float16).double()  # float16 keeps the same 10 bits
    err = ((tf32 - a @ b).norm() / (a @ b).norm()).item()
    assert devices.tolerance(torch.float32) < err <= devices.tolerance(torch.float32, "tf32")


class Queue:
    """A device that runs queued calls only when synchronised, as a GPU stream does; each call takes `cost` s."""

    def __init__(self, cost: float):
        self.cost, self.pending, self.largest = cost, 0, 0

    def step(self):
        self.pending += 1

    def sync(self):
        self.largest = max(self.largest, self.pending)
        time.sleep(self.cost * self.pending)
        self.pending = 0


@pytest.mark.parametrize("cost", [0.0005, 0.03, 0.2])
def test_the_speed_loop_never_queues_much_more_than_its_budget(cost):
    queue = Queue(cost)
    calls, seconds = devices.timed(queue.step, queue.sync, budget=0.05)
    assert seconds >= min(0.05, cost * calls) and calls >= 1
    # never more queued at once than twice what took under the budget (and at least one call)
    assert queue.largest * cost <= max(2 * 0.05, cost) + 1e-9


def test_the_speed_figure_on_cpu_is_real():
    flops = devices._flops_per_s(torch.device("cpu"), torch.float32)
    assert flops > 1e6
