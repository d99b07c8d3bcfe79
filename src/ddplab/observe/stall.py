"""Whether a running job still makes progress, for the idle guard: a job whose ranks are alive but have done
nothing for the guard's window is paid for like an idle machine (a rank hung in a collective never ends by itself).

The evidence, the launcher's own (ddplab.launcher.hang), taken in this order at every sample:
- step marks: ddplab's own runs mark each step in their event files (launcher.progress); a new one is progress;
- CPU time: on CPU ranks, the ranks' processes (their DataLoader workers included) using at least IDLE_CORES of a
  core between two samples are working, a long step included; ranks waiting in gloo for a peer that never comes
  sleep in a recv and use none (time spent ready for a CPU counts as use: on a loaded machine a starved rank is
  not an idle one). This is what tells a long step from a hang: a 10-minute eval burns CPU all along;
- GPU ranks: their host may spin at 100 % of a core inside a CUDA synchronisation while the GPU waits in NCCL, so
  CPU time proves nothing there: step marks decide; a GPU job that gives no step mark is judged by its GPUs'
  utilisation alone, and the guard says it cannot tell (a rank hung in NCCL keeps its GPU at ~100 %);
- Flight Recorder sequence numbers: ranks under `ddplab launch` record their collectives and answer a request for
  the record (flight.reader, as the launcher's hang watch asks); a job without step marks that looks quiet by the
  rest is asked, at most every FLIGHT_EVERY of the window: a collective started since the last answer is progress
  (a job slow in communication, its CPU idle), and the newest one is what it last did.
A job is stalled at a sample that shows none of these; the guard counts the machine idle while every job is finished
or stalled, so a job fires it once it has shown no progress for the whole window. What each stalled rank last did is
read from outside (py-spy, as the launcher's hang report does) when the guard acts.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field

import psutil

from ddplab.launcher.procs import CpuMeter

# Below a tenth of a core for the whole job it is waiting, not working (= the launcher's hang.IDLE_CORES per worker:
# here per job, since one busy rank is enough for a step that is merely long).
IDLE_CORES = 0.1
# = observe.idle.IDLE_GPU_PERCENT: a GPU under this is not running kernels.
IDLE_GPU_PERCENT = 5.0
FLIGHT_EVERY = 0.25  # of the window, between two requests for the ranks' records (each rank writes its record)
FLIGHT_ANSWER_S = 3.0  # = launcher.hang.FLIGHT_ANSWER_S: a rank waiting in C++ answers from a thread of its own


@dataclass
class Look:
    """One job at one sample."""

    job: str
    ranks: int  # alive
    moving: bool
    how: str  # the evidence, in words: "CPU 1.0 core(s)", "step mark step.7", "no step mark, CPU 0.00 core(s)"
    since: float  # time.time() of its last sign of progress
    last: str  # what it last did, as far as the evidence says
    gpus: set[int] = field(default_factory=set)  # the GPUs its ranks drive
    cannot_tell: bool = False  # judged by GPU utilisation alone
    targets: list[tuple[int, int | None, int | None]] = field(default_factory=list)  # (pid, rank, local) alive


@dataclass
class _State:
    at: float  # time.time() of the previous sample
    pids: frozenset[int]
    meter: CpuMeter
    cpu: float  # the meter's total at the previous sample
    mark: float | None  # time of the newest step mark seen
    since: float
    last: str
    flight_dir: str | None = None  # where the ranks answer Flight Recorder requests ("" : they do not)
    flight_at: float = 0.0
    seqs: tuple | None = None  # (rank, group, newest sequence number) at the last answer


class StallWatch:
    """Keeps each job's evidence between samples (CPU time and marks are judged as they change)."""

    def __init__(self, window: float = 60.0):
        self.state: dict[str, _State] = {}
        self.flight_every = max(window * FLIGHT_EVERY, 1.0)

    def look(self, job, view, now: float | None = None) -> Look | None:
        """job: an observe.monitor._Job (its members' marks), view: its JobView from the same sample (status,
        GPU). None when no rank is alive (a finished job is no job)."""
        now = time.time() if now is None else now
        live = [r for r in view.ranks if r.status not in ("exited", "zombie")]
        if not live:
            self.state.pop(job.id, None)
            return None
        pids = frozenset(r.pid for r in live)
        st = self.state.get(job.id)
        meter = st.meter if st is not None and st.pids == pids else CpuMeter()
        cpu = meter.read(_processes(pids))
        marked = [m for m in job.members if m.last_mark is not None and m.pid in pids]
        newest = max(marked, key=lambda m: m.last_mark, default=None)
        gpus = {r.gpu for r in live if r.gpu is not None}
        utils = [r.gpu_util_percent for r in live if r.gpu_util_percent is not None]
        look = Look(job.id, len(live), True, "", now, "", gpus, targets=[(r.pid, r.rank, r.local_rank) for r in live])
        marks = ", ".join(f"rank {m.rank} {m.phase}" for m in marked)
        if st is None or st.pids != pids:  # first seen, or restarted with new ranks: a fresh start is progress
            last = f"step marks {marks}" if newest else "started"
            self.state[job.id] = _State(now, pids, meter, cpu, newest.last_mark if newest else None, now, last)
            look.how, look.last = "just seen", last
            return look
        moved = []
        if newest is not None and (st.mark is None or newest.last_mark > st.mark):
            st.mark, st.last = newest.last_mark, f"step marks {marks}"
            st.since = max(st.since, newest.last_mark)
            moved.append(f"step mark {newest.phase}")
        cores = (cpu - st.cpu) / max(now - st.at, 1e-3)
        st.at, st.cpu = now, cpu
        if utils:  # GPU ranks: CPU time may be a host spinning in a CUDA sync
            if newest is None and max(utils) >= IDLE_GPU_PERCENT:
                look.cannot_tell = True
                moved.append(f"GPU {max(utils):.0f} % busy")
                st.since = now
        elif cores >= IDLE_CORES:
            moved.append(f"CPU {cores:.1f} core(s)")
            st.since = now
            if not marked:
                st.last = f"used CPU ({cores:.1f} core(s))"
        if not moved and not marked and (seen := self._flight(st, live, now)):
            moved.append(seen)
        if moved:
            look.how = ", ".join(moved)
        else:
            look.moving = False
            if not utils:
                gpu = f", CPU {cores:.2f} core(s)"
            elif marked:  # the marks decide; the GPU's reading is no evidence either way
                gpu = f", GPU {max(utils):.0f} % (a rank waiting in NCCL keeps its GPU busy too)"
            else:
                gpu = f", GPU under {IDLE_GPU_PERCENT:g} % (utilisation alone: cannot tell)"
            look.how = ("no new step mark" if marked else "no step mark") + gpu
        look.since, look.last = st.since, st.last
        return look

    def _flight(self, st: _State, live, now: float) -> str | None:
        """'new collectives' when the ranks' Flight Recorder records show a collective started since the last
        answer; st.last names the newest. None without records, or when nothing new (or not asked this time)."""
        from ddplab.flight import rankdump
        from ddplab.flight import reader as flight

        if st.flight_dir is None:
            env = {}
            with contextlib.suppress(psutil.Error, OSError):
                env = psutil.Process(live[0].pid).environ()
            st.flight_dir = env.get(rankdump.DIR_ENV, "")
        ranks = [r.rank for r in live if r.rank is not None]
        if not st.flight_dir or not ranks or now - st.flight_at < self.flight_every:
            return None
        st.flight_at = now
        try:
            dumps = flight.request_dumps(st.flight_dir, ranks, timeout=FLIGHT_ANSWER_S)
        except OSError:  # the run ended and took its folder
            return None
        newest = {}
        for rank, record in dumps.items():
            for group, seqs in flight.collectives(record).items():
                if seqs:
                    newest[(rank, group)] = seqs[max(seqs)]
        seqs = tuple(sorted((rank, group, int(e["collective_seq_id"])) for (rank, group), e in newest.items()))
        if not seqs:
            return None
        moved = st.seqs is not None and seqs != st.seqs
        st.seqs = seqs
        st.last = "collectives (Flight Recorder) " + ", ".join(
            f"rank {rank} {str(e.get('profiling_name', '?')).rsplit(':', 1)[-1]} #{e['collective_seq_id']}"
            for (rank, _), e in sorted(newest.items())
        )
        if moved:
            st.since = now
            return "new collectives (Flight Recorder)"
        return None


def _processes(pids) -> list[psutil.Process]:
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.append(psutil.Process(pid))
    return found


def last_words(look: Look) -> str:
    """Where each rank of a stalled job is now, read from outside (py-spy), in the launcher's one sentence."""
    from ddplab.launcher import stacks

    found = stacks.read_all(sorted(look.targets, key=lambda t: (t[1] is None, t[1] or 0)))
    return stacks.describe(stacks.look_inside(found), None)
