"""A real two-node Slurm cluster on this one machine, for the tests: munged, slurmctld and two slurmd (n1, n2) from
one slurm.conf, each node on its own port of 127.0.0.1 (NodeAddr), all in a temporary folder, all ended after.

Needs Debian's slurm-wlm and munge (`apt-get install -y slurm-wlm munge`, what .ci/run installs) and root (slurmd
starts the jobs' processes as the submitting user). A cluster that cannot start FAILS the test with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ddplab.ports import free_port

NODES = ("n1", "n2")
CPUS = 4  # per node, declared (config_overrides: a 2-core machine runs 2 nodes x 4): room for three 2-node jobs
INSTALL = "apt-get install -y slurm-wlm munge"


def _need(condition: bool, why: str) -> None:
    """CI (.ci/run sets DDPLAB_REQUIRE_ENGINES=1 after installing Slurm) fails with the reason; a developer's
    machine without Slurm or root skips with it, so that the README's test command passes on a fresh machine."""
    if not condition:
        if os.environ.get("DDPLAB_REQUIRE_ENGINES"):
            pytest.fail(f"the Slurm cluster cannot start: {why}", pytrace=False)
        pytest.skip(f"the Slurm cluster cannot start: {why} (CI requires it: DDPLAB_REQUIRE_ENGINES=1)")


def _conf(d: Path, ports: list[int]) -> str:
    host = os.uname().nodename
    lines = [
        "ClusterName=ddplab",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d}/munge.sock",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/slurmctld.pid",
        f"SlurmdPidFile={d}/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/slurmctld.log",
        f"SlurmdLogFile={d}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",  # no cgroups needed; signals still reach every process of a step
        "TaskPlugin=task/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MpiDefault=none",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "KillWait=5",
        "MinJobAge=600",  # finished jobs stay visible to `scontrol show job` for the assertions
    ]
    for name, port in zip(NODES, ports[1:]):
        lines.append(f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} CPUs={CPUS} State=UNKNOWN")
    lines.append(f"PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


class Cluster:
    def __init__(self, d: Path):
        self.dir = d
        self.env = {**os.environ, "SLURM_CONF": str(d / "slurm.conf")}

    def run(self, *argv: str, check: bool = True) -> str:
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, script: Path, cwd: Path, env: dict | None = None) -> str:
        done = subprocess.run(
            ["sbatch", "--parsable", str(script)],
            env={**self.env, **(env or {})},
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict: JobState, Restarts, ExitCode..."""
        text = self.run("scontrol", "show", "job", "-o", job_id, check=False)
        return dict(part.split("=", 1) for part in text.split() if "=" in part)

    def log(self) -> str:
        return "\n".join(
            f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:] for p in sorted(self.dir.glob("slurm*.log"))
        )

    def pids(self) -> list[int]:
        found = []
        for name in ("slurmctld.pid", *(f"slurmd-{n}.pid" for n in NODES), "munged.pid"):
            with contextlib.suppress(OSError, ValueError):
                found.append(int((self.dir / name).read_text().split()[0]))
        return found


@contextlib.contextmanager
def cluster(d: Path):
    missing = [tool for tool in ("munged", "slurmctld", "slurmd", "sbatch", "scontrol") if not shutil.which(tool)]
    _need(not missing, f"{', '.join(missing)} not installed: {INSTALL}")
    _need(os.geteuid() == 0, "slurmd must run as root here (it starts jobs as the submitting user)")
    for sub in ("state", "spool"):
        (d / sub).mkdir(parents=True)
    key = d / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    c = Cluster(d)
    (d / "slurm.conf").write_text(_conf(d, [free_port() for _ in range(1 + len(NODES))]))
    try:
        steps = [
            ["munged", "-f", f"--socket={d}/munge.sock", f"--key-file={key}", f"--pid-file={d}/munged.pid",
             f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"],
            ["slurmctld", "-i"],
            *(["slurmd", "-N", name] for name in NODES),
        ]  # fmt: skip
        for argv in steps:
            done = subprocess.run(argv, env=c.env, capture_output=True, text=True, timeout=30)
            _need(done.returncode == 0, f"{' '.join(argv[:3])}: exit {done.returncode}: {done.stderr.strip()}")
        deadline = time.monotonic() + 30
        while True:
            state = c.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).split()
            if state.count("idle") == len(NODES):
                break
            _need(time.monotonic() < deadline, f"nodes not idle after 30 s ({' '.join(state)}):\n{c.log()}")
            time.sleep(0.3)
        yield c
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=c.env, capture_output=True, timeout=30)
        pids = c.pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie of ours counts as gone
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True
