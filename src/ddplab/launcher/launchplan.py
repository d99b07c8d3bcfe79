"""What the agent will start, decided from its spec alone: `plan(spec, spec_path) -> LaunchPlan`.

Planning is a pure function, as accelerate's `prepare_multi_gpu_env(args) -> dict` is, so that it is tested in
milliseconds, with no rank, socket or store: it returns torch's LaunchConfig, what each rank runs, the loopback
port whose rendezvous store the agent must serve first, and the variables the agent must set for its ranks. The
agent (`agent.main`) then does what has effects: it serves the store, sets the variables and calls elastic_launch.

Two kinds of spec:
- "function": ddplab's own `module:function` target on `nproc` local ranks (check, train, bench, scale), over a
  static rendezvous on loopback, or torchrun's c10d rendezvous when several nodes meet (`nodes`);
- "script": a user's script with torchrun's own options (`ddplab launch`), configured by torchrun's own
  config_from_args, each rank started through bootstrap.py so that it dies with the agent.

torchrun's config_from_args sets OMP_NUM_THREADS in os.environ when it is unset and several ranks share a node;
the plan puts it back and returns the variable in `env` instead. What planning cannot avoid is torch's own
DefaultLogsSpecs, built with the LaunchConfig, making the log folder it is given when missing: every spec names
one that already exists (the run folder's logs/, `ddplab launch`'s log folder).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.launcher.api import LaunchConfig

BOOTSTRAP = str(Path(__file__).with_name("bootstrap.py"))


class Refused(Exception):
    """torchrun's own configuration refused the options (torch.distributed.run.config_from_args)."""


@dataclass(frozen=True)
class LaunchPlan:
    """What `elastic_launch(config, entrypoint)(*args)` will start, and what the agent prepares first."""

    config: LaunchConfig
    entrypoint: Callable | str  # a program (new interpreters) or a function (workers forked from the agent)
    args: tuple[str, ...]
    loopback_port: int | None = None  # serve the static rendezvous store here, on 127.0.0.1 only, before launching
    env: dict[str, str] = field(default_factory=dict)  # set in the agent, so that every rank inherits them


def plan(spec: dict, spec_path: str) -> LaunchPlan:
    """The launch a spec describes (spec_path: where it is, which ddplab's own ranks are given to read)."""
    if spec.get("kind") == "function":
        return plan_function(spec, spec_path)
    if spec.get("kind") == "script":
        return plan_script(spec["torchrun"])
    raise ValueError(f"spec kind {spec.get('kind')!r}: expected 'function' or 'script'")


def plan_function(spec: dict, spec_path: str) -> LaunchPlan:
    """ddplab's own target on spec["nproc"] ranks of this node: a static rendezvous on loopback, or with
    spec["nodes"] (launcher.nodes.Nodes as a dict) torchrun's c10d rendezvous, hosted by node 0."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig

    if spec["nproc"] < 1 or spec["max_restarts"] < 0:
        raise ValueError(
            f"nproc {spec['nproc']}, max_restarts {spec['max_restarts']}: need at least 1 process "
            "and no negative restarts"
        )
    common = dict(
        nproc_per_node=spec["nproc"],
        max_restarts=spec["max_restarts"],
        monitor_interval=0.05,
        start_method="fork",
        logs_specs=DefaultLogsSpecs(log_dir=str(Path(spec["run_dir"]) / "logs"), redirects=Std.ALL, tee=Std.NONE),
    )
    nodes, loopback_port = spec["nodes"], None
    if nodes is None:  # this machine alone: a static rendezvous on loopback, whose store the agent serves
        loopback_port = spec["master_port"]
        config = LaunchConfig(
            min_nodes=1,
            max_nodes=1,
            run_id=spec["run_id"],
            rdzv_backend="static",
            rdzv_endpoint=f"127.0.0.1:{loopback_port}",
            rdzv_configs={"rank": 0},
            local_addr="127.0.0.1",
            **common,
        )
    else:  # several machines: torchrun's c10d rendezvous, hosted by node 0
        config = LaunchConfig(
            min_nodes=nodes["count"],
            max_nodes=nodes["count"],
            run_id=nodes["rdzv_id"],
            rdzv_backend="c10d",
            rdzv_endpoint=f"{nodes['host']}:{nodes['port']}",
            rdzv_configs={"is_host": nodes["rank"] == 0, "join_timeout": nodes["join_timeout"]},
            local_addr=nodes["local_addr"],
            **common,
        )
    if spec["fresh_workers"]:  # new interpreters, as torchrun starts a script's ranks
        return LaunchPlan(config, sys.executable, ("-u", "-m", "ddplab.launcher.worker", spec_path), loopback_port)
    from ddplab.launcher.worker import main as worker_main

    return LaunchPlan(config, worker_main, (spec_path,), loopback_port)


def plan_script(torchrun: dict) -> LaunchPlan:
    """A user's script under torchrun's options (vars of torchrun's parsed Namespace), configured by torchrun's own
    config_from_args; each rank's command goes through bootstrap.py. Options torchrun refuses raise Refused."""
    from torch.distributed.run import config_from_args, parse_min_max_nnodes

    ns = argparse.Namespace(**torchrun)
    # What torch.distributed.run.run() decides before config_from_args (torch 2.6-2.13 alike): a standalone or
    # single-node static run without a port gets its own c10d store on a free port.
    if ns.standalone or (
        ns.rdzv_backend == "static"
        and not ns.rdzv_endpoint
        and ns.master_port is None
        and parse_min_max_nnodes(ns.nnodes)[1] == 1
    ):
        ns.rdzv_backend, ns.rdzv_endpoint, ns.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    if ns.master_port is None:
        ns.master_port = 29500
    try:
        with _quiet_thread_banner():
            (config, cmd, cmd_args), env = _environ_kept(config_from_args, ns)
    except (ValueError, AssertionError, RuntimeError) as e:
        raise Refused(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
    # --run-path (where torch has it): torchrun would call runpy in a spawned child; a script it is
    if callable(cmd) or getattr(ns, "run_path", False):
        cmd, cmd_args = os.getenv("PYTHON_EXEC", sys.executable), ["-u", *cmd_args]
    if ns.no_python:
        return LaunchPlan(config, sys.executable, ("-u", BOOTSTRAP, "--exec", cmd, *cmd_args), env=env)
    assert cmd_args[0] == "-u"
    return LaunchPlan(config, cmd, ("-u", BOOTSTRAP, *cmd_args[1:]), env=env)


@contextlib.contextmanager
def _quiet_thread_banner():
    """torchrun's 5-line banner for setting OMP_NUM_THREADS=1 stays out of the console; the variable is still set
    (returned in `env`), and `ddplab launch` says so in one line (userscript/plan.py)."""
    import logging

    log = logging.getLogger("torch.distributed.run")

    def keep(record: logging.LogRecord) -> bool:
        return "OMP_NUM_THREADS" not in str(record.msg)

    log.addFilter(keep)
    try:
        yield
    finally:
        log.removeFilter(keep)


def _environ_kept(fn, *args):
    """(fn(*args), the variables it set in os.environ), with os.environ put back as it was, even when fn raises."""
    before = dict(os.environ)
    try:
        result = fn(*args)
    finally:
        changed = {k: v for k, v in os.environ.items() if before.get(k) != v}
        for name in changed:
            if name in before:
                os.environ[name] = before[name]
            else:
                del os.environ[name]
        for name in before.keys() - os.environ.keys():
            os.environ[name] = before[name]
    return result, changed
