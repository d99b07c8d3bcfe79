"""Two nodes on one machine (issue 42.2): a learner practises `--nnodes 2` before renting two machines. With the
rendezvous endpoint on loopback every node is on this machine, and loopback is the address that works between them;
the preflight refuses a loopback or shared address only where it breaks: nodes on different machines."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import finish

from ddplab.checks.crossnode import Local, machine_id
from ddplab.checks.exchange import _compare
from ddplab.launcher.nodes import Nodes
from ddplab.ports import free_port


def _facts(slot: int, machine: str, address: str = "127.0.0.1") -> dict:
    return {
        "slot": slot, "node_rank": slot - 1, "hostname": "vm", "address": address, "machine": machine,
        "interface": "lo", "nnodes": 2, "nproc": 1, "rdzv_id": "none", "rdzv_backend": "c10d", "backend": "gloo",
        "versions": {"torch": "2"}, "clock": 0.0, "listen_port": 1, "listen_error": "", "is_host": slot == 1,
        "problems": [],
    }  # fmt: skip


def test_one_address_for_two_nodes_fails_only_across_machines():
    me = Local(Nodes(2, 0, "127.0.0.1", 29500, "none"), "gloo", 1, sets_interface=True, is_host=True, node_rank=0)
    here = machine_id()
    same = _compare(me, 1, {1: _facts(1, here), 2: _facts(2, here)}, {1: {}, 2: {}})
    assert [n["verdict"] for n in same.nodes] == ["READY", "READY"], same.findings
    apart = _compare(me, 1, {1: _facts(1, here, "10.0.0.5"), 2: _facts(2, "other", "10.0.0.5")}, {1: {}, 2: {}})
    assert any("both have the advertised address 10.0.0.5" in f.what for f in apart.failed), apart.findings


def test_two_check_nodes_on_loopback_are_ready(no_leftover_workers):
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            [
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
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )  # fmt: skip
        for rank in (0, 1)
    ]
    ran = [(p, *finish(p, 120, "a node of `ddplab check` on loopback overstayed 120 s")) for p in procs]
    for p, out, err in ran:
        assert p.returncode == 0, err[-3000:] + out[-2000:]
        result = json.loads(out)
        assert result["ok"] and [n["verdict"] for n in result["nodes"]] == ["READY", "READY"], out
        problems = [q["what"] for n in result["nodes"] for q in n["problems"]]
        assert not any("loopback" in q or "advertised address" in q for q in problems), problems
    assert sorted(r for _, out, _ in ran for r in json.loads(out)["ranks"]) == [0, 1]  # one group of two
