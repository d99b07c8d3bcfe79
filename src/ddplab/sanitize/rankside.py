"""Rank side of the sanitizer: watch the first N optimizer steps of a user's script, unchanged, then get out of the way.

Installed by ddplab/boot/sitecustomize.py in every rank of `ddplab launch` when the caller wrote DIR/config.json
({"steps": N}). A step is found as `--profile` finds it (perf/profhook.py): torch's global optimizer step hook,
the first optimizer that steps counting (GradScaler and LR schedulers call the same step). Each check is an
Observer (one module per check, see ddplab/sanitize/__init__.py); the window:

- creates them at start-up (the write audit hook needs no torch) and attaches them the moment the script's
  `import torch` completes (ddplab.afterimport): nothing imports torch before the script does;
- tells them of the counted steps each asks for; after step N it removes the step hook and every check's hooks (a
  check whose event comes once per epoch may stay until that event, then goes too) - the run pays nothing after the
  window (but one call that returns at once, when a later optimizer hook keeps the step hook from being removed: see
  close());
- writes DIR/rank<RANK>.json after step 2 (a rank killed later still leaves something: the parameter digests of
  steps 1 and 2), at the window's end, and at exit. A write costs 0.3 to 0.7 ms (more than all of a step's own
  work), so not one per step, nor after step 1 too; the file itself is written by a thread that waits for it from
  the script's `import torch` on (starting a thread inside a step cost about 0.25 ms of CPU, and a wait for the
  scheduler that a busy machine makes milliseconds long). Only a rank writes: a DataLoader worker forked from it
  does not; a process it starts (spawned: the ranks of torch.multiprocessing.spawn, a DataLoader worker) watches
  from start-up but writes only once its own init_process_group makes it a rank (Window.join), and its starter then
  writes nothing.

Any error inside a check turns that check off with one stderr line; the user's script never sees it.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import queue
import sys
import threading
import weakref

from ddplab import afterimport
from ddplab.sanitize import CHECKS, CONFIG, DIR_ENV, OWNER_ENV, userframe

_window: Window | None = None
# the record's encoder: the rank's own data holds no cycle to look for (json.dumps's check, a set of every container)
_encode = json.JSONEncoder(check_circular=False).encode
# what stands in a rank's record for a string written verbatim (verbatim()): a NUL and this process's own random
# key, which nothing the script prints or names can hold by chance
_VERBATIM = f"\0{os.urandom(8).hex()}:"


def install() -> bool:
    """Start watching in a torchrun worker when the caller asked for it; False (nothing done) otherwise."""
    global _window
    folder = os.environ.get(DIR_ENV)
    if _window is not None or not folder or "LOCAL_RANK" not in os.environ:
        return _window is not None
    owner = os.environ.get(OWNER_ENV)
    # a process started by a watched one (a DataLoader worker, or a rank of torch.multiprocessing.spawn / mp.Process
    # under `ddplab launch --nproc-per-node 1`): it watches too, but is a rank, and writes, only once it calls
    # init_process_group itself (Window.join)
    started = bool(owner) and owner != str(os.getpid())
    try:
        with open(os.path.join(folder, CONFIG), encoding="utf-8") as f:
            steps = int(json.load(f).get("steps", 0))
    except (OSError, ValueError, AttributeError, TypeError):
        return False
    if steps <= 0:
        return False
    if not started:
        os.environ[OWNER_ENV] = str(os.getpid())
    _window = Window(folder, steps, started_by=owner if started else None)
    afterimport.when_imported("torch", _window.attach, "sanitizer")
    atexit.register(_window.write, wait=True)
    os.register_at_fork(after_in_child=_forked)
    return True


def _forked() -> None:
    """In the child of a fork of a watched process (a rank started with start_method="fork", a DataLoader worker)."""
    if _window is not None:
        _window.forked()


class Window:
    """The window over the first `steps` optimizer steps and the checks that watch it (`checks`: module names)."""

    def __init__(self, folder: str, steps: int, checks: tuple[str, ...] = CHECKS, started_by: str | None = None):
        self.folder, self.steps = folder, steps
        # a torchrun worker is a rank from the start (RANK, WORLD_SIZE); a process a rank started (`started_by`: that
        # rank's pid) inherited those variables but is a rank only once its own init_process_group returns (join)
        self.started_by = started_by
        self.forked_child = False  # a fork of the watched process (forked()), not a new interpreter
        self.rank: int | None = None if started_by else int(os.environ.get("RANK", "0"))
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.open = True  # inside the window
        self.handle = None  # the step hook's handle
        self.off: dict[str, str] = {}  # check id -> why it was turned off
        self._this_process()
        self.observers = []
        for name in checks:
            module = importlib.import_module(f"ddplab.sanitize.{name}")
            try:
                self.observers.append(module.Observer(self))
            except Exception as e:  # noqa: BLE001
                self._off(module.ID, e)

    # -- what the observers call
    def fail(self, observer, error: BaseException) -> None:
        """An error inside a check: that check is off for the rest of the run (one stderr line), its hooks removed."""
        if observer in self.observers:
            self.observers.remove(observer)
            self.listeners = None
            self._off(observer.ID, error)
            try:
                observer.stop()
            except Exception:  # noqa: BLE001
                pass

    def done(self, observer) -> None:
        """A check that stayed after the window (linger()) has seen what it waited for."""
        try:
            observer.stop()
        except Exception as e:  # noqa: BLE001
            self.fail(observer, e)
        self.write()

    def where(self) -> str | None:
        return userframe.where(1)  # (imported with this module: an import statement here cost each digest a lookup)

    # -- the window itself
    def attach(self, torch) -> None:
        for observer in list(self.observers):
            try:
                observer.attach(torch)
            except Exception as e:  # noqa: BLE001
                self.fail(observer, e)
        if self.started_by:
            self._hook_init(torch)
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self.handle = register_optimizer_step_post_hook(self._after_step)
        if self.rank is not None:  # a started process's rank writes only once it joins: its thread starts then
            self._start_writer()

    def _listeners(self) -> tuple[list, dict[int, list]]:
        """The observers to call at a counted step: only those that do something then (a call costs a microsecond
        or more between steps, several with the caches cold): those called at every step, and by step the whole
        list for a step some observers asked for."""
        if self.listeners is None:
            every, some = [], {}
            for observer in self.observers:
                if type(observer).on_step is Observer.on_step:
                    continue
                wanted = observer.steps()
                if wanted is None:
                    every.append(observer)
                for step in wanted or ():
                    some.setdefault(step, []).append(observer)
            self.listeners = every, {step: every + wanting for step, wanting in some.items()}
        return self.listeners

    def _after_step(self, optimizer, args, kwargs) -> None:
        if not self.open:
            return
        if self.optimizer is None:
            self.optimizer, self.followed = id(optimizer), weakref.ref(optimizer)
            self.followed_ddp = self._trains_ddp(optimizer)
        elif self.optimizer != id(optimizer) and not self._moves_to(optimizer):
            return
        self.step += 1
        every, some = self.listeners or self._listeners()
        for observer in some.get(self.step, every):
            try:
                observer.on_step(self.step, optimizer)
            except Exception as e:  # noqa: BLE001
                self.fail(observer, e)
        if self.step >= self.steps:
            self.close()
        elif self.step == 2:
            self.write()

    def _moves_to(self, optimizer) -> bool:
        """Another optimizer stepped. The window follows it from now on, counting its steps from 1, when the one it
        followed steps no parameter a DDP wrapper holds (or is gone) and this one does: a model trained on rank 0
        alone before DDP() (a checkpoint to resume from) made the first step there, and the ranks would otherwise
        digest different optimizers. When the one followed trained a DDP model and is gone (a warm-up's optimizer
        rebuilt), the new one carries on its count and what was seen is kept. Decided once per optimizer; a GAN's
        two optimizers on DDP models stay as they were (the first one counts)."""
        key = id(optimizer)
        if key in self.passed:
            return False
        self.passed.add(key)
        followed = self.followed() if self.followed is not None else None
        if not self._trains_ddp(optimizer) or (followed is not None and self._trains_ddp(followed)):
            return False
        self.passed.add(self.optimizer)
        # the one followed trained a DDP model and is gone: this one carries on the same training (a warm-up's
        # optimizer rebuilt after unfreezing), its steps counted on from there, what the first one's showed kept
        handover = followed is None and self.followed_ddp
        self.optimizer, self.followed, self.followed_ddp = key, weakref.ref(optimizer), True
        if handover:
            return True
        self.step = 0
        for observer in list(self.observers):
            try:
                observer.restart()
            except Exception as e:  # noqa: BLE001
                self.fail(observer, e)
        return True

    def _trains_ddp(self, optimizer) -> bool:
        """The optimizer steps a parameter a live DDP wrapper holds (params-diverge knows them; off: never)."""
        sync = next((o for o in self.observers if o.ID == "params-diverge"), None)
        return sync is not None and sync.held(optimizer)

    def _hook_init(self, torch) -> None:
        """Wrap init_process_group (torch.distributed's and distributed_c10d's, which scripts import by name) so that
        this process becomes a rank when it returns. Only in a started process: a torchrun worker's is left alone."""
        import functools

        import torch.distributed as dist

        from ddplab.sanitize.userframe import call_through

        if not dist.is_available():
            return
        c10d = dist.distributed_c10d
        original = c10d.init_process_group
        if getattr(original, "_ddplab_joins", False):
            return  # wrapped already (a fork of a process that wrapped it)

        @functools.wraps(original)
        def init_process_group(*args, **kwargs):
            result = call_through(original, *args, **kwargs)
            try:
                self.join(dist.get_rank(), dist.get_world_size())
            except Exception as e:  # noqa: BLE001 - never the user's problem
                sys.stderr.write(f"ddplab: sanitizer could not join the process group: {e}\n")
            return result

        init_process_group._ddplab_joins = True
        for module in (dist, c10d):
            if getattr(module, "init_process_group", None) is original:
                module.init_process_group = init_process_group

    def _this_process(self) -> None:
        """What belongs to one process, set at start and anew in a fork of it (forked())."""
        self.pid = os.getpid()
        self.step = 0  # optimizer steps counted so far
        self.optimizer: int | None = None  # id() of the optimizer whose steps count
        self.followed = None  # a weak reference to it
        self.followed_ddp = False  # it steps a parameter a DDP wrapper holds
        self.passed: set[int] = set()  # the other optimizers that stepped, each decided once (_moves_to)
        self.lock = threading.Lock()  # the rank's file: one writer at a time (a fork may inherit it held)
        self.versions = self.on_disk = 0  # records encoded, and the newest on disk
        # the thread that writes the file, and what it is asked (a fork has no thread: it starts its own on joining)
        self.writer: threading.Thread | None = None
        self.asked: queue.SimpleQueue | None = None
        # on_step's observers: those called at every step, and by step those that want only some (steps()); found
        # once, and again when a check fails
        self.listeners: tuple[list, dict[int, list]] | None = None

    def forked(self) -> None:
        """This process is a fork of the watched one: ranks started by fork (torch.multiprocessing.start_processes or
        an mp.Process in the "fork" context), or a DataLoader worker. It inherited the window as the watched process
        left it, but it is another process: like a spawned one, a rank only once its own init_process_group returns
        (join), and what the watched process recorded before the fork (a file it wrote, a loader's batches) is not
        this one's: every check drops it, or each forked rank would claim the parent's writes as its own."""
        self.started_by, self.rank, self.forked_child = str(self.pid), None, True
        self._this_process()
        for observer in list(self.observers):
            try:
                observer.forked()
            except Exception as e:  # noqa: BLE001
                self.fail(observer, e)
        torch = sys.modules.get("torch")
        if torch is not None and self.handle is not None:  # attached: the import that would hook it is long done
            try:
                self._hook_init(torch)
            except Exception as e:  # noqa: BLE001 - never the user's problem
                sys.stderr.write(f"ddplab: sanitizer could not watch the forked process: {e}\n")

    def join(self, rank: int, world: int) -> None:
        """This started process is rank `rank` of `world` (its init_process_group returned): it writes its record from
        now on, leaves a mark for the process that started it (which is not a rank then: it writes nothing), and is
        the owner its own children (DataLoader workers, or ranks of its own) see."""
        if self.rank is not None:
            return
        self.rank, self.world = rank, world
        os.environ[OWNER_ENV] = str(self.pid)
        util = sys.modules.get("multiprocessing.util")
        self._start_writer()
        if self.forked_child and util is not None:
            # a rank forked by multiprocessing ends with os._exit(), which runs no atexit handler: multiprocessing's
            # own exit function runs its finalizers first (registered now: it clears those of the fork before run())
            util.Finalize(None, self.write, kwargs={"wait": True}, exitpriority=10)
        try:
            with open(os.path.join(self.folder, f"started-by-{self.started_by}"), "a", encoding="utf-8") as f:
                f.write(f"{rank}\n")
        except OSError as e:
            sys.stderr.write(f"ddplab: sanitizer could not mark rank {rank}: {e}\n")

    def close(self) -> None:
        self.open = False
        # Called from the step hook, while torch's optimizer iterates the global hooks: removing an entry other than
        # the last one makes that loop raise "OrderedDict mutated during iteration" in the user's step. With a hook
        # registered after this one (a profiler's, the script's own), this one stays and returns at once (`open`).
        if self.handle is not None:
            hooks = self.handle.hooks_dict_ref()
            if hooks is None or next(reversed(hooks), None) == self.handle.id:
                self.handle.remove()
                self.handle = None
        for observer in list(self.observers):
            if not observer.linger():
                try:
                    observer.stop()
                except Exception as e:  # noqa: BLE001
                    self.fail(observer, e)
        self.write()

    def _off(self, check: str, error: BaseException) -> None:
        message = (str(error).strip().splitlines() or [""])[0]
        self.off[check] = f"{type(error).__name__}: {message}"[:300]
        sys.stderr.write(f"ddplab: sanitizer check {check} off: {self.off[check]}\n")

    def write(self, wait: bool = False) -> None:
        """DIR/rank<RANK>.json, atomically; never from a process forked off the rank. The record is encoded here (in C,
        a fraction of a millisecond); the file is written by the rank's writer thread unless `wait` (at exit):
        opening, writing and renaming a file can block for milliseconds on a busy disk, a stall of the training step
        it would sit in."""
        if os.getpid() != self.pid or self.rank is None:
            return  # forked off the rank, or started by one and not (yet) a rank itself
        checks, verbatim = {}, {}
        for observer in list(self.observers):
            try:
                checks[observer.ID] = observer.record(verbatim)
            except Exception as e:  # noqa: BLE001
                self.fail(observer, e)
        record = {
            "rank": self.rank,
            "world_size": self.world,
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "pid": self.pid,
            "window": self.steps,
            "steps": self.step,
            "closed": not self.open,
            "checks": checks,
            "off": dict(self.off),
        }
        path = os.path.join(self.folder, f"rank{self.rank}.json")
        try:
            text = _encode(record)  # in C at once: json.dump encodes in Python, chunk by chunk (10x slower)
        except (TypeError, ValueError) as e:
            sys.stderr.write(f"ddplab: sanitizer could not write {path}: {e}\n")
            return
        for token, value in verbatim.items():  # each token once, in a text without the long strings
            text = text.replace(json.dumps(token), f'"{value}"', 1)
        self.versions += 1
        if wait:
            self._put(path, text, self.versions)
        else:
            self._start_writer()
            # the window's last write from the steps: the writer ends once it is done
            self.asked.put((path, text, self.versions, not self.open))
            if not self.open:
                self.asked = None

    def _start_writer(self) -> None:
        """The writer thread, started ahead of the window's writes (at the script's `import torch`, or when a started
        process joins): asked for a file, it writes it, and ends after the window's last. After the window (a
        lingering check's last record) a new one is started when asked: once, between epochs."""
        if self.asked is None:
            self.asked = queue.SimpleQueue()
            self.writer = threading.Thread(
                target=self._writes, args=(self.asked,), name="ddplab-sanitizer-write", daemon=True
            )
            self.writer.start()

    def _writes(self, asked: queue.SimpleQueue) -> None:
        while True:
            job = asked.get()
            if isinstance(job, threading.Event):  # written(): everything asked before it is on disk
                job.set()
                continue
            path, text, version, last = job
            self._put(path, text, version)
            if last:
                return

    def _put(self, path: str, text: str, version: int) -> None:
        # the ranks are the processes this one started (mp.spawn): it is not one of them (tested here, by the writer
        # thread: a file's test can block as its write can)
        if not self.started_by and os.path.exists(os.path.join(self.folder, f"started-by-{self.pid}")):
            return
        with self.lock:  # one writer at a time; a version older than the one on disk is dropped
            if version <= self.on_disk:
                return
            try:
                with open(f"{path}.tmp", "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(f"{path}.tmp", path)
                self.on_disk = version
            except OSError as e:
                sys.stderr.write(f"ddplab: sanitizer could not write {path}: {e}\n")

    def written(self) -> None:
        """Wait for the file last asked for (a test reading it in this process)."""
        if self.asked is not None:
            done = threading.Event()
            self.asked.put(done)
            while not done.wait(1.0) and self.writer.is_alive():
                pass  # (a writer that died of an error would never answer)
        elif self.writer is not None:  # told to end: it ends once the last file asked is written
            self.writer.join()


class Observer:
    """What a check does in a rank; every method is called guarded (an error turns the check off)."""

    ID = ""

    def __init__(self, window: Window):
        self.window = window

    def guarded(self, fn, *args) -> None:
        """fn(*args) from inside a hook in the user's call: an error turns this check off, never reaches the user."""
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            self.window.fail(self, e)

    def attach(self, torch) -> None:
        """torch was just imported by the script: install the hooks."""

    def on_step(self, step: int, optimizer) -> None:
        """The counted optimizer finished step `step` (1-based), one of steps()."""

    def steps(self) -> set[int] | None:
        """The counted steps on_step wants, asked once the window is attached; None: every one."""
        return None

    def restart(self) -> None:
        """The window follows another optimizer from now on, its steps counted from 1 again (Window._moves_to)."""

    def forked(self) -> None:
        """This process is a fork of the rank that recorded so far: drop what was recorded (the parent's, not ours)."""

    def linger(self) -> bool:
        """The window is over: True to stay (keeping only the hook it still needs, then calling window.done(self)
        once finished); False to be stopped now."""
        return False

    def stop(self) -> None:
        """Remove every hook: the window is over."""

    @staticmethod
    def restore(patched: list) -> None:
        """Put back each (owner, name, original, ours) this check patched, unless someone wrapped it again since:
        their wrapper calls ours, which then passes straight through."""
        for owner, name, original, ours in patched:
            if getattr(owner, name, None) is ours:
                setattr(owner, name, original)

    def data(self) -> dict:
        return {}

    def record(self, verbatim: dict) -> dict:
        """data() for the rank's file, where a long string that JSON needs no escape for may stand as a token of
        verbatim() (its value put in the file's text as it is)."""
        return self.data()


def verbatim(verbatim: dict | None, value: str) -> str:
    """`value` (letters and digits only: nothing JSON escapes) itself when `verbatim` is None, else a token for it,
    kept in `verbatim`, that Window.write replaces in its text."""
    if verbatim is None:
        return value
    token = f"{_VERBATIM}{len(verbatim)}"
    verbatim[token] = value
    return token
