"""Shared test helpers: run the real CLI in a subprocess with a hard deadline, and assert nothing is left behind."""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

PINNED_TO_CPU = False  # set by pytest_configure
GPU_MARK = re.compile(r"(?<!not )\bgpu\b")


def gpu_group_asked(config) -> bool:
    """True when the run names the opt-in GPU group in -m (`-m gpu`, `-m "gpu and not slow"`; not `-m "not gpu"`)."""
    return bool(GPU_MARK.search(config.getoption("markexpr") or ""))


def pytest_configure(config):
    # Pinned to CPU unless the GPU group was asked for: on a GPU machine the CLI would otherwise pick cuda and
    # NCCL for every test, and the tests are about the CPU/gloo path (their sizes, their gloo-only faults).
    # Set in this process's environment before torch initialises CUDA, so every subprocess inherits it too; a
    # test that is about CUDA_VISIBLE_DEVICES sets its own value.
    global PINNED_TO_CPU, SUITE_TMP
    # Every temporary folder of the run (failed runs keep their ranks' logs there, as a user is told) in one folder
    # of the suite's own, removed at the end: the suite leaves nothing in /tmp. Subprocesses inherit TMPDIR.
    SUITE_TMP = tempfile.mkdtemp(prefix="ddplab-tests-")
    os.environ["TMPDIR"] = SUITE_TMP
    tempfile.tempdir = None
    if not gpu_group_asked(config):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        PINNED_TO_CPU = True


def _machine_cpu() -> tuple[float, float] | None:
    """(busy CPU seconds of the whole machine since boot, monotonic time) from /proc/stat; None off Linux."""
    import time

    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), time.monotonic()


_cpu_at_start = _machine_cpu()


def pytest_terminal_summary(terminalreporter, config):
    """What the run cost the machine: the busy CPU seconds of all its cores over the run (every process: the ranks a
    killed launcher leaves to init are counted too, which a parent's rusage misses), beside what the cores offer."""
    end = _machine_cpu()
    ran = any(terminalreporter.stats.get(outcome) for outcome in ("passed", "failed", "error"))
    if _cpu_at_start is None or end is None or hasattr(config, "workerinput") or not ran:
        return
    busy, wall = end[0] - _cpu_at_start[0], end[1] - _cpu_at_start[1]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    terminalreporter.write_line(
        f"machine CPU over the run: {busy:,.0f} s busy of {cores} cores x {wall:,.0f} s "
        f"({100 * busy / max(cores * wall, 1e-9):.0f} %; every process on this machine counts)"
    )


def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject's addopts): one worker per core this process may use; the GPU group in this process
    alone (its tests share one GPU and time it)."""
    if gpu_group_asked(config):
        return 0
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_gpu_group_skipped = False


def pytest_collectreport(report):
    global _gpu_group_skipped
    if report.skipped and report.nodeid.replace("\\", "/").startswith("tests/gpu/"):
        _gpu_group_skipped = True


SUITE_TMP = ""


def pytest_unconfigure(config):
    if SUITE_TMP:
        shutil.rmtree(SUITE_TMP, ignore_errors=True)


def pytest_sessionfinish(session, exitstatus):
    # `-m gpu` without a GPU: the group skipped as a whole (one reason) is the expected result, not pytest's
    # "no tests collected" (exit 5), which a CI job would read as a failure.
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and _gpu_group_skipped and gpu_group_asked(session.config):
        session.exitstatus = pytest.ExitCode.OK


def pytest_ignore_collect(collection_path, config):
    """tests/gpu is collected only when asked for: a default run neither runs nor lists it."""
    if collection_path.name == "gpu" and collection_path.parent == Path(__file__).parent:
        return not gpu_group_asked(config) or None
    return None


@dataclass
class Ran:
    code: int
    out: str
    err: str
    seconds: float

    def json(self):
        return json.loads(self.out)


def cli(*args: str, env: dict | None = None, timeout: float = 120, cwd=None) -> Ran:
    """Run `python -m ddplab ARGS` for real; kill its whole session if it overstays `timeout`."""
    import time

    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ddplab", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
        cwd=cwd,
    )
    out, err = finish(proc, timeout, f"ddplab {' '.join(args)} overstayed {timeout}s")
    return Ran(proc.returncode, out, err, time.monotonic() - start)


def refused(capsys, *args: str, cwd=None) -> str:
    """The real CLI entry point run in this process on bad input, which must never start a process (the spawn guard
    says so if it does): exit code 2 and one line, no traceback. Returns that line. A subprocess per case cost ~3 s
    (an interpreter importing torch) for what is an argument check."""
    from ddplab.cli import main

    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse's own errors
        code = e.code
    finally:
        os.chdir(here)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (code, err)
    return err


def traceback_of(make_error) -> str:
    """The traceback Python prints for what `make_error()` raises: an error made for real, read as a log."""
    import traceback

    try:
        make_error()
    except BaseException:
        return traceback.format_exc()
    raise AssertionError("no error")


def finish(proc: subprocess.Popen, timeout: float, overstayed: str) -> tuple[str, str]:
    """proc's (stdout, stderr) once it ends; past `timeout`, it and every process it started are killed and the
    test fails with `overstayed` and the end of its stderr."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stacks = stacks_of_tree(proc.pid)
        kill_tree(proc.pid)
        out, err = proc.communicate()
        raise AssertionError(f"{overstayed}\n{(err or '')[-3000:]}\n{stacks}") from None


def stacks_of_tree(pid: int) -> str:
    """Every Python stack in the process tree under `pid` (py-spy, a dependency of ddplab): what a test that
    overstayed was waiting in, kept in its failure (a flake seen once on a loaded CI machine is not seen again)."""
    from ddplab.launcher.stacks import py_spy

    exe = py_spy()
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return ""
    said = []
    for p in procs:
        try:
            head = f"== pid {p.pid} ({' '.join(p.cmdline())[:160]})"
            dump = subprocess.run([exe, "dump", "--pid", str(p.pid)], capture_output=True, text=True, timeout=20)
            said.append(f"{head}\n{(dump.stdout or dump.stderr)[-2500:]}")
        except (psutil.Error, subprocess.TimeoutExpired, OSError, TypeError) as e:
            said.append(f"== pid {p.pid}: no stack ({e})")
    return "\n".join(said)


# What torchrun sets: a test inheriting any of these would not be testing the launcher's own values.
LAUNCHER_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GROUP_RANK",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
)


def torchrun(
    script, *args: str, nproc: int = 2, timeout: float = 150, merge_stderr: bool = False, core_files: bool = True
) -> subprocess.CompletedProcess:
    """Run `script` under plain torchrun (no ddplab involved) on the CPU/gloo path, in the script's folder; kill
    everything if it overstays `timeout`, and assert that no process of it is left. merge_stderr: the ranks' and
    launcher's stderr in stdout, in order; core_files=False: an expected abort writes no core file."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")  # the CPU/gloo path, even on a GPU machine
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(nproc),
            script.name,
            *args,
        ],
        cwd=script.parent,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        start_new_session=True,
        preexec_fn=None if core_files else _no_core_file,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.communicate()
        raise AssertionError(f"{script.name} on {nproc} ranks overstayed {timeout}s")
    leftover = [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if script.name in " ".join(p.info["cmdline"] or []) and str(script.parent) in (_cwd(p) or "")
    ]
    assert not leftover, f"processes left behind: {leftover}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err or "")


def sigint_as_ctrl_c() -> None:
    """preexec_fn for a child that a test interrupts with SIGINT: a suite started in the background by a shell
    without job control inherits SIGINT ignored, and so would the child (Python then installs no Ctrl-C handler)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _no_core_file() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _cwd(p: psutil.Process) -> str | None:
    try:
        return p.cwd()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def kill_tree(pid: int) -> None:
    try:
        parent = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [parent, *parent.children(recursive=True)]
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)


def alive(pids) -> list[int]:
    return [p for p in pids if p and psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.fixture
def no_leftover_workers(monkeypatch):
    """Fail the test if any process it started (tagged through an inherited variable) is still alive after it."""
    import time
    import uuid

    tag = uuid.uuid4().hex
    monkeypatch.setenv("DDPLAB_TEST_TAG", tag)

    def ours():
        found = set()
        for p in psutil.process_iter():
            try:
                if p.pid != os.getpid() and p.environ().get("DDPLAB_TEST_TAG") == tag:
                    if p.status() != psutil.STATUS_ZOMBIE:
                        found.add(p.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    yield
    deadline = time.monotonic() + 5
    while (left := ours()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


@pytest.fixture
def busy_port():
    """A port something listens on (every interface, so 127.0.0.1 too), for as long as the test runs."""
    import socket

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        yield busy.getsockname()[1]


@pytest.fixture
def one_process_group():
    """A real 1-process gloo group in this process (no port needed), always destroyed."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------------------------------------ the two tiers
# A test that starts a process (the CLI, torchrun, bash, a rank) costs seconds: each new interpreter imports torch.
# Such tests are marked `e2e` here, from what their code can reach, so that `pytest -m "not e2e"` is the fast tier
# a developer runs after every change; and a test that starts a process without being marked fails (spawn_guard),
# so the marking cannot drift from what the tests do.
import contextlib  # noqa: E402
import dis  # noqa: E402
import importlib  # noqa: E402
import types  # noqa: E402

HERE = Path(__file__).resolve().parent
OURS = (HERE, HERE.parent / "src", HERE.parent / "docs")  # code whose calls are followed
SPAWN_MODULES = {
    "subprocess",
    "multiprocessing",
    "torch.multiprocessing",
    "torch.distributed.run",
    "torch.distributed.launcher.api",
    "concurrent.futures.process",
    "pty",
}
SPAWN_CALLS = {
    "os": {
        "fork",
        "forkpty",
        "system",
        "popen",
        "posix_spawn",
        "posix_spawnp",
        "spawnv",
        "spawnve",
        "spawnl",
        "execv",
        "execvp",
    }
}


def _ours(code: types.CodeType) -> bool:
    return any(Path(code.co_filename).is_relative_to(root) for root in OURS)


def _codes(code: types.CodeType):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


IMPORT_NAME = dis.opmap["IMPORT_NAME"]
_REACHES: dict = {}  # code object -> whether it reaches a spawn (False while being walked: a cycle adds nothing)


def _reaches_a_spawn(func) -> bool:
    """Whether `func`'s code (nested functions included) starts a process, directly or through code of ours it
    calls by a global name, a module's attribute or a class's method: the names each code object loads, resolved
    in its module's globals."""
    func = inspect.unwrap(func)
    code = getattr(func, "__code__", None)
    if code is None or not _ours(code):
        return False
    if code not in _REACHES:
        _REACHES[code] = False
        _REACHES[code] = _walk(code, func.__globals__)
    return _REACHES[code]


def _imported(part: types.CodeType) -> dict:
    """What a function imports inside itself (`import subprocess`, `from conftest import cli`): name -> object."""
    found, module = {}, None
    if IMPORT_NAME not in part.co_code[::2]:  # the opcodes (every unit is 2 bytes): most code imports nothing,
        return found  # and disassembling it all cost seconds of each worker's collection
    for ins in dis.get_instructions(part):
        if ins.opname == "IMPORT_NAME":
            try:
                module = importlib.import_module(ins.argval)
            except Exception:  # noqa: BLE001 - a test's own import error shows when it runs, not here
                module = None
            if module is not None:
                found[ins.argval.partition(".")[0]] = module
                found[ins.argval] = module
        elif ins.opname == "IMPORT_FROM" and module is not None:
            value = getattr(module, ins.argval, None)
            if value is None:  # a submodule not imported yet
                with contextlib.suppress(Exception):
                    value = importlib.import_module(f"{module.__name__}.{ins.argval}")
            found[ins.argval] = value
    return found


def _walk(code: types.CodeType, globals_: dict) -> bool:
    for part in _codes(code):
        names = set(part.co_names) | set(part.co_varnames)
        scope = {**globals_, **_imported(part)} if part.co_varnames else globals_
        for name in names:
            value = scope.get(name)
            if isinstance(value, types.ModuleType):
                if value.__name__ in SPAWN_MODULES or names & SPAWN_CALLS.get(value.__name__, set()):
                    return True
                if any(
                    _reaches_a_spawn(getattr(value, attr))
                    for attr in names  # module.function() of ours
                    if inspect.isfunction(getattr(value, attr, None))
                ):
                    return True
            elif getattr(value, "__module__", None) in SPAWN_MODULES and callable(value):
                return True
            elif isinstance(value, type):  # a class of ours: its methods
                if any(_reaches_a_spawn(m) for m in vars(value).values() if inspect.isfunction(m)):
                    return True
            elif inspect.isfunction(value) and _reaches_a_spawn(value):
                return True
    return False


def _starts_processes(item) -> bool:
    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in info.name2fixturedefs.items() if info else ():
        funcs += [d.func for d in defs if name != "spawn_guard"]
    return any(f is not None and _reaches_a_spawn(f) for f in funcs)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("e2e") is None and _starts_processes(item):
            item.add_marker(pytest.mark.e2e)
    # The longest tests first and the quick ones last, whole modules kept together (their shared runs are
    # module-scoped): xdist's workers then end together, stealing short tests, instead of one worker starting a
    # minute-long test when the others are done.
    cost: dict[str, int] = {}
    for item in items:
        rank = 0 if item.get_closest_marker("slow") else 1 if item.get_closest_marker("e2e") else 2
        cost[item.module.__name__] = min(rank, cost.get(item.module.__name__, 2))
    items.sort(key=lambda item: cost[item.module.__name__])


_spawned: list[str] = []


def _record(what: str) -> None:
    _spawned.append(what)


@pytest.fixture(autouse=True)
def spawn_guard(request):
    """A test not marked e2e may not start a process: it would make the fast tier slow without anyone seeing."""
    if request.node.get_closest_marker("e2e") is not None:
        yield
        return
    _spawned.clear()
    original_child, original_fork = subprocess.Popen._execute_child, os.fork

    def child(self, args, *rest, **kw):
        _record(" ".join(map(str, args)) if isinstance(args, (list, tuple)) else str(args))
        return original_child(self, args, *rest, **kw)

    def fork():
        _record("os.fork()")
        return original_fork()

    subprocess.Popen._execute_child, os.fork = child, fork
    try:
        yield
    finally:
        subprocess.Popen._execute_child, os.fork = original_child, original_fork
    assert not _spawned, (
        f"this test started a process ({_spawned[0][:200]}) but is not marked e2e: conftest "
        "could not see it from the test's code; mark it @pytest.mark.e2e"
    )
