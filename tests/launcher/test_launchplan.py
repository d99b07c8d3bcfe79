"""The launch plan is a pure function of the spec: what torch is told, what each rank runs, what the agent prepares.

No process, socket or store here: each test plans and reads the plan (milliseconds). The launches themselves are
tested by test_local.py, test_restarts.py and test_multinode.py.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys

import pytest
import torch.distributed
from torch.distributed.run import get_args_parser

from ddplab.launcher import worker
from ddplab.launcher.launchplan import BOOTSTRAP, Refused, plan, plan_script
from ddplab.launcher.nodes import Nodes


@pytest.fixture(autouse=True)
def nothing_opened_or_started(monkeypatch):
    """Planning must open no socket and no store, and start no process."""

    def refuse(*args, **kwargs):
        raise AssertionError("planning opened a socket, a store or a process")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(torch.distributed, "TCPStore", refuse)


def planned(spec: dict, spec_path: str = "/run/ddplab-spec.json"):
    """plan(spec), checked to leave os.environ and the run folder as they were."""
    before, files = dict(os.environ), _files(spec)
    result = plan(spec, spec_path)
    assert dict(os.environ) == before
    assert _files(spec) == files
    return result


def _files(spec: dict) -> list[str]:
    folder = spec.get("run_dir") or (spec.get("torchrun") or {}).get("log_dir")
    return sorted(str(p) for p in os.scandir(folder)) if folder else []


def function_spec(tmp_path, **given) -> dict:
    """A spec as launcher.local.start writes it (its run folder holds logs/ already)."""
    (tmp_path / "logs").mkdir(exist_ok=True)
    return {
        "kind": "function",
        "target": "workers:sum_ranks",
        "nproc": 2,
        "master_port": 29555,
        "max_restarts": 0,
        "run_id": "ddplab-run-x",
        "fresh_workers": False,
        "nodes": None,
        "run_dir": str(tmp_path),
        **given,
    }


def script_spec(tmp_path, *argv: str) -> dict:
    """A spec as `ddplab launch` writes it: torchrun's parsed options, a log folder that exists."""
    options = vars(get_args_parser().parse_args(["--log-dir", str(tmp_path), *argv]))
    return {"kind": "script", "torchrun": options}


def test_ddplab_target_on_one_node_is_a_static_rendezvous_on_loopback_whose_store_the_agent_serves(tmp_path):
    launch = planned(function_spec(tmp_path, nproc=3, max_restarts=2))
    c = launch.config
    assert (c.min_nodes, c.max_nodes, c.nproc_per_node, c.max_restarts) == (1, 1, 3, 2)
    assert (c.rdzv_backend, c.rdzv_endpoint, c.rdzv_configs["rank"]) == ("static", "127.0.0.1:29555", 0)
    assert (c.local_addr, c.run_id, c.start_method) == ("127.0.0.1", "ddplab-run-x", "fork")
    assert c.logs_specs.root_log_dir == str(tmp_path / "logs")
    assert launch.loopback_port == 29555  # the agent serves it, bound to 127.0.0.1 only
    assert launch.env == {}


def test_forked_workers_run_the_worker_function_and_fresh_ones_a_new_interpreter(tmp_path):
    forked = planned(function_spec(tmp_path), "/run/spec.json")
    assert forked.entrypoint is worker.main and forked.args == ("/run/spec.json",)
    fresh = planned(function_spec(tmp_path, fresh_workers=True), "/run/spec.json")
    assert fresh.entrypoint == sys.executable
    assert fresh.args == ("-u", "-m", "ddplab.launcher.worker", "/run/spec.json")
    same = ("nproc_per_node", "rdzv_backend", "rdzv_endpoint", "run_id", "max_restarts", "local_addr")
    assert [getattr(fresh.config, k) for k in same] == [getattr(forked.config, k) for k in same]


@pytest.mark.parametrize("node_rank", [0, 1])
def test_ddplab_target_on_several_nodes_meets_at_node_0s_c10d_rendezvous(tmp_path, node_rank):
    nodes = Nodes(count=2, rank=node_rank, host="10.0.0.1", port=29400, rdzv_id="job7", local_addr="10.0.0.2")
    launch = planned(function_spec(tmp_path, nodes=dataclasses.asdict(nodes)))
    c = launch.config
    assert (c.min_nodes, c.max_nodes, c.nproc_per_node) == (2, 2, 2)
    assert (c.rdzv_backend, c.rdzv_endpoint, c.run_id, c.local_addr) == ("c10d", "10.0.0.1:29400", "job7", "10.0.0.2")
    assert c.rdzv_configs["is_host"] == (node_rank == 0) and c.rdzv_configs["join_timeout"] == 120
    assert launch.loopback_port is None  # node 0's agent hosts the c10d store inside the rendezvous itself


def test_a_users_script_runs_through_bootstrap_with_torchruns_own_configuration(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    launch = planned(
        script_spec(
            tmp_path,
            "--nproc-per-node",
            "2",
            "--max-restarts",
            "3",
            "--master-port",
            "29511",
            "train.py",
            "--lr",
            "0.1",
        )
    )
    c = launch.config
    assert (c.min_nodes, c.max_nodes, c.nproc_per_node, c.max_restarts) == (1, 1, 2, 3)
    assert (c.rdzv_backend, c.rdzv_endpoint, c.rdzv_configs["rank"]) == ("static", "127.0.0.1:29511", 0)
    assert launch.entrypoint == sys.executable
    assert launch.args == ("-u", BOOTSTRAP, "train.py", "--lr", "0.1")
    assert launch.loopback_port is None and launch.env == {}  # torchrun serves its own store; OMP was set


def test_the_variable_torchrun_sets_is_returned_not_set(tmp_path, monkeypatch):
    """config_from_args sets OMP_NUM_THREADS=1 in os.environ for several ranks; the plan hands it to the agent."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert planned(script_spec(tmp_path, "--nproc-per-node", "2", "train.py")).env == {"OMP_NUM_THREADS": "1"}
    assert planned(script_spec(tmp_path, "--nproc-per-node", "1", "train.py")).env == {}


def test_a_single_node_without_a_port_gets_its_own_c10d_store_as_torchrun_gives_it(tmp_path):
    first = planned(script_spec(tmp_path, "--nproc-per-node", "2", "train.py")).config
    assert (first.rdzv_backend, first.rdzv_endpoint) == ("c10d", "localhost:0")
    assert first.run_id != planned(script_spec(tmp_path, "--standalone", "train.py")).config.run_id  # one per run


def test_several_nodes_and_elastic_counts_are_torchruns(tmp_path):
    fixed = planned(
        script_spec(
            tmp_path,
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            "10.0.0.1:29400",
            "--rdzv-id",
            "job7",
            "train.py",
        )
    ).config
    assert (fixed.min_nodes, fixed.max_nodes, fixed.rdzv_backend) == (2, 2, "c10d")
    assert (fixed.rdzv_endpoint, fixed.run_id) == ("10.0.0.1:29400", "job7")
    elastic = planned(
        script_spec(
            tmp_path, "--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.0.0.1:29400", "train.py"
        )
    ).config
    assert (elastic.min_nodes, elastic.max_nodes) == (1, 4)


def test_a_module_and_a_program_go_through_bootstrap_too(tmp_path):
    module = planned(script_spec(tmp_path, "-m", "pkg.train", "--epochs", "1"))
    assert module.args == ("-u", BOOTSTRAP, "-m", "pkg.train", "--epochs", "1")
    program = planned(script_spec(tmp_path, "--no-python", "./train.sh", "fast"))
    assert (program.entrypoint, program.args) == (sys.executable, ("-u", BOOTSTRAP, "--exec", "./train.sh", "fast"))


@pytest.mark.parametrize(
    "argv",
    [
        ["--nnodes", "0", "train.py"],
        ["--max-restarts", "-1", "train.py"],
        ["--nproc-per-node", "two", "train.py"],
        ["--nproc-per-node", "2", "--no-python", "-m", "train.py"],  # refused after OMP_NUM_THREADS was set
    ],
    ids=["no-nodes", "negative-restarts", "count-in-words", "no-python-module"],
)
def test_options_torchrun_refuses_are_refused_and_leave_nothing_set(tmp_path, monkeypatch, argv):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = dict(os.environ)
    with pytest.raises(Refused):  # torchrun's own words, which differ between torch releases
        plan_script(script_spec(tmp_path, *argv)["torchrun"])
    assert dict(os.environ) == before


@pytest.mark.parametrize(
    "spec, why",
    [
        ({"kind": "binary"}, "spec kind 'binary'"),
        ({"nproc": 0}, "need at least 1 process"),
        ({"max_restarts": -1}, "no negative restarts"),
    ],
)
def test_a_bad_spec_is_a_value_error(tmp_path, spec, why):
    with pytest.raises(ValueError, match=why):
        plan({**function_spec(tmp_path), **spec}, "/run/spec.json")
