"""What the shared loop promises, checked on real 2-rank gloo runs of the mlp recipe:
- a 2-rank run equals a 1-process run over the same global batches (1e-5);
- stopping at step k and --resume gives bitwise the parameters of an uninterrupted run (CPU);
- 2 accumulated micro-batches equal one batch twice as large;
- a damaged latest checkpoint falls back to the previous one, with a warning, and still resumes exactly;
- resuming on another world size works and says so;
- bad input (another recipe's or shape's checkpoint, a fresh run over old checkpoints, an unwritable directory,
  --resume with nothing to resume) is one line and exit 2.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import cli, refused

from ddplab.recipes import gpt, mlp
from ddplab.train.data import ShardedBatches
from ddplab.train.loop import fit
from ddplab.train.result import RankStats, rank_warnings

FLAGS = ["--samples", "1024", "--hidden", "32", "--epochs", "2", "--batch-size", "16", "--log-every", "8"]
CFG = mlp.Config(samples=1024, hidden=32, epochs=2, batch_size=16)
STEPS_PER_EPOCH = 1024 // 2 // 16


def train(*flags: str, nproc: int = 2, expect: int = 0):
    ran = cli("train", "mlp", "--nproc", str(nproc), *FLAGS, *flags, timeout=150)
    assert ran.code == expect, ran.err[-3000:]
    return ran


def weights(directory) -> dict:
    return torch.load(directory / "model.pt", weights_only=True)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """One uninterrupted 2-rank run, with checkpoints: the reference the other tests compare with."""
    directory = tmp_path_factory.mktemp("full")
    ran = train("--checkpoint-dir", str(directory), "--json")
    return directory, ran.json()


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The same run stopped at step 40 (epoch 2, batch 8): checkpoints at 32 (end of epoch 1) and 40."""
    directory = tmp_path_factory.mktemp("stopped")
    ran = train("--checkpoint-dir", str(directory), "--max-steps", "40", "--json")
    result = ran.json()
    assert result["stopped_early"] and result["total_steps"] == 40
    return directory


def one_process_reference(cfg: mlp.Config, world: int) -> dict:
    """A plain model, no DDP, one process, trained on exactly the global batches the ranks saw together."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only contend with the other tests' processes
    try:
        return _train_plain(cfg, world)
    finally:
        torch.set_num_threads(threads)


def _train_plain(cfg: mlp.Config, world: int) -> dict:
    data = mlp.make_data(cfg)
    torch.manual_seed(cfg.seed)
    model = mlp.make_model(cfg, data)
    optimizer = mlp.make_optimizer(cfg, model)
    shards = [ShardedBatches(data, cfg.batch_size, rank, world, cfg.seed) for rank in range(world)]
    for epoch in range(cfg.epochs):
        for shard in shards:
            shard.set_epoch(epoch)
        for i in range(len(shards[0])):
            xs, ys = zip(*(shard[i] for shard in shards))
            loss = mlp.loss_fn(model, (torch.cat(xs), torch.cat(ys)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.state_dict()


def test_two_ranks_equal_one_process_over_the_same_global_batches(full):
    directory, result = full
    assert result["steps"] == 2 * STEPS_PER_EPOCH and result["params_identical"]
    reference = one_process_reference(CFG, world=2)
    for name, value in weights(directory).items():
        torch.testing.assert_close(value, reference[name], atol=1e-5, rtol=0)


def test_stop_and_resume_is_bitwise_equal_to_an_uninterrupted_run(full, stopped, tmp_path, no_leftover_workers):
    resumed = tmp_path / "resumed"
    shutil.copytree(stopped, resumed)
    ran = train("--checkpoint-dir", str(resumed), "--resume", "--json")
    result = ran.json()
    assert result["steps"] == 2 * STEPS_PER_EPOCH - 40 and result["total_steps"] == 2 * STEPS_PER_EPOCH
    assert "step-00000040" in result["resumed_from"] and "resumed from step-00000040" in ran.err
    full_weights = weights(full[0])
    for name, value in weights(resumed).items():
        assert torch.equal(value, full_weights[name]), name
    # The metrics file continues: the resumed run appended to it.
    assert '"step": 40' in (resumed / "metrics.jsonl").read_text()


def test_damaged_latest_checkpoint_falls_back_with_a_warning(full, stopped, tmp_path, no_leftover_workers):
    damaged = tmp_path / "damaged"
    shutil.copytree(stopped, damaged)
    latest = next(damaged.glob("step-00000040-*.pt"))
    latest.write_bytes(latest.read_bytes()[:1000])  # truncated, as by a crash during a non-atomic write
    ran = train("--checkpoint-dir", str(damaged), "--resume", "--json")
    result = ran.json()
    assert "step-00000032" in result["resumed_from"]
    assert any(latest.name in n and "falling back" in n for n in result["notes"])
    assert latest.name in ran.err  # and the user saw it while it ran
    full_weights = weights(full[0])  # resuming from step 32 is exact too
    assert all(torch.equal(v, full_weights[k]) for k, v in weights(damaged).items())


def test_accumulating_two_micro_batches_equals_one_double_batch(full, tmp_path, no_leftover_workers):
    # Per rank 8 + 8 samples with one all-reduce (no_sync on the first) against 16 samples at once.
    train("--batch-size", "8", "--grad-accum", "2", "--checkpoint-dir", str(tmp_path))
    accumulated, big = weights(tmp_path), weights(full[0])
    for name in big:
        torch.testing.assert_close(accumulated[name], big[name], atol=1e-5, rtol=0)


def test_resume_on_another_world_size_works_and_says_so(stopped, tmp_path, no_leftover_workers):
    moved = tmp_path / "moved"
    shutil.copytree(stopped, moved)
    ran = train("--checkpoint-dir", str(moved), "--resume", "--json", nproc=1)
    result = ran.json()
    note = next(n for n in result["notes"] if "written by 2 rank(s)" in n)
    assert "on 1 rank(s)" in note and "replicated" in note
    # Epoch 2 had seen 8 steps x 32 samples; one rank of 16 continues after the same 256 samples.
    assert result["world_size"] == 1 and result["total_steps"] == 2 * 2 * STEPS_PER_EPOCH
    assert result["steps"] == 2 * STEPS_PER_EPOCH - 256 // 16


def test_checkpoint_of_another_recipe_or_shape_is_refused(stopped, capsys):
    err = refused(capsys, "train", "mlp", *FLAGS, "--hidden", "64", "--checkpoint-dir", str(stopped), "--resume")
    assert "--hidden 32, this run has --hidden 64" in err
    err = refused(capsys, "train", "linear", "--checkpoint-dir", str(stopped), "--resume")
    assert "written by the mlp recipe, not linear" in err


def test_gpt_checkpoint_of_another_vocabulary_is_refused_by_the_workers(tmp_path, no_leftover_workers):
    """Shape flags match, but another text gives another vocabulary: only the built model can tell, so the
    workers refuse it, and ddplab train still reports one line with exit 2."""
    flags = ["--n-layer", "1", "--n-embd", "16", "--n-head", "2", "--block-size", "8", "--max-steps", "2"]
    (tmp_path / "a.txt").write_text("abcdefgh " * 200)
    (tmp_path / "b.txt").write_text("xyz " * 400)
    ck = str(tmp_path / "ck")
    # The first run in this process: a real one-rank gloo group, quicker than starting workers.
    first = gpt.Config(
        n_layer=1, n_embd=16, n_head=2, block_size=8, max_steps=2, text=str(tmp_path / "a.txt"), checkpoint_dir=ck
    )
    assert fit(gpt.RECIPE, first, events=True).steps == 2
    ran = cli(
        "train",
        "gpt",
        "--nproc",
        "1",
        *flags,
        "--text",
        str(tmp_path / "b.txt"),
        "--checkpoint-dir",
        ck,
        "--resume",
        "--max-steps",
        "4",
        timeout=150,
    )
    assert ran.code == 2, ran.err
    assert "another shape" in ran.err and "Traceback" not in ran.err
    assert [line for line in ran.err.splitlines() if "error" in line][0].startswith("ddplab train: error: checkpoint")


def test_a_fresh_run_never_overwrites_existing_checkpoints(stopped, capsys):
    before = sorted(p.name for p in stopped.iterdir())
    err = refused(capsys, "train", "mlp", "--checkpoint-dir", str(stopped))
    assert "already holds checkpoints" in err and "--resume" in err
    assert sorted(p.name for p in stopped.iterdir()) == before


def test_bad_checkpoint_directories_are_one_line_errors(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    err = refused(capsys, "train", "linear", "--checkpoint-dir", str(blocker / "ck"))
    assert f"{blocker}/ck is not writable" in err
    err = refused(capsys, "train", "linear", "--checkpoint-dir", str(tmp_path / "empty"), "--resume")
    assert "holds no checkpoint" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["nosuch"], "invalid choice: 'nosuch'"),
        (["linear", "--nproc", "0"], "--nproc 0: need at least 1 rank"),
        (["gpt", "--text", "/no/such/file.txt"], "--text /no/such/file.txt: no such file"),
        (["mlp", "--batch-size", "0"], "--batch-size 0: must be at least 1"),
        (["linear", "--amp", "fp16", "--device", "cpu"], "--amp fp16 needs a GPU"),
        (["gpt", "--n-embd", "30", "--n-head", "4"], "not divisible by --n-head"),
        pytest.param(
            ["linear", "--nproc", "2", "--epochs", "0"],
            "--epochs 0: must be at least 1",  # an early-started
            marks=pytest.mark.e2e,
        ),  # agent ends: the CLI's commands are found by name, out of conftest's sight
    ],
)
def test_bad_input_is_one_line_exit_2(args, message, capsys, no_leftover_workers):
    assert message in refused(capsys, "train", *args)


def test_bad_input_in_a_real_process_is_one_line():
    """With --nproc the agent starts at once and checks the flags in a fork of itself: the refusal comes from there,
    still one line, and the CLI itself never imports torch (~1.5 CPU s a run; Python's own import log says so)."""
    ran = cli("train", "gpt", "--nproc", "2", "--text", "/no/such/file.txt", env={"PYTHONPROFILEIMPORTTIME": "1"})
    imported = [line.rpartition("|")[2].strip() for line in ran.err.splitlines() if line.startswith("import time:")]
    assert "ddplab.train.flags" in imported and "torch" not in imported
    said = [line for line in ran.err.splitlines() if not line.startswith("import time:")]
    assert ran.code == 2 and said == [
        "ddplab train: error: --text /no/such/file.txt: no such file: pass a UTF-8 text file, or omit --text to use "
        "the bundled stories"
    ]


@pytest.mark.e2e
def test_an_agent_that_died_before_it_answered_leaves_the_flags_to_this_process(
    tmp_path, monkeypatch, no_leftover_workers
):
    """The early agent killed before it checked the flags (as if its torch import crashed): they are checked here,
    and the run then reports how the agent ended."""
    import argparse
    import os
    import signal

    from ddplab.commands.train import _checked
    from ddplab.train.ranks import start_ranks

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    pending = start_ranks(2)
    try:
        os.kill(pending.agent.pid, signal.SIGKILL)
        pending.agent.wait(timeout=30)
        run = _checked(argparse.Namespace(recipe="linear", args=["--nproc", "2", "--epochs", "3"]), pending)
        assert (run.nproc, run.device, run.config["epochs"]) == (2, "cpu", 3)
    finally:
        pending.cancel()
    assert not list(tmp_path.glob("ddplab-*"))


def test_idle_and_slow_ranks_are_warned_about():
    def rank(r, samples, step_ms, comm_ms):
        return RankStats(
            rank=r,
            samples=samples,
            steps=10 if samples else 0,
            step_ms=step_ms,
            comm_wait_ms=comm_ms,
            cpu_percent=90,
            gpu_util_percent=None,
            peak_memory_mb=300,
            final_loss=1.0,
            digest="x",
        )

    even = [rank(0, 320, 4.0, 2.0), rank(1, 320, 4.0, 2.1), rank(2, 320, 4.0, 1.9)]
    assert rank_warnings(even) == []
    # Rank 2 computes 3.8 ms a step while the others wait for it: their comm wait is high, its own is not.
    slow = [rank(0, 320, 4.0, 3.0), rank(1, 320, 4.0, 3.0), rank(2, 320, 4.0, 0.2)]
    (warning,) = rank_warnings(slow)
    assert warning.startswith("rank 2 computes 3.8x slower")
    idle = [rank(0, 320, 4.0, 2.0), rank(1, 0, 4.0, 2.0)]
    assert any(w.startswith("rank 1 processed no samples") for w in rank_warnings(idle))


def test_a_crashing_rank_fails_the_run_naming_it(tmp_path, no_leftover_workers):
    ran = cli(
        "train",
        "linear",
        "--nproc",
        "2",
        "--epochs",
        "1",
        timeout=150,
        env={"DDPLAB_FAULT": "crash:1:train.log", "TMPDIR": str(tmp_path)},
    )
    assert ran.code == 1, ran.err
    assert "rank 1 failed" in ran.out and "injected crash on rank 1 at train.log" in ran.out
    # Of the run's folder only the ranks' whole output is left, and the result says where, in one line.
    (kept,) = tmp_path.glob("ddplab-*")
    assert f"kept: every rank's whole output in {kept} (delete it when done)" in ran.out.splitlines()
    assert [p.name for p in kept.iterdir()] == ["logs"]
    assert any("injected crash" in p.read_text() for p in kept.rglob("stderr.log"))


@pytest.mark.slow
def test_a_hanging_rank_is_reported_with_its_stack_exit_3(tmp_path, no_leftover_workers):
    # 15 s: under a loaded machine rank 1's own setup (before the planted hang) once took more than 8 s
    ran = cli(
        "train",
        "linear",
        "--nproc",
        "2",
        "--epochs",
        "1",
        "--stall-timeout",
        "15",
        "--json",
        env={"DDPLAB_FAULT": "hang:1:train.log", "TMPDIR": str(tmp_path)},
        timeout=150,
    )  # its logs stay there
    assert ran.code == 3, ran.err
    failure = ran.json()
    assert failure["status"] == "hang" and "no rank made progress for 15s" in failure["summary"]
    assert "hang_before" in next(r["stack"] for r in failure["ranks"] if r["rank"] == 1)


def test_bucket_size_and_fp16_gradient_compression_still_converge(no_leftover_workers):
    """The knobs `ddplab scale --try-advice` turns: DDP's bucket_cap_mb and a 16-bit compression comm hook."""
    from conftest import cli

    ran = cli("train", "linear", "--nproc", "2", "--comm-hook", "fp16", "--bucket-cap-mb", "0.5", "--json")
    assert ran.code == 0, ran.err
    result = ran.json()
    assert abs(result["weight"] - 2) < 0.05 and abs(result["bias"] - 1) < 0.05  # fp16 rounding in transit only
    assert result["params_identical"]


def test_bf16_compression_needs_nccl(capsys):
    assert "needs NCCL" in refused(capsys, "train", "linear", "--device", "cpu", "--comm-hook", "bf16")


def test_torchs_own_flight_recorder_dump_goes_to_the_run_folder(no_leftover_workers):
    """NCCL dumps the Flight Recorder by itself when a collective times out, to TORCH_FR_DUMP_TEMP_FILE (older torch:
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE), /tmp/nccl_trace_rank_N by default: a train's ranks get a prefix inside their
    run folder, where the run's collector reads it."""
    from ddplab.launcher import local

    ran = local.run("os:getenv", "TORCH_FR_DUMP_TEMP_FILE", nproc=1, flight=True, keep_dir=True)
    try:
        assert ran.ok, ran.summary()
        assert ran.rank(0).result == f"{ran.run_dir}/flight/{local.TORCH_DUMP_PREFIX}"
    finally:
        shutil.rmtree(ran.run_dir, ignore_errors=True)


TORCH_DUMP = r"""
import sys, torch, torch.distributed as dist
import torch._C._distributed_c10d as c10d
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
dist.all_reduce(torch.ones(3))
open(sys.argv[1], "wb").write(c10d._dump_fr_trace())  # the pickle NCCL's timeout dump writes (same recorder)
dist.destroy_process_group()
"""


def test_torchs_own_dump_is_read_as_plain_data_and_analysed(tmp_path):
    import os
    import pickle
    import subprocess
    import sys

    from ddplab.flight import reader as flight
    from ddplab.launcher import local

    ran = subprocess.run(
        [sys.executable, "-c", TORCH_DUMP, str(tmp_path / f"{local.TORCH_DUMP_PREFIX}0")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TORCH_FR_BUFFER_SIZE": "16", "OMP_NUM_THREADS": "1"},
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    # A file that names a function would run it when unpickled: refused, not read.
    (tmp_path / f"{local.TORCH_DUMP_PREFIX}1").write_bytes(pickle.dumps(os.getcwd))
    dumps = local._flight_dumps(tmp_path)
    assert list(dumps) == [0]
    (entry,) = dumps[0]["traces"]["_dump_nccl_trace_json"]["entries"]
    assert entry["profiling_name"] == "gloo:all_reduce" and entry["input_sizes"] == [[3]]
    report = flight.analyse(dumps, world_size=1)
    assert report.available and report.ranks[0].last_started.op == "all_reduce"


@pytest.mark.parametrize("stall", [5, 59, 70, 600])
def test_the_group_waits_longer_than_the_stall_timeout(stall):
    """Before: the process group's 60 s timeout ended a `--stall-timeout 70` run first, with gloo's message (its
    markup-like text is test_markup's). The group timeout is past every stall timeout, never below torch's default;
    the hang named with its stack is test_a_hanging_rank_is_reported_with_its_stack_exit_3's, made to happen."""
    from ddplab.dist import DEFAULT_TIMEOUT_S
    from ddplab.train.flags import group_timeout_s

    assert group_timeout_s(stall) >= stall + 30 and group_timeout_s(stall) >= DEFAULT_TIMEOUT_S


def test_the_prediction_child_says_when_it_is_done_and_ends_when_cancelled(no_leftover_workers):
    """A rank that torchrun started (no ddplab agent to fork) traces its memory prediction in a child, beside its
    training (a rank's real process group cannot hold the tracer's fake one); a run that fails cancels it: no
    process is left."""
    from ddplab.train.memory import PredictElsewhere

    predicting = PredictElsewhere("linear", {}, "ddp", 2)
    assert not predicting.done()  # importing torch alone takes longer than this line
    predicting.cancel()
    assert predicting.done() and predicting.proc.returncode != 0
