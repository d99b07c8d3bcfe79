"""`ddplab slurm`: the sbatch script is valid bash in the standard pattern, and it really runs: with stand-ins
for srun and scontrol (tests/fake_slurm), two "nodes" on this machine meet through torchrun's c10d rendezvous."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli, kill_tree

from ddplab.ports import free_port

FAKE_SLURM = Path(__file__).parents[1] / "fake_slurm"


def test_script_for_a_recipe_is_valid_bash_in_the_standard_pattern(tmp_path):
    out = tmp_path / "gpt.sbatch"
    ran = cli(
        "slurm",
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--partition",
        "a100",
        "--time",
        "02:00:00",
        "-o",
        str(out),
        "gpt",
        "--layers",
        "12",
    )
    assert ran.code == 0, ran.err
    text = out.read_text()
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0
    for line in [
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=a100",
        "#SBATCH --time=02:00:00",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        "--nnodes=4",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        '--rdzv-endpoint="$head_node:29500"',
        '--rdzv-id="$SLURM_JOB_ID"',
        "-m ddplab.recipes.gpt --layers 12",
        "%x-%j-node%n.out",
    ]:
        assert line in text, line
    assert "MASTER_PORT=" not in text.replace("Never set MASTER_ADDR/MASTER_PORT", "")


def test_printed_without_output_and_bad_input_is_one_line(tmp_path):
    assert cli("slurm", "--nodes", "2", "--gpus-per-node", "4", "mlp").out.startswith("#!/bin/bash")
    for args, words in [
        (["--nodes", "2", "--gpus-per-node", "1", "nosuch"], "neither a recipe"),
        (["--nodes", "0", "--gpus-per-node", "1", "mlp"], "not a positive whole number"),
        (["--nodes", "1", "--gpus-per-node", "1", "--time", "soon", "mlp"], "not a Slurm time"),
    ]:
        ran = cli("slurm", *args)
        assert ran.code == 2 and words in ran.err and len(ran.err.strip().splitlines()) == 1
    (tmp_path / "x.sbatch").write_text("keep")
    ran = cli("slurm", "--nodes", "1", "--gpus-per-node", "1", "-o", str(tmp_path / "x.sbatch"), "mlp")
    assert ran.code == 2 and "--force" in ran.err and (tmp_path / "x.sbatch").read_text() == "keep"


def test_the_script_runs_two_nodes_through_c10d(tmp_path, no_leftover_workers):
    script = tmp_path / "train.py"
    assert cli("new", str(script)).code == 0
    sbatch = tmp_path / "job.sbatch"
    ran = cli(
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "0",
        "--cpus-per-node",
        "1",
        "--rdzv-port",
        str(free_port()),
        "--log-dir",
        str(tmp_path / "logs"),
        "-o",
        str(sbatch),
        str(script),
    )
    assert ran.code == 0, ran.err
    env = {
        **os.environ,
        "PATH": f"{FAKE_SLURM}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "fake[1-2]",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "job",
        "SLURM_CPUS_PER_TASK": "1",
    }
    proc = subprocess.Popen(
        ["bash", str(sbatch)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        pytest.fail("the sbatch script did not finish within 150 s")
    logs = {n: (tmp_path / "logs" / f"job-4242-node{n}.out") for n in (0, 1)}
    logs = {n: path.read_text() if path.exists() else "" for n, path in logs.items()}
    assert proc.returncode == 0, out + "\n".join(logs.values())
    # one group of 2 ranks across the 2 nodes: the script's rank 0 prints for both, rank 1 (node 1) prints nothing
    assert "samples on 2 ranks)" in logs[0], logs[0]
    assert "samples on" not in logs[1]


def test_own_flags_before_or_after_the_target_and_the_rest_to_the_target(tmp_path):
    before = cli("slurm", "--nodes", "2", "--gpus-per-node", "4", "--time", "02:00:00", "mlp", "--epochs", "1")
    after = cli("slurm", "mlp", "--nodes", "2", "--epochs", "1", "--gpus-per-node", "4", "--time", "02:00:00")
    mixed = cli("slurm", "--nodes", "2", "mlp", "--gpus-per-node", "4", "--epochs", "1", "--time", "02:00:00")
    assert before.code == after.code == mixed.code == 0, (after.err, mixed.err)
    assert after.out == before.out == mixed.out
    assert "-m ddplab.recipes.mlp --epochs 1" in after.out and "#SBATCH --time=02:00:00" in after.out
    # a value given before the target is not reset by the defaults of the flags looked for after it
    assert (
        "#SBATCH --time=02:00:00"
        in cli("slurm", "--time", "02:00:00", "mlp", "--nodes", "2", "--gpus-per-node", "1").out
    )
    # after `--`, even a flag of slurm's own name is the target's
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    ran = cli("slurm", str(script), "--nodes", "2", "--gpus-per-node", "1", "--", "--time", "5")
    assert ran.code == 0 and f"{script} --time 5" in ran.out and "#SBATCH --time=01:00:00" in ran.out
    for args, words in [
        (["mlp", "--nodes", "2"], "missing --gpus-per-node"),
        (["mlp", "--nodes", "0", "--gpus-per-node", "1"], "not a positive whole number"),
    ]:
        ran = cli("slurm", *args)
        assert ran.code == 2 and words in ran.err and len(ran.err.strip().splitlines()) == 1, ran.err
