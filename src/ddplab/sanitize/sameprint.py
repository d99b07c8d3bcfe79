"""Check `every-rank-print` (minor): every rank printed or logged the same line - N copies of it on the console, the
noise that buries the line that matters.

Rank side, inside the window only: builtins.print and logging.Handler.handle wrapped (the latter once something
imports logging). A print counts when the user's code called it (its caller's frame is the user's: a package
printing is not the script's line to guard) and it goes to the console (the stdout/stderr the rank started with, by
file= or as sys.stdout: a rank's own log file, or os.devnull put in sys.stdout on the ranks but 0, is not noise); a
logging record counts when a StreamHandler on the console emits it and the logging call is in the user's code (where
it reached a handler: a logger whose level drops it on ranks other than 0, or a NullHandler, counts nothing). Per
line of the user's code: how often, and a crc32 of each different text (the text is known when every argument is a
str or a number: print's own formatting of anything else is not repeated here; logging's message is formatted once
by the handler anyway; what the handler's format frames it with, less the clock, is part of its text: a format
that names the rank makes each rank's line its own). Both wrappers are removed after the window (one left in a name
that captured it by then, e.g. `print = functools.partial(print, flush=True)`, passes straight through).

A tqdm progress bar made by the user's code and drawn on the console counts as a line too (its description and
length are its text): a bar on every rank is N bars redrawn over each other; so does `pprint(obj)` (the text it
formats), watched at PrettyPrinter.pprint.

Reader: a line of code where every rank printed the same text.
"""

from __future__ import annotations

import builtins
import functools
import os
import re
import sys
import zlib

from ddplab import afterimport
from ddplab.sanitize import Finding, by_key, rankside, short
from ddplab.sanitize.userframe import is_user

ID = "every-rank-print"
SITES = 64  # lines of code kept per rank
TEXTS = 32  # different texts kept per line of code
PLAIN = (str, int, float, bool, type(None))
BAR = "a tqdm progress bar"  # how a bar's text starts


class Observer(rankside.Observer):
    ID = ID

    def __init__(self, window):
        super().__init__(window)
        self.on = True
        self.sites: dict[str, dict] = {}
        self.console = {id(s) for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__) if s is not None}
        obs = self
        original_print = builtins.print

        @functools.wraps(original_print)
        def print(*args, **kwargs):  # noqa: A001 - it is print, watched
            if obs.on:
                obs.guarded(obs._printed, sys._getframe(1), args, kwargs)
            return original_print(*args, **kwargs)

        builtins.print = print
        self.undo: list = [(builtins, "print", original_print, print)]
        # sys.stdout.write / sys.stderr.write called by the user's code: the console streams stand behind a thin
        # stand-in for the window (a C stream's write cannot be wrapped in place); print's own writes reach it from
        # the wrapper above, logging's and tqdm's from their modules: none of them is the user's frame
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and id(stream) in self.console:
                stand_in = _Console(stream, self)
                setattr(sys, name, stand_in)
                self.console.add(id(stand_in))
                self.undo.append((sys, name, stream, stand_in))
        # logging is watched once something imports it (torch does): importing it here would cost every rank ~16 ms
        # at start-up and put it in sys.modules before the script asked for it
        afterimport.when_imported("logging", self._watch_logging, "sanitizer's logging watch")
        # a tqdm progress bar draws itself on stderr by its own writes, not print: each bar made counts as a line
        afterimport.when_imported("tqdm.std", self._watch_tqdm, "sanitizer's tqdm watch")
        # pprint writes an object's pieces, none of them a text the user's call handed over: its printer is watched
        # (the method, which `from pprint import pprint` taken before the window and a PrettyPrinter of one's own
        # both reach)
        afterimport.when_imported("pprint", self._watch_pprint, "sanitizer's pprint watch")

    def _watch_pprint(self, pprint) -> None:
        if not self.on:
            return
        original = pprint.PrettyPrinter.pprint
        obs = self

        @functools.wraps(original)
        def method(printer, obj):
            if obs.on:
                obs.guarded(obs._pprinted, printer, obj, sys._getframe(1))
            return original(printer, obj)

        pprint.PrettyPrinter.pprint = method
        self.undo.append((pprint.PrettyPrinter, "pprint", original, method))

    def _pprinted(self, printer, obj, frame) -> None:
        """pprint(obj) or a PrettyPrinter's pprint(obj) on the console, called from the user's code (pprint's own
        functions between, `pp()`, skipped): the text it formats."""
        if id(getattr(printer, "_stream", None)) not in self.console:
            return
        while frame is not None and frame.f_globals.get("__name__") == "pprint":
            frame = frame.f_back
        if frame is not None and is_user(frame.f_code.co_filename):
            self._seen(_line(frame), printer.pformat(obj) + "\n")

    def _watch_tqdm(self, std) -> None:
        if not self.on:
            return
        original_init = std.tqdm.__init__
        obs = self

        @functools.wraps(original_init)
        def __init__(bar, *args, **kwargs):
            original_init(bar, *args, **kwargs)
            if obs.on:
                obs.guarded(obs._bar, bar, sys._getframe(1))

        # put back as it was found: tqdm's __init__ may be a descriptor (a partialmethod), not the function it gives
        as_found = std.tqdm.__dict__.get("__init__", original_init)
        std.tqdm.__init__ = __init__
        self.undo.append((std.tqdm, "__init__", as_found, __init__))

    def _watch_logging(self, logging) -> None:
        if not self.on:
            return
        original_handle = logging.Handler.handle
        obs = self

        @functools.wraps(original_handle)
        def handle(handler, record):
            emitted = original_handle(handler, record)
            if obs.on and emitted and isinstance(handler, logging.StreamHandler):
                obs.guarded(obs._logged, handler, record)
            return emitted

        logging.Handler.handle = handle
        self.undo.append((logging.Handler, "handle", original_handle, handle))

    def _printed(self, frame, args: tuple, kwargs: dict) -> None:
        target = kwargs.get("file")
        # print's own default, looked up now: a rank that pointed sys.stdout at os.devnull or a file prints nowhere
        if id(sys.stdout if target is None else target) not in self.console:
            return
        if not is_user(frame.f_code.co_filename):
            return
        text = None
        if all(type(a) in PLAIN for a in args):
            sep, end = kwargs.get("sep"), kwargs.get("end")
            text = (" " if sep is None else sep).join(map(str, args)) + ("\n" if end is None else end)
        self._seen(_line(frame), text)

    def _wrote(self, frame, text) -> None:
        """A write the user's code made on a console stream itself (sys.stdout.write(...)), or through a package
        function that writes the text it was given (`tqdm.write(s)`, `click.echo(s)`): a line of its own, with its
        text; a write of whitespace alone (the newline after a text) says nothing."""
        if not isinstance(text, str) or not text.strip():
            return
        if not is_user(frame.f_code.co_filename):
            frame = _echoed_from(frame, text)
            if frame is None:
                return
        self._seen(_line(frame), text)

    def _bar(self, bar, frame) -> None:
        """A bar that draws (tqdm's disable=None turns it off where stderr is no terminal) on the console, made by the
        user's code (tqdm's own frames skipped: trange, tqdm.auto's classes)."""
        stream = getattr(bar, "fp", None)
        stream = getattr(stream, "_wrapped", stream)  # tqdm's DisableOnWriteError around the file it was given
        if getattr(bar, "disable", True) or id(stream) not in self.console:
            return
        while frame is not None and f"{os.sep}tqdm{os.sep}" in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is None or not is_user(frame.f_code.co_filename):
            return
        text = f"{BAR}, {bar.desc or 'no description'}, {bar.total} steps"
        self._seen(_line(frame), text)

    def _logged(self, handler, record) -> None:
        if id(getattr(handler, "stream", None)) not in self.console or not is_user(record.pathname):
            return
        message = record.getMessage()
        self._seen(f"{os.path.abspath(record.pathname)}:{record.lineno}", message + _framing(handler, record), message)

    def _seen(self, where: str, text: str | None, example: str | None = None) -> None:
        site = self.sites.get(where)
        if site is None:
            if len(self.sites) >= SITES:
                return
            site = self.sites[where] = {"where": where, "count": 0, "texts": [], "example": None}
        site["count"] += 1
        if text is None:
            return
        crc = zlib.crc32(text.encode("utf-8", "replace"))
        if crc not in site["texts"] and len(site["texts"]) < TEXTS:
            site["texts"].append(crc)
            if site["example"] is None:
                site["example"] = (text if example is None else example).strip()[:160]

    def forked(self) -> None:
        self.sites = {}

    def stop(self) -> None:
        self.on = False
        self.restore(self.undo)
        self.undo = []

    def data(self) -> dict:
        return {"sites": list(self.sites.values())}


def _line(frame) -> str:
    """The line of the user's code a print, a write or a bar came from: the site its texts are kept under."""
    return f"{os.path.abspath(frame.f_code.co_filename)}:{frame.f_lineno}"


def _framing(handler, record) -> str:
    """What the handler's format puts around the message on the console, less the clock: its format string (a rank
    baked in by an f-string, `format=f"[rank {rank}] %(message)s"`) and the record's fields it names (a filter's or
    an adapter's `%(rank)s`, `%(process)d`), so a line each rank frames with its own rank is a text of its own. The
    default format (the message alone) adds nothing; the fields' names are parsed once per format string."""
    style = getattr(getattr(handler, "formatter", None), "_style", None)
    fmt = getattr(style, "_fmt", None)
    if not isinstance(fmt, str) or fmt == "%(message)s":
        return ""
    names = _FIELDS.get(fmt)
    if names is None:
        found = (a or b or c for a, b, c in _FIELD.findall(fmt))
        names = _FIELDS[fmt] = tuple(n for n in dict.fromkeys(found) if n not in _CLOCK)
    return "\0" + fmt + "".join(f"\0{getattr(record, n, '')}" for n in names)


_FIELD = re.compile(r"%\((\w+)\)|\{(\w+)|\$\{?(\w+)")  # the three styles: %(name)s, {name}, ${name}
_CLOCK = frozenset({"message", "asctime", "created", "msecs", "relativeCreated"})  # the message, or the time
_FIELDS: dict[str, tuple[str, ...]] = {}


def _echoed_from(frame, text: str, depth: int = 6):
    """The user's frame whose call a package function echoes: the function the user's code called holds the text
    written as one of its own strings (tqdm.write's `s`). A package's own text (its banner, a warning it formats) is
    not the user's; logging's writes are its records', seen as records (Handler.handle)."""
    callee = None
    while frame is not None and depth > 0 and not is_user(frame.f_code.co_filename):
        # print's own writes (ddplab's print, seen as a print), logging's (seen as records), Python's own reports
        if frame.f_globals.get("__name__", "").split(".")[0] in (
            "ddplab",
            "logging",
            "warnings",
            "traceback",
            "pprint",
        ):
            return None
        callee, frame, depth = frame, frame.f_back, depth - 1
    if frame is None or callee is None or not is_user(frame.f_code.co_filename):
        return None
    said = text.rstrip("\n")
    return frame if any(isinstance(v, str) and v.rstrip("\n") == said for v in callee.f_locals.values()) else None


def _caller():
    """The frame that called the stand-in's write, or None when C called it with no Python frame left: the
    interpreter printing an uncaught exception (sys._getframe would raise there, and the traceback be lost)."""
    try:
        return sys._getframe(2)
    except ValueError:
        return None


class _Console:
    """The rank's console stream during the window: write() and writelines() seen, everything else the stream's own
    (fileno, buffer, isatty, encoding...). Once the window is over (or in a name that kept it) it only passes on."""

    __slots__ = ("_stream", "_obs")

    def __init__(self, stream, obs):
        object.__setattr__(self, "_stream", stream)
        object.__setattr__(self, "_obs", obs)

    def write(self, text):
        obs = self._obs
        if obs.on and (frame := _caller()) is not None:
            obs.guarded(obs._wrote, frame, text)
        return self._stream.write(text)

    def writelines(self, lines):
        obs = self._obs
        if obs.on and (frame := _caller()) is not None:
            lines = list(lines)
            obs.guarded(obs._wrote, frame, "".join(x for x in lines if isinstance(x, str)))
        return self._stream.writelines(lines)

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def __setattr__(self, name, value):
        setattr(self._stream, name, value)

    def __iter__(self):
        return iter(self._stream)

    def __enter__(self):
        self._stream.__enter__()
        return self

    def __exit__(self, *exc):
        return self._stream.__exit__(*exc)

    def __repr__(self):
        return repr(self._stream)


# ------------------------------------------------------------------------------------------------------ reader side
def judge(ranks: dict[int, dict], world: int) -> list[Finding]:
    if len(ranks) < max(2, world):
        return []  # a rank that wrote nothing may have printed nothing: "every rank" is not observed
    same = []
    for where, sites in by_key(ranks, "sites", "where").items():
        if len(sites) < len(ranks):
            continue
        texts = [set(s["texts"]) for s in sites.values()]
        common = set.intersection(*texts)
        # the same line: no rank said anything there that every rank did not; a line of each rank's own value (its
        # loss) is not, even where its texts coincide now and then (a loss stuck at 0.0000, a nan)
        if common and all(t == common for t in texts):
            same.append((where, sites, common))
    if not same:
        return []
    where, sites, _ = same[0]
    example = next(s["example"] for s in sites.values() if s["example"])  # a text every rank printed there
    lines = ", ".join(short(w) for w, _, _ in same[:4]) + (f" and {len(same) - 4} more" if len(same) > 4 else "")
    n = len(ranks)
    observed = (
        f"each of the {n} ranks printed the same text at {len(same)} line{'s' * (len(same) > 1)} of code ({lines}), "
        f"e.g. {example!r}: {n} copies of each on the console (noise, minor)"
    )
    fix = (
        "print on one rank: `if dist.get_rank() == 0:` around it (or a print of your own that checks the rank once); "
        "a line each rank must say gets the rank in it"
    )
    if any((s.get("example") or "").startswith(BAR) for _, ss, _ in same for s in ss.values()):
        fix += "; a progress bar on one rank: tqdm(..., disable=dist.get_rank() != 0)"
    evidence = {
        "ranks": sorted(ranks),
        "lines": [{"where": w, "count": {r: s["count"] for r, s in sorted(ss.items())}} for w, ss, _ in same],
        "example": example,
    }
    return [Finding(ID, observed, fix, where=where, evidence=evidence, minor=True)]
