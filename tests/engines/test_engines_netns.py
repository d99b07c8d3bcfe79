"""What `ddplab sky` and `ddplab k8s` write, run for real on two hosts (network namespaces, tests/netns.py) with the
variables each engine sets on its nodes: the task's `run` section with SKYPILOT_*, the TrainJob's container command
with the PET_* variables (and the env the TrainJob lists). Both engines' jobs run at once in one shared run (4 node
processes, 1 rank each): each forms one group of 2 ranks across the hosts, passes the cross-node preflight and trains
the linear recipe with identical parameters on every rank."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yamlread
from conftest import kill_tree
from netns import hosts, popen_in

from ddplab.cli import main
from ddplab.ports import free_port

pytestmark = pytest.mark.slow  # minutes on a loaded 2-core machine: one shared run for the whole module

DEADLINE_S = 180


def _file(tmp: Path, engine: str, *extra: str) -> dict:
    out = tmp / f"{engine}.yaml"
    args = [engine, "--nnodes", "2", "--nproc-per-node", "1", "--cpu", "-o", str(out), *extra]
    assert main([*args, "linear", "--epochs", "1"]) == 0
    return yamlread.load(out.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("engines")
    sky = _file(tmp, "sky", "--rdzv-port", str(free_port()))
    k8s = _file(tmp, "k8s", "--image", "me/train:1")
    k8s_port = str(free_port())
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # `ddplab` on the node, as the image/setup has it
    with hosts(2) as made:
        ips = "\n".join(h.addr for h in made)
        procs = {}
        for rank, host in enumerate(made):
            sky_env = {
                "PATH": path,
                "SKYPILOT_NODE_IPS": ips,
                "SKYPILOT_NODE_RANK": str(rank),
                "SKYPILOT_NUM_NODES": "2",
                "SKYPILOT_NUM_GPUS_PER_NODE": "0",
                "SKYPILOT_TASK_ID": "sky-test-1",
            }
            procs[("sky", rank)] = popen_in(host, ["bash", "-c", sky["run"]], sky_env)
            trainer = k8s["spec"]["trainer"]
            pet_env = {
                "PATH": path,
                **{e["name"]: e["value"] for e in trainer["env"]},
                "PET_NNODES": str(trainer["numNodes"]),
                "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
                "PET_NODE_RANK": str(rank),
                "PET_MASTER_ADDR": made[0].addr,
                "PET_MASTER_PORT": k8s_port,
            }
            procs[("k8s", rank)] = popen_in(host, [*trainer["command"], *trainer["args"]], pet_env)
        try:
            outs = {key: p.communicate(timeout=DEADLINE_S) for key, p in procs.items()}
        finally:
            for p in procs.values():
                kill_tree(p.pid)
    yield {key: (procs[key].returncode, out + err) for key, (out, err) in outs.items()}


@pytest.mark.parametrize("engine", ["sky", "k8s"])
def test_every_node_runs_ddplab_launch_and_the_recipe_trains(runs, engine):
    codes = {rank: runs[(engine, rank)][0] for rank in (0, 1)}
    said = "\n".join(f"--- node {rank}\n{runs[(engine, rank)][1][-4000:]}" for rank in (0, 1))
    assert codes == {0: 0, 1: 0}, said
    for rank in (0, 1):
        assert "ddplab launch: PASS" in runs[(engine, rank)][1], said
    both = runs[(engine, 0)][1] + runs[(engine, 1)][1]
    assert "parameters identical on all 2 rank(s): PASS" in both, said  # one group across the two hosts
