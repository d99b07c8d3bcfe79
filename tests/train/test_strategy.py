"""`ddplab train --strategy zero1|fsdp` on 2 real gloo ranks, against ddp on the same data:
- the same weights at the end (atol 1e-5: reduce-scatter and all-reduce add the two ranks' gradients in another
  order, so the last bits may differ; zero1 runs the same arithmetic as ddp, so it is bitwise equal);
- the same loss curve (every step's loss averaged over ranks, from metrics.jsonl; atol 1e-5);
- model.pt is a plain state_dict whatever the strategy (same keys and shapes as ddp's);
- stop at step k, --resume: equal to the uninterrupted run of the same strategy (bitwise on CPU);
- the per-rank table carries the allocator's measured peak and the prediction, and no communication wait under
  fsdp (DDP's timers measure it; fsdp has none);
- a checkpoint of another strategy is refused in one line.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import cli, refused

FLAGS = ["--samples", "512", "--hidden", "32", "--epochs", "1", "--batch-size", "16", "--log-every", "1"]
STEPS = 512 // 2 // 16
STOP = 6


def train(*flags: str, expect: int = 0):
    ran = cli("train", "mlp", "--nproc", "2", *FLAGS, *flags, "--json", timeout=200)
    assert ran.code == expect, ran.err[-3000:]
    return ran


def weights(directory) -> dict:
    return torch.load(directory / "model.pt", weights_only=True)


def losses(directory) -> list[float]:
    return [json.loads(line)["loss"] for line in (directory / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One uninterrupted run per strategy, with checkpoints."""
    out = {}
    for strategy in ("ddp", "zero1", "fsdp"):
        directory = tmp_path_factory.mktemp(strategy)
        out[strategy] = (directory, train("--strategy", strategy, "--checkpoint-dir", str(directory)).json())
    return out


@pytest.mark.parametrize("strategy", ["zero1", "fsdp"])
def test_same_weights_and_loss_curve_as_ddp(runs, strategy):
    ddp_dir, _ = runs["ddp"]
    directory, result = runs[strategy]
    assert result["status"] == "PASS" and result["strategy"] == strategy and result["steps"] == STEPS
    reference, mine = weights(ddp_dir), weights(directory)
    assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in reference.items()}  # plain state_dict
    assert all(type(v) is torch.Tensor for v in mine.values())
    for name, value in mine.items():
        torch.testing.assert_close(value, reference[name], atol=1e-5, rtol=0)
    assert len(losses(directory)) == STEPS
    torch.testing.assert_close(torch.tensor(losses(directory)), torch.tensor(losses(ddp_dir)), atol=1e-5, rtol=0)


def test_zero1_is_bitwise_ddp(runs):
    reference, mine = weights(runs["ddp"][0]), weights(runs["zero1"][0])
    assert all(torch.equal(v, reference[k]) for k, v in mine.items())


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "fsdp"])
def test_table_shows_measured_peak_next_to_prediction(runs, strategy):
    _, result = runs[strategy]
    for r in result["ranks"]:
        assert r["allocator_peak_mb"] > 0 and r["predicted_peak_mb"] > 0
        # The communication wait comes from DDP's own timers: fsdp has no DDP, so it is "not measured", not 0.
        assert (r["comm_wait_ms"] is None) == (strategy == "fsdp")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["zero1", "fsdp"])
def test_stop_and_resume_equals_the_uninterrupted_run(runs, strategy, tmp_path, no_leftover_workers):
    directory = tmp_path / "run"
    train("--strategy", strategy, "--checkpoint-dir", str(directory), "--max-steps", str(STOP))
    ran = train("--strategy", strategy, "--checkpoint-dir", str(directory), "--resume")
    assert ran.json()["total_steps"] == STEPS and f"resumed from step-{STOP:08d}" in ran.err
    full = weights(runs[strategy][0])
    for name, value in weights(directory).items():
        assert torch.equal(value, full[name]), name


def test_checkpoint_of_another_strategy_is_refused_in_one_line(runs, tmp_path, capsys):
    """Checked before any rank starts (as another recipe's checkpoint is): the real CLI in this process."""
    directory = tmp_path / "other"
    shutil.copytree(runs["ddp"][0], directory)
    args = [*FLAGS, "--strategy", "fsdp", "--checkpoint-dir", str(directory), "--resume", "--epochs", "2"]
    assert "--strategy ddp" in refused(capsys, "train", "mlp", "--nproc", "2", *args)


def test_a_fused_or_capturable_optimizers_step_goes_back_to_its_parameters_device():
    """ZeroRedundancyOptimizer.load_state_dict puts every scalar state on the CPU (pytorch/pytorch#124133); the fused
    and capturable kernels need `step` on the parameter's device. The meta device stands in for a GPU here: a real
    device other than the CPU, and AdamW(capturable=True) accepts its parameters."""
    from ddplab.statedict import steps_on_param_devices

    param = torch.nn.Parameter(torch.zeros(3, device="meta"))
    optimizer = torch.optim.AdamW([param], capturable=True)
    optimizer.state[param] = {"step": torch.tensor(5.0), "exp_avg": torch.zeros(3, device="meta")}
    steps_on_param_devices(optimizer)
    assert optimizer.state[param]["step"].device == param.device
    plain_param = torch.nn.Parameter(torch.zeros(3, device="meta"))
    plain = torch.optim.AdamW([plain_param])  # plain Adam keeps `step` on the CPU on purpose: left there
    plain.state[plain_param] = {"step": torch.tensor(5.0)}
    steps_on_param_devices(plain)
    assert plain.state[plain_param]["step"].device.type == "cpu"


ZERO1_RESUME = r"""
import os, sys, torch, torch.distributed as dist
from ddplab import statedict
from ddplab.train import strategy
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
def build():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3).to(device)
    return model, strategy.zero1(torch.optim.AdamW(model.parameters(), lr=0.1, fused=True))
def step(model, optimizer, i):
    torch.manual_seed(100 + i)
    model(torch.randn(8, 4, device=device)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
model, optimizer = build()
for i in range(4):
    step(model, optimizer, i)
reference = {k: v.clone() for k, v in model.state_dict().items()}
model, optimizer = build()
for i in range(2):
    step(model, optimizer, i)
optimizer.consolidate_state_dict(to=0)
saved = ({k: v.cpu() for k, v in model.state_dict().items()}, optimizer.state_dict())
model, optimizer = build()
model.load_state_dict(saved[0])
statedict.load_optimizer_state_dict(model, optimizer, saved[1])
steps = [s["step"] for s in optimizer.optim.state.values()]
assert steps and all(s.device == device for s in steps), [s.device for s in steps]
for i in range(2, 4):
    step(model, optimizer, i)
assert all(torch.equal(v, reference[k]) for k, v in model.state_dict().items()), "resume is not bitwise"
dist.destroy_process_group()
print("ok", device)
"""


def test_zero1_with_fused_adamw_resumes_bitwise_with_step_on_the_parameters_device():
    """The real ZeroRedundancyOptimizer and a fused AdamW (the gpt recipe's optimizer on GPUs; fused runs on CPU
    too), saved after 2 steps, loaded through ddplab's strategy, 2 more steps: each `step` on its parameter's
    device and the weights bitwise those of 4 uninterrupted steps. On a GPU machine it runs on cuda:0."""
    import os
    import subprocess
    import sys

    ran = subprocess.run(
        [sys.executable, "-c", ZERO1_RESUME],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert ran.returncode == 0 and ran.stdout.startswith("ok"), ran.stderr[-3000:]
