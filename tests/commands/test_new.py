"""`ddplab new`: the script it writes really trains on 2 CPU ranks under plain torchrun, saves a model that loads
into the plain model, resumes exactly after SIGTERM (ddplab.resume), and lints clean; existing files and unwritable
paths are refused in one line."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from conftest import LAUNCHER_VARS, cli, kill_tree, torchrun
from test_ckptfile_commit import append_only  # chattr +a by ioctl: a folder where rename(2) fails for real

from ddplab.commands.new import TASKS, render_script


def load_script(path: Path):
    """Import the written script as a module (its main() only runs under __main__), to reuse its model/data."""
    spec = importlib.util.spec_from_file_location(f"written_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def epoch_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("epoch ")]


def check_model(script: Path, saved: Path):
    """The saved state_dict has no DDP `module.` prefix, loads strictly into the plain model, and is the trained
    model (returns that plain model's predictions on the script's own data, for the caller to judge)."""
    assert saved.exists() and not Path(str(saved) + ".tmp").exists()
    state = torch.load(saved, map_location="cpu", weights_only=True)
    assert state and not any(k.startswith("module.") for k in state), list(state)
    written = load_script(script)
    model = written.make_model()
    model.load_state_dict(state)  # strict: every key matches the plain model
    x, y = written.make_dataset().tensors
    with torch.no_grad():
        return model(x), y


EPOCHS = "10"  # 32 steps each at 2 ranks: the loss settles within 5; SIGTERM at epoch 2 lands far from the end


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """One uninterrupted run of the regression script under plain torchrun, shared: its figures and model are
    judged, and it is the reference a preempted and resumed run must equal bit for bit. Its --out folder refuses
    renames when it can be made so (append-only, as root: a bucket mount's mountpoint-s3 refuses them too), so
    the final model.pt must be written without os.replace (resume.save_file)."""
    tmp = tmp_path_factory.mktemp("new")
    assert cli("new", "train.py", cwd=tmp, timeout=60).code == 0
    bucket = tmp / "bucket"
    bucket.mkdir()
    try:
        append_only(bucket, True)
        no_rename = True
    except OSError:  # not root, or a file system without the flag: a plain folder then
        no_rename = False
    try:
        done = torchrun(tmp / "train.py", "--epochs", EPOCHS, "--out", "bucket/model.pt")
        refused = None  # whether a rename there fails, as it failed for the script
        if no_rename and (bucket / "model.pt").exists():
            try:
                os.rename(bucket / "model.pt", bucket / "model.pt")
                os.rename(bucket / "model.pt", bucket / "renamed.pt")
                refused = False
            except PermissionError:
                refused = True
    finally:
        if no_rename:
            append_only(bucket, False)
    return tmp, done, refused


def test_regression_script_trains_on_two_cpu_ranks_and_saves_the_plain_model(whole):
    tmp_path, done, rename_refused = whole
    assert done.returncode == 0, done.stderr[-3000:]
    script = tmp_path / "train.py"
    lines = epoch_lines(done.stdout)
    # Rank 0 alone prints: one line per epoch, not one per rank.
    assert len(lines) == int(EPOCHS), done.stdout
    assert all("4096 samples on 2 ranks" in line for line in lines)
    losses = [float(re.search(r"loss (\d+\.\d+)", line).group(1)) for line in lines]
    # The data is y = x·w + b + noise of variance 0.01: the stated result is a loss of about 0.01 within 5 epochs.
    assert losses[4] < 0.02 < losses[0], losses
    pred, y = check_model(script, tmp_path / "bucket" / "model.pt")
    assert torch.nn.functional.mse_loss(pred, y).item() < 0.02
    # the training state after each epoch (32 steps of 64 x 2 samples), the last 3 kept
    assert sorted(p.name[:13] for p in (tmp_path / "checkpoints").iterdir()) == [
        "step-00000256",
        "step-00000288",
        "step-00000320",
    ]
    assert rename_refused in (True, None)  # written where a rename fails (EPERM): under its own name, whole


@pytest.mark.slow
def test_classification_script_trains_on_two_cpu_ranks_and_resumes(tmp_path):
    assert cli("new", "cls.py", "--task", "classification", cwd=tmp_path, timeout=60).code == 0
    script = tmp_path / "cls.py"
    done = torchrun(script, "--checkpoint-dir", "ck")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = epoch_lines(done.stdout)
    assert len(lines) == 5, done.stdout
    accuracy = float(re.search(r"accuracy (\d+\.\d+)%", lines[-1]).group(1))
    assert 88 < accuracy < 97, lines  # the classes overlap: about 92% is the stated result
    pred, y = check_model(script, tmp_path / "model.pt")
    assert (pred.argmax(dim=1) == y).float().mean().item() > 0.88
    # Started again with more epochs: every rank loads the newest checkpoint and carries on with epoch 6.
    again = torchrun(script, "--checkpoint-dir", "ck", "--epochs", "6")
    assert again.returncode == 0, again.stderr[-3000:]
    assert re.search(
        r"^resumed at step 160 \(the start of epoch 6\) from ck/step-00000160-\w+\.pt$", again.stdout, re.M
    )
    assert [line.split()[1] for line in epoch_lines(again.stdout)] == ["6/6"]


def test_sigterm_mid_run_saves_and_the_restart_ends_bitwise_equal(whole):
    """SIGTERM to `ddplab launch` of the written script mid-run (a spot instance's notice): every rank stops at the
    same step, the state is saved, exit 4; the same command again resumes there, and the final weights and every
    whole epoch's loss equal those of a run never interrupted, bit for bit."""
    tmp_path, reference, _ = whole
    assert reference.returncode == 0, reference.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    command = [
        sys.executable,
        "-m",
        "ddplab",
        "launch",
        "--nproc",
        "2",
        "--no-lint",
        "--grace",
        "20",
        "train.py",
        "--epochs",
        EPOCHS,
        "--checkpoint-dir",
        "cut",
        "--out",
        "cut.pt",
    ]
    first = subprocess.Popen(
        command,
        cwd=tmp_path,
        env={**env, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    # Read to the end by the one reader that saw the trigger: what it had read ahead past that line (on a busy
    # machine, the next epoch's line too) stays in its buffer, where communicate() would never see it.
    overstay = threading.Timer(150, kill_tree, [first.pid])
    overstay.start()
    seen = []
    try:
        for line in first.stdout:
            seen.append(line)
            if f"epoch 2/{EPOCHS}" in line:  # the second epoch's line: the run is well under way, far from its end
                first.send_signal(signal.SIGTERM)
    finally:
        overstay.cancel()
    first.wait(timeout=30)
    out = "".join(seen)
    assert first.returncode == 4, f"exit {first.returncode} (-9: overstayed 150 s)\n{out}"
    saved = re.search(r"preempted \(SIGTERM\), state saved at step (\d+)", out)
    assert saved and 64 <= int(saved.group(1)) < 32 * int(EPOCHS), out
    again = subprocess.run(
        command,
        cwd=tmp_path,
        env={**env, "OMP_NUM_THREADS": "1", "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resumed at step {saved.group(1)}" in again.stdout + again.stderr
    a, b = torch.load(tmp_path / "bucket" / "model.pt"), torch.load(tmp_path / "cut.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    stopped_in = int(saved.group(1)) // 32 + 1  # the epoch the signal cut: its figure covers part of it
    launched = re.sub(r"(?m)^\[default\d+\]:", "", out + again.stdout)  # ranks' lines, unprefixed
    cut = {line.split()[1]: line for line in epoch_lines(launched)}
    same = [line for line in epoch_lines(reference.stdout) if line.split()[1] != f"{stopped_in}/{EPOCHS}"]
    assert [cut.get(line.split()[1]) for line in same] == same, f"saved at {saved.group(1)}:\n{launched}"


def test_script_refuses_to_run_without_torchrun(tmp_path):
    assert cli("new", "t.py", cwd=tmp_path, timeout=60).code == 0
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    done = subprocess.run([sys.executable, "t.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip() == "start this script with a launcher: ddplab launch --nproc-per-node 2 t.py"


@pytest.mark.parametrize("task", TASKS)
def test_written_script_needs_only_torch_and_ddplab_resume(task):
    tree = ast.parse(render_script(task))
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    outside = {n for n in names if n.split(".")[0] not in sys.stdlib_module_names}
    assert {n.split(".")[0] for n in outside} == {"torch", "ddplab"}, names
    assert {n for n in outside if n.startswith("ddplab")} == {"ddplab.resume"}  # the runtime's one module
    names = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {"make_dataset", "make_model", "main", "train"} <= names  # one of each: the other task's were dropped


def test_refuses_to_overwrite_without_force(tmp_path):
    target = tmp_path / "train.py"
    target.write_text("my own work\n")
    ran = cli("new", str(target), timeout=60)
    assert ran.code == 2
    assert ran.err.count("\n") == 1 and "already exists" in ran.err and "--force" in ran.err
    assert target.read_text() == "my own work\n"  # untouched
    ran = cli("new", str(target), "--force", "--task", "classification", "--json", timeout=60)
    assert ran.code == 0, ran.err
    assert ran.json()["overwritten"] is True and ran.json()["task"] == "classification"
    assert "CrossEntropyLoss" in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]  # no temporary file left


def test_unwritable_paths_give_one_line_and_exit_2(tmp_path):
    (tmp_path / "afile").write_text("")
    cases = {
        str(tmp_path / "afile" / "train.py"): "is a file, not a directory",
        str(tmp_path): "is a directory",
    }
    if Path("/sys/kernel").is_dir():  # sysfs refuses new files even to root: a real permission failure
        cases["/sys/kernel/ddplab-new-test.py"] = "cannot write"
    for path, why in cases.items():
        ran = cli("new", path, timeout=60)
        assert ran.code == 2, (path, ran.err)
        assert ran.err.count("\n") == 1 and why in ran.err and "Traceback" not in ran.err, ran.err


def test_new_output_lints_clean(tmp_path):
    if importlib.util.find_spec("ddplab.commands.lint") is None:
        pytest.skip("`ddplab lint` does not exist yet (issue #6)")
    for task in TASKS:
        script = tmp_path / f"{task}.py"
        assert cli("new", str(script), "--task", task, timeout=60).code == 0
        ran = cli("lint", str(script), "--json", timeout=60)
        assert ran.code == 0, ran.out + ran.err
        found = ran.json()
        findings = found.get("findings", found) if isinstance(found, dict) else found
        assert not findings, findings


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_each_ddp_step_is_where_a_learner_looks(task, tmp_path):
    """Issue 42 point 11: set_epoch in the epoch loop itself (not only inside ckpt.epochs()), the run hint
    `ddplab launch`, no teardown lecture about gloo's threads, and short."""
    from ddplab.commands.new import write_script

    result = write_script(str(tmp_path / "t.py"), task, False)
    lines = (tmp_path / "t.py").read_text().splitlines()
    loop = next(i for i, line in enumerate(lines) if line.strip().startswith("for epoch in "))
    assert lines[loop + 1].strip().startswith("sampler.set_epoch(epoch)")
    assert result.run.startswith("ddplab launch --nproc-per-node 2 ")
    assert not any("thread" in line for line in lines) and result.lines <= 155
