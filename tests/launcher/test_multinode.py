"""Several machines through torchrun's c10d rendezvous: two network namespaces act as two hosts."""

import json
import sys

from conftest import kill_tree
from netns import hosts, popen_in


def _both(hosts, argv_for, timeout=120):
    procs = [popen_in(host, argv_for(rank, host.addr)) for rank, host in enumerate(hosts)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            kill_tree(p.pid)
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


def test_check_across_two_hosts(no_leftover_workers):
    with hosts(2) as made:
        endpoint = f"{made[0].addr}:29561"
        ran = _both(
            made,
            lambda rank, addr: [
                sys.executable,
                "-m",
                "ddplab",
                "check",
                "--json",
                "--nproc",
                "1",
                "--device",
                "cpu",
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--rdzv-endpoint",
                endpoint,
            ],
        )
    for code, out, err in ran:
        assert code == 0, err[-3000:] + out[-3000:]
        result = json.loads(out)
        assert result["ok"] and result["nnodes"] == 2
        stages = {s["name"]: s for s in result["stages"]}
        assert "c10d rendezvous on " + endpoint in stages["preflight"]["figure"]
        assert stages["collectives"]["status"] == "PASS" and stages["ddp"]["status"] == "PASS"
        assert [n["verdict"] for n in result["nodes"]] == ["READY", "READY"]  # the cross-node preflight passed
    ranks = sorted(r for code, out, err in ran for r in json.loads(out)["ranks"])
    assert ranks == [0, 1]  # the two hosts formed one group of two


def test_training_across_two_hosts_equals_one_host_with_the_same_world_size(no_leftover_workers):
    from conftest import cli

    flags = ["--epochs", "1", "--json", "--device", "cpu"]
    with hosts(2) as made:
        endpoint = f"{made[0].addr}:29562"
        ran = _both(
            made,
            lambda rank, addr: [
                sys.executable,
                "-m",
                "ddplab",
                "train",
                "linear",
                "--nproc",
                "1",
                *flags,
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--rdzv-endpoint",
                endpoint,
            ],
        )
    for code, out, err in ran:
        assert code == 0, err[-3000:] + out[-3000:]
    across = json.loads(ran[0][1])  # node 0 holds rank 0 and prints the training's result
    assert json.loads(ran[1][1])["ranks"] == [1]
    alone = cli("train", "linear", "--nproc", "2", *flags).json()
    assert across["world_size"] == alone["world_size"] == 2
    # gloo sums two gradients in the same order on one host as on two: the results are bitwise equal
    assert (across["weight"], across["bias"], across["final_loss"]) == (
        alone["weight"],
        alone["bias"],
        alone["final_loss"],
    )
