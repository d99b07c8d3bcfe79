"""What `ddplab slurm`, `ddplab sky` and `ddplab k8s` write, from one job description: each file passes its engine's
own schema (SkyPilot's task schema, the Kubeflow Trainer API's TrainJob, vendored in schemas/ with their source) with
unknown keys refused, carries the same job (nodes, processes, script, checkpoint folder, grace, recovery codes), and
is said with the one command that submits it. In-process: no process is started."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import strictschema
import yamlread
from conftest import refused

from ddplab.cli import main

SCHEMAS = Path(__file__).parent / "schemas"
SKY = json.loads((SCHEMAS / "skypilot-0.14.1.json").read_text())
KF = json.loads((SCHEMAS / "kubeflow-trainer-api-2.3.0.json").read_text())


def _write(capsys, tmp_path, engine: str, *args: str) -> tuple[str, str]:
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code = main([engine, "--nnodes", "2", "--nproc-per-node", "8", *args, str(script), "--epochs", "3"])
    out = capsys.readouterr().out
    assert code == 0, out
    return out, out.split("submit it with: ")[1].strip()


def sky_problems(task: dict) -> list[str]:
    found = strictschema.problems(task, SKY["task"])
    found += strictschema.problems(task.get("resources", {}), SKY["resources"], path="/resources")
    for target, mount in task.get("file_mounts", {}).items():
        found += strictschema.problems(mount, SKY["storage"], path=f"/file_mounts/{target}")
    return found


def trainjob_problems(job: dict) -> list[str]:
    return strictschema.problems(job, KF["trainjob"])


def test_the_sky_task_passes_skypilots_schema_and_carries_the_job(capsys, tmp_path):
    out, submit = _write(capsys, tmp_path, "sky", "--checkpoint-dir", "/ckpt", "--bucket", "s3://me/ckpt")
    path = tmp_path / "train.sky.yaml"  # default: beside the script
    assert submit == f"sky jobs launch {path}" and f"wrote {path}" in out
    text = path.read_text()
    task = yamlread.load(text)
    assert sky_problems(task) == []
    assert task["num_nodes"] == 2 and task["resources"]["accelerators"] == "H100:8"
    assert task["resources"]["use_spot"] is True and task["resources"]["autostop"] == 10
    assert task["resources"]["job_recovery"]["recover_on_exit_codes"] == [3, 4]
    assert task["file_mounts"] == {"/ckpt": {"source": "s3://me/ckpt", "mode": "MOUNT"}}
    run = task["run"]
    for var in ("SKYPILOT_NODE_IPS", "SKYPILOT_NODE_RANK", "SKYPILOT_NUM_NODES", "SKYPILOT_NUM_GPUS_PER_NODE"):
        assert f"${var}" in run, var
    assert f"{tmp_path / 'train.py'} --epochs 3 --checkpoint-dir /ckpt" in run and "--grace=30" in run
    assert "s3://me/ckpt, mounted on every node" in text
    # without a bucket the checkpoint folder's fate is said plainly
    _write(capsys, tmp_path, "sky", "--checkpoint-dir", "/ckpt", "--force")
    assert "on the cluster's own disk" in (tmp_path / "train.sky.yaml").read_text()


def test_the_trainjob_passes_the_trainer_api_models_and_reads_pet_variables(capsys, tmp_path):
    out, submit = _write(capsys, tmp_path, "k8s", "--checkpoint-dir", "/ckpt", "--image", "me/train:1")
    path = tmp_path / "train.trainjob.yaml"
    assert submit == f"kubectl create -f {path}"
    text = path.read_text()
    job = yamlread.load(text)
    assert trainjob_problems(job) == []
    trainer = job["spec"]["trainer"]
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == 8 and trainer["image"] == "me/train:1"
    assert trainer["resourcesPerNode"]["limits"] == {"nvidia.com/gpu": "8"}
    script = trainer["args"][0]
    for var in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"):
        assert f"${var}" in script, var
    assert "failurePolicy.maxRestarts" in text  # what restarts a pod that exited 4, said in the file


def test_the_strict_walk_refuses_what_the_engines_would_not_know():
    """The walk is not a rubber stamp: a misspelt key, a wrong type, an exit code out of range are named."""
    task = {"num_nodes": 2, "resouces": {}, "run": "x"}
    assert sky_problems(task) == ["/resouces: unknown key"]
    bad = {"accelerators": "H100:8", "job_recovery": {"recover_on_exit_codes": [3, 400]}}
    assert any("400 > 255" in p for p in sky_problems({"resources": bad}))
    job = {"apiVersion": "v", "kind": "TrainJob", "spec": {"runtimeRef": {"name": "x"}, "trainer": {"numNode": 2}}}
    assert trainjob_problems(job) == ["/spec/trainer/numNode: unknown key"]
    job["spec"]["trainer"] = {"numNodes": "2"}
    assert trainjob_problems(job) and "is not integer" in trainjob_problems(job)[0]


def test_one_job_description_gives_the_same_job_to_every_engine(capsys, tmp_path):
    """The per-node command differs only in the engine's variables."""
    texts = {}
    for engine, suffix in (("slurm", ".sbatch"), ("sky", ".sky.yaml"), ("k8s", ".trainjob.yaml")):
        image = ["--image", "me/train:1"] if engine == "k8s" else []
        _write(capsys, tmp_path, engine, "--checkpoint-dir", "/ckpt", "--grace", "45", "--force", *image)
        texts[engine] = (tmp_path / f"train{suffix}").read_text()
    for engine, text in texts.items():
        command = text[text.index("ddplab launch \\") :].split("\n\n")[0]
        assert re.search(r"--nnodes=\"\$\w+\"", command), (engine, command)
        for fixed in (
            "--rdzv-backend=c10d",
            "--grace=45",
            f"{tmp_path / 'train.py'} --epochs 3 --checkpoint-dir /ckpt",
        ):
            assert fixed in command, (engine, fixed)
        assert "is_host=$((" in command  # node 0 hosts the rendezvous, by node rank


@pytest.mark.parametrize("engine", ["slurm", "sky", "k8s"])
def test_bad_input_is_one_line_and_nothing_is_written(capsys, tmp_path, engine):
    assert "missing --nproc-per-node" in refused(capsys, engine, "--nnodes", "2", "mlp", cwd=tmp_path)
    if engine == "k8s":
        assert "missing --image" in refused(
            capsys, engine, "--nnodes", "2", "--nproc-per-node", "1", "mlp", cwd=tmp_path
        )
        engine = ("k8s", "--image", "me/train:1")
    engine = engine if isinstance(engine, tuple) else (engine,)
    assert "neither a recipe" in refused(capsys, *engine, "--nnodes", "2", "--nproc-per-node", "1", "nosuch")
    (tmp_path / "x.yaml").write_text("keep")
    line = refused(capsys, *engine, "--nnodes", "1", "--nproc-per-node", "1", "-o", str(tmp_path / "x.yaml"), "mlp")
    assert "--force" in line and (tmp_path / "x.yaml").read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]  # no "submit with" for a file never written
