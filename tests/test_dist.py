"""ddplab.dist: the launcher environment is read and validated; init/shutdown work in 1, 2 and 3 processes."""

import pytest
import torch
import torch.distributed as dist

import ddplab.dist as dd
from ddplab.errors import DdplabError

LAUNCHER_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_USE_AGENT_STORE",
)


@pytest.fixture
def clean_env(monkeypatch):
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    "env, words",
    [
        ({"LOCAL_RANK": "abc"}, "LOCAL_RANK='abc' is not an integer"),
        ({"WORLD_SIZE": "0", "RANK": "0"}, "WORLD_SIZE=0 must be at least 1"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK=2 is outside"),
        ({"WORLD_SIZE": "2", "RANK": "1"}, "MASTER_ADDR/MASTER_PORT are not set"),
        ({"MASTER_PORT": "70000"}, "is not a TCP port"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK=-1 is negative"),
    ],
)
def test_broken_launcher_env_is_one_line_with_a_fix(env, words):
    with pytest.raises(DdplabError) as err:
        dd.read_launcher_env(env)
    message = str(err.value)
    assert words in message
    assert "\n" not in message and ":" in message  # one line: what is wrong, then how to fix it
    assert err.value.exit_code == 2


def test_launcher_env_defaults_to_one_process():
    env = dd.read_launcher_env({})
    assert (env.rank, env.world_size, env.local_rank, env.launched) == (0, 1, 0, False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusals")
def test_nccl_and_cuda_are_refused_without_gpus():
    with pytest.raises(DdplabError, match="no NCCL|needs CUDA"):
        dd.choose_backend(torch.device("cpu"), "nccl")
    with pytest.raises(DdplabError, match="torch sees no CUDA GPU"):
        dd.choose_device(0, "cuda")
    with pytest.raises(DdplabError, match="unknown backend"):
        dd.choose_backend(torch.device("cpu"), "tcp")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: LOCAL_RANK beyond the visible GPUs")
def test_local_rank_beyond_visible_gpus():
    with pytest.raises(DdplabError, match="GPU\\(s\\) are visible"):
        dd.choose_device(torch.cuda.device_count(), "cuda")


def test_one_process_group_without_a_launcher(clean_env):
    with dd.session(device="cpu") as ctx:
        assert (ctx.rank, ctx.world_size, ctx.backend, ctx.is_main) == (0, 1, "gloo", True)
        t = torch.tensor([5.0])
        dist.all_reduce(t)
        assert t.item() == 5.0
    assert not dist.is_initialized()


def test_shutdown_runs_after_an_exception(clean_env):
    with pytest.raises(ValueError):
        with dd.session(device="cpu"):
            raise ValueError("boom")
    assert not dist.is_initialized()
    dd.shutdown()  # and a second shutdown is harmless
