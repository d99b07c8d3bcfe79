"""What every rank of a running DDP job is doing right now: find the job's processes, sample them, judge them.

Finding the ranks, without being told any pid:
- torchrun (and `ddplab launch`) start each worker as a subprocess whose environment holds RANK, LOCAL_RANK and
  TORCHELASTIC_RUN_ID: /proc/PID/environ tells who is who (readable for one's own processes, or as root);
- ddplab's own runs (`python -m ddplab.launcher.agent SPEC`) may fork their workers: a fork's /proc environ is its
  parent's, so their ranks come from the run's event files instead, where each worker wrote its pid and every mark.

Sampling: psutil for each rank process (CPU %, CPU time, memory); NVML for each GPU (utilisation, memory, power,
the processes on it). Judging: a rank or GPU doing (almost) nothing while the job runs is idle; a rank that made
far less progress than the others (ddplab's marks) is behind: the straggler. Without marks, CPU time cannot say who is
behind: in DDP the ranks move in step and the ones waiting in a collective for a straggler use the least CPU, so a
rank with far less CPU time is flagged waiting, and the busy rank is named as the likely straggler.
Only the ranks on this machine are visible.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ddplab.envinfo import visible_gpus
from ddplab.errors import DdplabError
from ddplab.launcher.agent import spec_path_of
from ddplab.launcher.local import events as run_events
from ddplab.launcher.procs import pid_alive

# Below a tenth of a core, a CPU rank is not computing: it waits (for another rank, for data) or it is stuck.
IDLE_CPU_PERCENT = 10.0
# nvidia-smi's utilisation is the share of time a kernel ran; under 10% a training GPU is starved.
IDLE_GPU_PERCENT = 10.0
# Ranks of one DDP job move in lockstep (every step ends in an all-reduce): a rank with under a third of the
# leader's CPU time, once the leader has used a few seconds (start-up aside), has not been doing the same work.
BEHIND_CPU_RATIO = 1 / 3
BEHIND_MIN_CPU_S = 2.0
# With progress marks (ddplab jobs) lockstep ranks stay within a mark or two; rank 0 may mark a few extra phases
# (saving, logging), hence the slack.
BEHIND_MIN_MARKS = 3
BEHIND_MARK_FRACTION = 0.2
# A rank hung in an NCCL collective keeps its GPU at ~100 % (NCCL's kernels spin while they wait for the peers), so
# utilisation cannot tell a hang from work. Progress marks can: a training rank marks every step, so a minute
# without a mark while it runs is worth a look (ddplab's own stall detector declares a hang at 300 s by default).
QUIET_S = 60.0
# torchrun's own variables: a process with them is a worker of some launcher.
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID")


# ----------------------------------------------------------------------------------------------- results


@dataclass
class RankView:
    pid: int
    rank: int | None  # None: a pid given with --pids that no launcher describes
    local_rank: int | None
    status: str  # psutil's: running, sleeping, disk-sleep, zombie... or "exited"
    cpu_percent: float = 0.0  # since the previous sample; 100 = one core busy
    cpu_seconds: float = 0.0  # user + system since the process started
    rss_mib: float = 0.0
    threads: int = 0
    progress: int | None = None  # progress marks so far (ddplab jobs only)
    phase: str | None = None  # the last one (ddplab jobs only)
    quiet_s: float | None = None  # seconds since its last progress mark (ddplab jobs only)
    gpu: int | None = None  # NVML index of the GPU this rank drives
    gpu_from: str | None = None  # "nvml" (seen among the GPU's processes) or "local_rank" (assumed)
    gpu_util_percent: float | None = None  # the whole GPU's utilisation
    gpu_memory_mib: float | None = None  # what this process holds on it
    flags: list[str] = field(default_factory=list)  # idle, behind, quiet, exited


@dataclass
class JobView:
    id: str  # "torchrun:AGENT_PID", "ddplab:RUN_ID" or "pids"
    launcher: str  # how it was started, for people
    agent_pid: int | None
    world_size: int | None
    ranks: list[RankView]


@dataclass
class GpuProcess:
    pid: int
    memory_mib: float | None
    name: str | None
    rank: int | None  # when it is one of the monitored ranks


@dataclass
class GpuView:
    index: int
    name: str
    util_percent: float | None
    memory_used_mib: float
    memory_total_mib: float
    power_w: float | None
    power_limit_w: float | None
    temperature_c: int | None
    processes: list[GpuProcess]
    flags: list[str] = field(default_factory=list)  # idle


@dataclass
class Snapshot:
    time: float  # Unix time of the sample
    interval_s: float
    jobs: list[JobView]
    gpus: list[GpuView]  # empty without an NVIDIA driver
    nvml: str  # "ok", or why there are no GPU figures
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdict: str = ""
    ok: bool = True


# ----------------------------------------------------------------------------------------------- finding ranks


@dataclass
class _Member:
    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    progress: int | None = None
    phase: str | None = None
    last_mark: float | None = None  # time.time() of the last progress mark
    cuda_visible: str | None = None


@dataclass
class _Job:
    id: str
    launcher: str
    agent_pid: int | None
    members: list[_Member]


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _launcher_name(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    if "ddplab" in text and " launch" in text:
        return "ddplab launch"
    if "torch.distributed.run" in text or any(os.path.basename(a) == "torchrun" for a in cmdline[:2]):
        return "torchrun"
    if "torch.distributed.launch" in text:
        return "torch.distributed.launch"
    return os.path.basename(cmdline[0]) if cmdline else "launcher"


def _ddplab_job(spec_path: str, procs: dict[int, dict]) -> _Job | None:
    """A ddplab run: the latest pid and progress of each rank, from the run's event files."""
    try:
        spec = json.loads(Path(spec_path).read_text())
        run_dir, nproc = Path(spec["run_dir"]), int(spec["nproc"])
    except (OSError, ValueError, KeyError, TypeError):
        # The run just ended and removed its directory, or another ddplab version wrote the spec: its ranks are
        # then found by their launcher variables, like any torchrun job's.
        return None
    members = []
    for local in range(nproc):
        try:
            events = run_events(run_dir, local)
        except (OSError, ValueError):
            continue  # the run just ended and removed its directory
        starts = [e for e in events if e.get("phase") == "start" and e.get("pid")]
        if not starts or starts[-1]["pid"] not in procs:
            continue
        pid = starts[-1]["pid"]
        # An elastic restart appends a new attempt to the same file: count only the current attempt's marks.
        current = events[events.index(starts[-1]) :]
        # A fork's environment is its agent's, CUDA_VISIBLE_DEVICES too.
        members.append(
            _Member(
                pid,
                starts[-1].get("rank", local),
                local,
                nproc,
                progress=len(current),
                phase=current[-1]["phase"],
                last_mark=current[-1].get("t"),
                cuda_visible=(_environ(pid) or {}).get("CUDA_VISIBLE_DEVICES"),
            )
        )
    worker_pids = {m.pid for m in members}
    agents = [
        pid for pid, info in procs.items() if spec_path_of(info["cmdline"]) == spec_path and pid not in worker_pids
    ]
    agent = min(agents, key=lambda pid: procs[pid]["create_time"], default=None)
    run_id = spec.get("run_id", run_dir.name)
    return _Job(
        f"ddplab:{run_id.removeprefix('ddplab-run-')}", f"ddplab runner (pid {agent}, {run_dir})", agent, members
    )


def _environ(pid: int) -> dict[str, str] | None:
    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return None


def find_jobs(pids: list[int] | None = None) -> list[_Job]:
    """Every DDP job running on this machine, or only those involving `pids` (a rank's or a launcher's).

    A pid that belongs to no job found is watched anyway, as a rank of unknown number.
    """
    procs = {}
    for p in psutil.process_iter(["pid", "ppid", "cmdline", "create_time"]):
        info = p.info
        if info["pid"] != os.getpid():
            procs[info["pid"]] = {**info, "cmdline": info["cmdline"] or []}

    jobs: list[_Job] = []
    specs = {spec for info in procs.values() if (spec := spec_path_of(info["cmdline"]))}
    for spec in sorted(specs):
        job = _ddplab_job(spec, procs)
        if job is not None and job.members:
            jobs.append(job)
    taken = {m.pid for job in jobs for m in job.members}

    env_ranks: dict[int, dict[str, str]] = {}
    for pid in procs:
        if pid in taken:
            continue
        env = _environ(pid)
        if env and "RANK" in env and ("LOCAL_RANK" in env or "TORCHELASTIC_RUN_ID" in env):
            env_ranks[pid] = env
    by_agent: dict[tuple, list[_Member]] = {}
    for pid, env in env_ranks.items():
        # DataLoader workers, compile workers... inherit the rank's environment: only the top one is the rank.
        if _has_ancestor_in(pid, env_ranks, procs):
            continue
        agent = procs[pid]["ppid"]
        key = (agent, env.get("TORCHELASTIC_RUN_ID", ""))
        by_agent.setdefault(key, []).append(
            _Member(
                pid,
                _int(env.get("RANK")),
                _int(env.get("LOCAL_RANK")),
                _int(env.get("WORLD_SIZE")),
                cuda_visible=env.get("CUDA_VISIBLE_DEVICES"),
            )
        )
    for (agent, _), members in sorted(by_agent.items()):
        launcher = _launcher_name(procs[agent]["cmdline"]) if agent in procs else "launcher"
        jobs.append(_Job(f"{launcher.split()[-1]}:{agent}", f"{launcher} (pid {agent})", agent, members))
    for job in jobs:
        job.members.sort(key=lambda m: (m.rank is None, m.rank, m.pid))

    if pids is None:
        return jobs
    return _select(jobs, pids, procs)


def _has_ancestor_in(pid: int, group: dict, procs: dict[int, dict]) -> bool:
    seen, ppid = set(), procs[pid]["ppid"]
    while ppid in procs and ppid not in seen:
        if ppid in group:
            return True
        seen.add(ppid)
        ppid = procs[ppid]["ppid"]
    return False


def require_running(pids: list[int]) -> None:
    """A pid given with --pids that names no process is bad input, said as the watch starts. One that ends later
    is a job that ended: find_jobs then finds nothing of it, and the idle guard counts that as idle."""
    for pid in pids:
        if not pid_alive(pid) and pid != os.getpid():
            raise DdplabError(
                f"no process with pid {pid} is running: pass the pid of a rank or of its launcher "
                "(see `ps -ef | grep -e torchrun -e ddplab`), or no --pids to find the job by itself"
            )


def _select(jobs: list[_Job], pids: list[int], procs: dict[int, dict]) -> list[_Job]:
    pids = [pid for pid in pids if pid in procs]
    wanted = set(pids)
    # A launcher given by pid stands for everything under it (torchrun, `ddplab train`, `ddplab launch`...).
    for pid in list(wanted):
        wanted |= {child.pid for child in _children(pid)}
    chosen = []
    for job in jobs:
        members = [m for m in job.members if m.pid in wanted or job.agent_pid in wanted]
        if members:
            chosen.append(_Job(job.id, job.launcher, job.agent_pid, members))
    known = {m.pid for job in jobs for m in job.members} | {job.agent_pid for job in jobs}
    loose = [pid for pid in pids if pid not in known and not any(_at_or_above(pid, j.agent_pid, procs) for j in chosen)]
    if loose:
        chosen.append(_Job("pids", "given with --pids", None, [_Member(pid, None, None, None) for pid in loose]))
    return chosen


def _at_or_above(pid: int, agent: int | None, procs: dict[int, dict]) -> bool:
    """Whether `pid` is `agent` or one of its ancestors (say, the `ddplab train` CLI over its runner agent)."""
    seen, current = set(), agent
    while current in procs and current not in seen:
        if current == pid:
            return True
        seen.add(current)
        current = procs[current]["ppid"]
    return False


def _children(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


# ----------------------------------------------------------------------------------------------- sampling


class Sampler:
    """Samples rank processes and GPUs; keeps psutil's and NVML's state between samples (CPU % is a delta)."""

    def __init__(self):
        self._procs: dict[int, psutil.Process] = {}
        self._last = time.time()
        self.nvml = _Nvml()

    def close(self) -> None:
        self.nvml.close()

    def track(self, jobs: list[_Job]) -> None:
        """Start the CPU % clock of every rank not seen before (a restart brings new pids): the next sample
        measures each from here."""
        for job in jobs:
            for m in job.members:
                self._process(m.pid)

    def _process(self, pid: int) -> psutil.Process | None:
        proc = self._procs.get(pid)
        if proc is None:
            try:
                proc = self._procs[pid] = psutil.Process(pid)
                proc.cpu_percent(None)
            except psutil.Error:
                return None
        return proc

    def sample(self, jobs: list[_Job]) -> Snapshot:
        now = time.time()
        interval, self._last = now - self._last, now
        gpus, nvml_state = self.nvml.read()
        views = [
            JobView(
                job.id,
                job.launcher,
                job.agent_pid,
                next((m.world_size for m in job.members if m.world_size), None),
                [self._rank_view(m) for m in job.members],
            )
            for job in jobs
        ]
        _place_on_gpus(views, jobs, gpus)
        snap = Snapshot(now, round(interval, 3), views, gpus, nvml_state)
        judge(snap)
        return snap

    def _rank_view(self, m: _Member) -> RankView:
        view = RankView(
            m.pid,
            m.rank,
            m.local_rank,
            "exited",
            progress=m.progress,
            phase=m.phase,
            quiet_s=None if m.last_mark is None else round(max(0.0, time.time() - m.last_mark), 1),
        )
        proc = self._process(m.pid)
        if proc is None:
            return view
        try:
            with proc.oneshot():
                view.status = proc.status()
                view.cpu_percent = round(proc.cpu_percent(None), 1)
                times = proc.cpu_times()
                view.cpu_seconds = round(times.user + times.system, 2)
                view.rss_mib = round(proc.memory_info().rss / 2**20, 1)
                view.threads = proc.num_threads()
        except psutil.NoSuchProcess:
            view.status = "exited"
        except psutil.AccessDenied:
            pass
        return view


def _place_on_gpus(views: list[JobView], jobs: list[_Job], gpus: list[GpuView]) -> None:
    """Which GPU each rank drives: the one whose NVML process list has the rank's pid.

    In a container NVML reports host pids, which match nothing here: then a GPU with such an unknown process is
    assumed to be the one LOCAL_RANK points at. A rank on no GPU at all (gloo on a GPU machine) stays on none.
    """
    if not gpus:
        return
    members = {m.pid: m for job in jobs for m in job.members}
    by_index = {gpu.index: gpu for gpu in gpus}
    foreign = {gpu.index for gpu in gpus if any(p.name is None for p in gpu.processes)}
    on_gpu = {}
    for gpu in gpus:
        for proc in gpu.processes:
            on_gpu.setdefault(proc.pid, (gpu, proc))
    for job in views:
        for rank in job.ranks:
            if rank.pid in on_gpu:
                gpu, proc = on_gpu[rank.pid]
                rank.gpu, rank.gpu_from, rank.gpu_memory_mib = gpu.index, "nvml", proc.memory_mib
                proc.rank = rank.rank
            elif rank.local_rank is not None:
                index = _visible_index(rank.local_rank, members[rank.pid].cuda_visible)
                if index in foreign:
                    rank.gpu, rank.gpu_from = index, "local_rank"
            if rank.gpu is not None:
                rank.gpu_util_percent = by_index[rank.gpu].util_percent


def _visible_index(local_rank: int, cuda_visible: str | None) -> int | None:
    """The NVML index of CUDA device `local_rank` under CUDA_VISIBLE_DEVICES (integers only; UUIDs: unknown)."""
    ids = visible_gpus(cuda_visible)
    if ids is None:
        return local_rank
    if local_rank >= len(ids) or not ids[local_rank].isdigit():
        return None
    return int(ids[local_rank])


class _Nvml:
    """NVML, opened once; absent (no driver, no GPU) is a normal state, reported in words."""

    def __init__(self):
        self.state = "ok"
        try:
            import pynvml

            pynvml.nvmlInit()
            self.pynvml = pynvml
        except Exception as e:  # no libnvidia-ml.so: a machine without an NVIDIA driver
            self.pynvml = None
            self.state = f"no NVIDIA driver ({type(e).__name__.removeprefix('NVMLError_')}): CPU figures only"

    def close(self) -> None:
        if self.pynvml is not None:
            self.pynvml.nvmlShutdown()
            self.pynvml = None

    def _get(self, fn, *args):
        """One NVML query; a GPU that does not support it (NotSupported, NoPermission...) gives None."""
        try:
            return fn(*args)
        except self.pynvml.NVMLError:
            return None

    def read(self) -> tuple[list[GpuView], str]:
        nv = self.pynvml
        if nv is None:
            return [], self.state
        gpus = []
        for index in range(self._get(nv.nvmlDeviceGetCount) or 0):
            h = self._get(nv.nvmlDeviceGetHandleByIndex, index)
            if h is None:
                continue
            name = self._get(nv.nvmlDeviceGetName, h) or "?"
            util = self._get(nv.nvmlDeviceGetUtilizationRates, h)
            mem = self._get(nv.nvmlDeviceGetMemoryInfo, h)
            power = self._get(nv.nvmlDeviceGetPowerUsage, h)  # milliwatts
            limit = self._get(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            temp = self._get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            processes = []
            for p in self._get(nv.nvmlDeviceGetComputeRunningProcesses, h) or []:
                used = getattr(p, "usedGpuMemory", None)
                processes.append(GpuProcess(p.pid, round(used / 2**20, 1) if used else None, _name(p.pid), None))
            gpus.append(
                GpuView(
                    index,
                    name.decode() if isinstance(name, bytes) else name,
                    float(util.gpu) if util is not None else None,
                    round(mem.used / 2**20, 1) if mem else 0.0,
                    round(mem.total / 2**20, 1) if mem else 0.0,
                    round(power / 1000, 1) if power is not None else None,
                    round(limit / 1000, 1) if limit is not None else None,
                    temp,
                    processes,
                )
            )
        return gpus, self.state


def _name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None  # another container's pid, or gone


# ----------------------------------------------------------------------------------------------- judging


def _ranks_text(ranks: list[RankView]) -> str:
    names = [str(r.rank) if r.rank is not None else f"pid {r.pid}" for r in ranks]
    return ("rank " if len(names) == 1 else "ranks ") + ", ".join(names)


def _are(ranks: list[RankView]) -> str:
    return "is" if len(ranks) == 1 else "are"


def judge(snap: Snapshot) -> None:
    """Flag idle and behind ranks, idle GPUs; explain each in `problems`; sum up in one verdict line."""
    for job in snap.jobs:
        live = [r for r in job.ranks if r.status not in ("exited", "zombie")]
        for r in job.ranks:
            if r not in live:
                r.flags.append("exited")
            elif r.gpu_util_percent is not None:  # a GPU rank's CPU may spin while it waits: ask the GPU
                if r.gpu_util_percent < IDLE_GPU_PERCENT:
                    r.flags.append("idle")
            elif r.cpu_percent < IDLE_CPU_PERCENT:
                r.flags.append("idle")
        _flag_behind(live)
        for r in live:
            if r.quiet_s is not None and r.quiet_s >= QUIET_S:
                r.flags.append("quiet")
        _describe(job, live, snap)
    busy_gpu_ranks = [
        r
        for job in snap.jobs
        for r in job.ranks
        if r.progress is None and r.gpu_util_percent is not None and not r.flags
    ]
    if busy_gpu_ranks:  # said, not guessed: without progress marks a hang in NCCL looks like work
        snap.notes.append(
            "a rank hung in an NCCL collective also reads busy (NCCL's kernels spin at ~100 % while "
            "they wait): GPU utilisation alone cannot tell; run it under `ddplab launch` for progress "
            "marks, or `py-spy dump --pid PID` to see where it is"
        )
    used = {r.gpu for job in snap.jobs for r in job.ranks if r.gpu is not None}
    for gpu in snap.gpus:
        if gpu.util_percent is not None and gpu.util_percent < IDLE_GPU_PERCENT:
            gpu.flags.append("idle")
            if gpu.index in used:
                snap.problems.append(
                    f"GPU {gpu.index} is idle ({gpu.util_percent:.0f}% busy) while its rank runs: "
                    "it waits for data, for the CPU, or for another rank"
                )
    if used and (unused := [g.index for g in snap.gpus if g.index not in used]):
        snap.notes.append(f"GPU(s) {', '.join(map(str, unused))} run no rank of the job(s) watched")
    snap.ok = not snap.problems
    if snap.ok:
        ranks = sum(len(job.ranks) for job in snap.jobs)
        snap.verdict = f"{ranks} rank(s) in {len(snap.jobs)} job(s): all busy, none behind"  # guide.md shows it
        return
    flagged = [
        f"{job.id} {_ranks_text([r])} {' and '.join(r.flags)}" for job in snap.jobs for r in job.ranks if r.flags
    ]
    flagged += [f"GPU {g.index} idle" for g in snap.gpus if g.flags and g.index in used]
    n = len(snap.problems)
    snap.verdict = f"{n} {'problem' if n == 1 else 'problems'}: {'; '.join(flagged)}"


def _flag_behind(live: list[RankView]) -> None:
    if len(live) < 2:
        return
    if all(r.progress is not None for r in live):
        lead = max(r.progress for r in live)
        slack = max(BEHIND_MIN_MARKS, BEHIND_MARK_FRACTION * lead)
        behind = [r for r in live if lead - r.progress > slack]
        for r in behind:
            r.flags.append("behind")
    else:
        lead = max(r.cpu_seconds for r in live)
        for r in live:
            if lead >= BEHIND_MIN_CPU_S and r.cpu_seconds < BEHIND_CPU_RATIO * lead:
                r.flags.append("waiting")


def _describe(job: JobView, live: list[RankView], snap: Snapshot) -> None:
    exited = [r for r in job.ranks if r not in live]
    idle = [r for r in live if "idle" in r.flags]
    if exited and live:
        snap.problems.append(
            f"{job.id}: {_ranks_text(exited)} exited while the others still run: normal in the "
            "last second of a run; otherwise the others wait for it until their collective times out"
        )
    if idle and len(idle) == len(live):
        snap.problems.append(
            f"{job.id}: every rank is idle: they all wait (for data, I/O, a checkpoint) or hang; "
            "`py-spy dump --pid PID` shows where each one is"
        )
    elif idle:
        busy = [r for r in live if r not in idle]
        why = (
            "behind too (below): not waiting for a straggler but the straggler itself"
            if all("behind" in r.flags for r in idle)
            else "in DDP the idle ones usually wait in a collective for a straggler, or they are stuck"
        )
        snap.problems.append(
            f"{job.id}: {_ranks_text(idle)} {_are(idle)} idle while {_ranks_text(busy)} {_are(busy)} busy: {why}"
        )
    quiet = [r for r in live if "quiet" in r.flags]
    if quiet:
        on_gpu = any(r.gpu_util_percent is not None and r.gpu_util_percent >= IDLE_GPU_PERCENT for r in quiet)
        snap.problems.append(
            f"{job.id}: {_ranks_text(quiet)} made no progress for {min(r.quiet_s for r in quiet):.0f} s or more "
            f"(last in {quiet[0].phase}): a long step, a checkpoint, or a hang in a collective"
            + ("; its GPU reads busy, which a rank waiting in NCCL also does (NCCL's kernels spin)" if on_gpu else "")
        )
    for r in (r for r in live if "behind" in r.flags):
        if r.progress is not None:
            lead = max(x.progress for x in live)
            snap.problems.append(
                f"{job.id}: rank {r.rank} is behind: {r.progress} progress marks against {lead} "
                f"for the leader (last in {r.phase}): it is the straggler the others wait for"
            )
    if waiting := [r for r in live if "waiting" in r.flags]:
        busiest = max(live, key=lambda x: x.cpu_seconds)
        snap.problems.append(
            f"{job.id}: {_ranks_text(waiting)} used far less CPU time than {_ranks_text([busiest])} "
            f"({', '.join(f'{r.cpu_seconds:.1f}' for r in waiting)} s against "
            f"{busiest.cpu_seconds:.1f} s): in DDP a rank waiting in a collective uses little CPU, so "
            f"{_ranks_text([busiest])}, the busy one, is likely the straggler; unless "
            f"{_ranks_text(waiting)} {_are(waiting)} stuck elsewhere (`py-spy dump --pid PID` shows "
            "where each one is)"
        )


def require_jobs(pids: list[int] | None) -> list[_Job]:
    """find_jobs(), where finding nothing is an error: there is nothing to watch (exit 1, not a usage error)."""
    if pids:
        require_running(pids)
    jobs = find_jobs(pids)
    if not jobs:
        raise DdplabError(
            "no running torchrun or ddplab job found on this machine: start one, or pass --pids "
            "with a rank's or a launcher's pid",
            exit_code=1,
        )
    return jobs


def snapshot_once(pids: list[int] | None, interval: float) -> Snapshot:
    """Find the job, sample it over `interval` seconds, judge it (what `ddplab monitor --once` prints)."""
    jobs = require_jobs(pids)
    sampler = Sampler()
    try:
        sampler.track(jobs)
        time.sleep(interval)
        return sampler.sample(jobs)
    finally:
        sampler.close()
