"""`ddplab slurm`: the sbatch script is valid bash with Slurm's preemption pieces, and its flags are torchrun's (the
old --nodes / --gpus-per-node kept as aliases), before or after the target. In-process: the script is run for real
on a real Slurm in tests/engines/test_slurm_real.py."""

import subprocess

from conftest import refused

from ddplab.cli import main


def _slurm(capsys, *args: str, cwd=None) -> tuple[int, str]:
    import os

    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        code = main(["slurm", *args])
    finally:
        os.chdir(here)
    return code, capsys.readouterr().out


def test_script_for_a_recipe_is_valid_bash_with_requeue_and_signal(capsys, tmp_path):
    out = tmp_path / "gpt.sbatch"
    code, said = _slurm(
        capsys, "--nnodes", "4", "--nproc-per-node", "8", "--partition", "a100", "--time", "02:00:00",
        "--checkpoint-dir", "ckpt", "--grace", "90", "-o", str(out), "gpt", "--layers", "12", cwd=tmp_path,
    )  # fmt: skip
    assert code == 0
    assert said.splitlines() == [
        f"wrote {out}: 4 node(s) × 8 rank(s), each node under ddplab launch",
        f"submit it with: sbatch {out}",
    ]
    text = out.read_text()
    assert text.splitlines()[1].startswith("# Written by `ddplab slurm --nnodes 4 --nproc-per-node 8 --partition a100")
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0
    for line in [
        "#SBATCH --nodes=4",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --partition=a100",
        "#SBATCH --time=02:00:00",
        "#SBATCH --signal=B:USR1@90",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
        "ddplab launch",
        '--nnodes="$SLURM_NNODES"',
        '--rdzv-endpoint="$head_addr:29500"',
        '--rdzv-conf="is_host=$(( $SLURM_NODEID == 0 ))"',
        "--grace=90",
        "-m ddplab.recipes.gpt --layers 12 --checkpoint-dir ckpt",
        'scontrol requeue "$SLURM_JOB_ID"',
        "%x-%j-node%n.out",
    ]:
        assert line in text, line
    assert "torchrun" not in text.replace("torchrun sets them", "").replace("torchrun's", "")
    assert (tmp_path / "logs").is_dir()  # sbatch opens --output before the script runs: it must exist


def test_default_output_is_beside_the_script(capsys, tmp_path):
    script = tmp_path / "sub" / "train.py"
    script.parent.mkdir()
    script.write_text("print('hi')\n")
    code, said = _slurm(capsys, "--nnodes", "2", "--nproc-per-node", "1", str(script), cwd=tmp_path)
    assert code == 0 and (tmp_path / "sub" / "train.sbatch").is_file()
    assert said.strip().endswith(f"submit it with: sbatch {tmp_path / 'sub' / 'train.sbatch'}")


def test_old_flag_names_and_own_flags_after_the_target(capsys, tmp_path):
    codes, texts = [], []
    for i, args in enumerate(
        [
            ["--nnodes", "2", "--nproc-per-node", "4", "--time", "02:00:00", "mlp", "--epochs", "1"],
            ["mlp", "--nodes", "2", "--epochs", "1", "--gpus-per-node", "4", "--time", "02:00:00"],
            ["--nodes", "2", "mlp", "--nproc-per-node", "4", "--epochs", "1", "--time", "02:00:00"],
        ]
    ):
        code, _ = _slurm(capsys, *args, "-o", str(tmp_path / f"{i}.sbatch"), cwd=tmp_path)
        codes.append(code)
        texts.append((tmp_path / f"{i}.sbatch").read_text().split("\n", 2)[2])  # past the "Written by" line
    assert codes == [0, 0, 0] and texts[0] == texts[1] == texts[2]
    assert "-m ddplab.recipes.mlp --epochs 1" in texts[0] and "#SBATCH --time=02:00:00" in texts[0]
    # after `--`, even a flag of slurm's own name is the target's
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code, _ = _slurm(capsys, str(script), "--nnodes", "2", "--nproc-per-node", "1", "--", "--time", "5", cwd=tmp_path)
    text = (tmp_path / "train.sbatch").read_text()
    assert code == 0 and f"{script} --time 5" in text and "#SBATCH --time=01:00:00" in text


def test_usage_says_what_is_required(capsys):
    """42.12: the usage line showed --nodes optional while the help said required."""
    from ddplab.cli import build_parser

    usage = build_parser(["slurm"])._subparsers._group_actions[0].choices["slurm"].format_usage()
    assert "--nnodes N --nproc-per-node P" in usage and "[--nnodes" not in usage


def test_bad_input_is_one_line(capsys, tmp_path):
    for args, words in [
        (["--nnodes", "2", "--nproc-per-node", "1", "nosuch"], "neither a recipe"),
        (["--nnodes", "0", "--nproc-per-node", "1", "mlp"], "not a positive whole number"),
        (["--nnodes", "1", "--nproc-per-node", "1", "--time", "soon", "mlp"], "not a Slurm time"),
        (["mlp", "--nnodes", "2"], "missing --nproc-per-node"),
        (["mlp", "--nnodes", "0", "--nproc-per-node", "1"], "not a positive whole number"),
    ]:
        assert words in refused(capsys, "slurm", *args, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == []
