"""Read a log the way it arrives, for `ddplab explain`: a file, stdin or a folder of per-rank logs; any size.

- Normalised before matching: CRLF and lone CR (progress bars), ANSI colours, and every launcher's rank prefix
  rewritten to torch's own `[rankN]:` (Slurm's `srun --label` `3: `, Lightning's `[rank: 3]`, DeepSpeed's
  `[Rank 3]`, Open MPI's `[1,3]<stderr>:`); torchrun's `[rankN]:` / `[defaultN]:` are kept as they are; the
  `stdout: `/`stderr: ` labels of accelerate's and transformers' subprocess echo (`accelerate test`) are dropped.
- A folder is a log folder (torch's LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/std{err,out}.log as `ddplab launch` and
  torchrun write it, or any `*.log`/`*.out`/`*.err`/`*.txt` files): each rank's file is read with its rank's prefix.
- Small inputs are read whole. A large one is streamed in chunks: a cheap prefilter finds the lines that hold a
  literal every rule pattern needs (taken from the patterns themselves, see `required_literals`), and only those
  lines, with bounded context, the first and the last lines go on to the rules. Memory stays bounded by the caps
  below whatever the size.
- Bad input is one line (DdplabError, exit 2) saying which: missing, a folder without logs, empty, binary, unreadable.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ddplab.errors import DdplabError

try:  # the regex parser moved in Python 3.11; the tree it returns is the same
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre
    import sre_parse as _sre_parse

STREAM_ABOVE = 1 << 20  # bytes: a paste is read whole; a longer log goes through the prefilter
CHUNK = 4 << 20
BEFORE, AFTER = 24, 24  # context kept around a candidate line (the longest rule spans 21 lines)
HEAD_LINES, TAIL_LINES = 50, 500  # always kept: versions/config at the start, the summary and last traceback at the end
CAP_LINES = 20_000  # kept lines from the start; past it only the latest CAP_LINES (what a rank died of is late)
MAX_LINE = 16_384  # a longer line is cut (a dump of a tensor); no message is that long
SNIFF = 8192  # bytes looked at to tell text from binary
LOG_SUFFIXES = (".log", ".out", ".err", ".txt")
MAX_FILES = 512

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ANSI_B = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
# Launchers' rank prefixes -> torch's `[rankN]:`. Group 1 is the rank.
_LIGHTNING = re.compile(r"^\[rank:? ?(\d+)\]:? ", re.IGNORECASE)  # Lightning `[rank: 1] `, DeepSpeed `[Rank 1] `
_OPENMPI = re.compile(r"^\[\d+,(\d+)\]<std(?:out|err)>:")  # mpirun --tag-output
_SLURM = re.compile(r"^ {0,4}(\d{1,5}): ")  # srun --label (padded to the widest task number)
# A test harness's echo of a child's streams: accelerate's and transformers' execute_subprocess_async (`accelerate
# test`) print(label, line) with label "stdout:"/"stderr:"; dropped before anything else is read.
_TEE_LABEL = re.compile(r"^std(?:out|err): ?")
_TAG_RANK = re.compile(r"^(?:\[[A-Za-z_]+?(\d+)\]:)?(?:\[rank(\d+)\]:)?")  # local (torchrun --tee), global
_TORCH_TAG = re.compile(r"^(?:\[[A-Za-z_]+?\d+\]:)?\[rank\d+\]:|^\[[A-Za-z_]+?\d+\]:")


@dataclass
class LogText:
    """What explain matches: normalised lines, each with where it came from."""

    text: str
    source: str
    lines_total: int  # lines in the input(s)
    bytes_total: int
    line_numbers: list[int] | None = None  # original 1-based line number of each line of `text` (None: 1..n)
    files: list[tuple[int, str]] = field(default_factory=list)  # (first line of `text`, file) per file of a folder
    skipped: int = 0  # candidate lines dropped from the middle of a huge log (the caps)
    streamed: bool = False


# ----------------------------------------------------------------------------------------------- prefixes


def slurm_labelled(lines: list[str]) -> str | bool:
    """Whether these lines carry `srun --label` prefixes: most non-empty ones start with `N: ` (one stray `3: x`
    line in a log is not a label). "nodes" when torch's own rank prefixes follow the labels: srun started one
    torchrun per node, and the label is the node's task, not a rank."""
    text = [line for line in lines[:400] if line.strip()]
    labelled = [m for m in map(_SLURM.match, text) if m]
    if len(text) < 2 or len(labelled) * 2 <= len(text):
        return False
    inner = [line[m.end() :] for line, m in zip(text, map(_SLURM.match, text)) if m]
    return "nodes" if any(_TORCH_TAG.match(rest.lstrip()) for rest in inner) else True


def canonical(line: str, slurm: str | bool = False) -> str:
    """One line with its launcher's rank prefix rewritten as torch's `[rankN]: ` (torch's own kept). `slurm`: what
    slurm_labelled said about the log."""
    tee = _TEE_LABEL.match(line)
    if tee:
        line = line[tee.end() :]
    if _TORCH_TAG.match(line):
        return line
    for form in (_OPENMPI, _LIGHTNING) + ((_SLURM,) if slurm else ()):
        m = form.match(line)
        if m:
            rest = line[m.end() :]
            rest = rest[1:] if rest.startswith(" ") else rest
            if form is _SLURM and slurm == "nodes":  # a node's label: torch's prefix, if any, names the rank
                return rest
            return rest if _TORCH_TAG.match(rest) else f"[rank{m.group(1)}]: {rest}"
    return line


def normalise(text: str) -> str:
    """CRLF/CR -> LF, no ANSI colours, launchers' rank prefixes as torch's."""
    lines = ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")
    slurm = slurm_labelled(lines)
    return "\n".join(canonical(line, slurm) for line in lines)


# ----------------------------------------------------------------------------------------------- literals


def required_literals(pattern: str) -> set[str] | None:
    """Strings one of which every match of `pattern` contains, read from its parse tree; None when it has none
    (then the pattern is searched in full). `r"Connection (?:closed|reset) by peer"` -> {"Connection "}."""
    try:
        tree = _sre_parse.parse(pattern)
    except re.error:
        return None
    if tree.state.flags & re.IGNORECASE:
        return None
    return _required(list(tree))


def _required(items) -> set[str] | None:
    options: list[set[str]] = []
    run: list[str] = []
    for op, av in [*items, (None, None)]:
        if op is _sre.LITERAL:
            run.append(chr(av))
            continue
        if run:
            options.append({"".join(run)})
            run = []
        if op is _sre.SUBPATTERN:
            found = _required(list(av[-1]))
        elif op is _sre.BRANCH:
            alternatives = [_required(list(a)) for a in av[1]]
            found = set().union(*alternatives) if all(alternatives) else None
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) and av[0] >= 1:
            found = _required(list(av[2]))
        else:
            found = None
        if found:
            options.append(found)
    # the option whose shortest literal is longest: the most selective
    return max(options, key=lambda s: min(map(len, s))) if options else None


# ----------------------------------------------------------------------------------------------- prefilter


class Prefilter:
    """Finds the lines of a bytes chunk that contain any of `literals`, or match any of `patterns` (rule patterns
    without a required literal). With numpy: each literal is looked for only where its rarest two bytes (rarest in
    this chunk) occur, found by one table look-up per byte pair; then the line is checked for the literal itself."""

    def __init__(self, literals, patterns=()):
        self.literals = sorted({lit.encode() for lit in literals if lit})
        self.patterns = [re.compile(p.encode(), re.MULTILINE) for p in patterns]
        try:
            import numpy
        except ImportError:  # pragma: no cover - numpy comes with matplotlib; the plain scan is correct, slower
            numpy = None
        self.np = numpy
        self._pairs = None  # (table, wanted, short), from the first chunk read

    def lines(self, buf: bytes) -> list[int]:
        """Sorted start offsets of the candidate lines of `buf`."""
        starts = set()
        if self.np is not None and len(buf) > 4096:
            starts |= self._by_pairs(buf)
        else:
            for lit in self.literals:
                i = buf.find(lit)
                while i >= 0:
                    start = buf.rfind(b"\n", 0, i) + 1
                    starts.add(start)
                    end = buf.find(b"\n", i)
                    i = buf.find(lit, end) if end >= 0 else -1
        for pattern in self.patterns:
            for m in pattern.finditer(buf):
                starts.add(buf.rfind(b"\n", 0, m.start()) + 1)
        return sorted(starts)

    def _choose_pairs(self, buf: bytes):
        """For each literal, the two adjacent byte pairs rarest in a sample of `buf`: a look-up table of the pairs,
        the literals each pair stands for, and whether a literal is too short for two pairs."""
        np = self.np
        sample = np.frombuffer(memoryview(buf)[: min(len(buf), 1 << 18) & ~1], dtype="<u2")
        counts = np.bincount(sample, minlength=1 << 16)
        table = np.zeros(1 << 16, dtype=np.uint8)
        wanted: dict[int, list[bytes]] = collections.defaultdict(list)
        short = False
        for lit in self.literals:
            pairs = [int.from_bytes(lit[i : i + 2], "little") for i in range(len(lit) - 1)]
            if len(pairs) >= 2:
                i = min(range(len(pairs) - 1), key=lambda k: counts[pairs[k]] + counts[pairs[k + 1]])
                chosen = pairs[i : i + 2]
            else:
                short = True
                chosen = pairs or [lit[0] | (b << 8) for b in range(256)]
            for p in chosen:
                table[p] = 1
                wanted[p].append(lit)
        return table, wanted, short

    def _by_pairs(self, buf: bytes) -> set[int]:
        # A literal of 3+ bytes has, at an even offset of the buffer, either its pair (i, i+1) or (i+1, i+2):
        # marking both lets one look-up per even offset find it. Shorter literals are looked for at odd ones too.
        np = self.np
        view = memoryview(buf)
        if (
            self._pairs is None
        ):  # chosen once, from the first chunk (any pair of a literal finds it: only speed differs)
            self._pairs = self._choose_pairs(buf)
        table, wanted, short = self._pairs
        starts: set[int] = set()
        newlines = None
        for shift in (0, 1) if short else (0,):
            n = (len(buf) - shift) & ~1
            pairs = np.frombuffer(view[shift : shift + n], dtype="<u2")
            hits = np.flatnonzero(np.take(table, pairs))
            if not len(hits):
                continue
            if newlines is None:
                newlines = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 10)
            # each (line, pair) once: a log full of one warning hits the same pair on every line
            at = hits * 2 + shift
            line = np.searchsorted(newlines, at)
            _, first = np.unique(line.astype(np.int64) << 16 | pairs[hits], return_index=True)
            for k, i in zip(at[first].tolist(), line[first].tolist()):
                start = int(newlines[i - 1]) + 1 if i else 0
                if start in starts:
                    continue
                end = int(newlines[i]) if i < len(newlines) else len(buf)
                key = int.from_bytes(buf[k : k + 2], "little")
                chunk = buf[start:end]
                if any(lit in chunk for lit in wanted[key]):
                    starts.add(start)
        return starts


def _rule_prefilter() -> Prefilter:
    """A new Prefilter per log (it learns its byte pairs from the log's first chunk) over the rules' literals."""
    return Prefilter(*_rule_literals())


@functools.lru_cache(maxsize=1)
def _rule_literals() -> tuple[frozenset[str], tuple[str, ...]]:
    """The literals the rules need, and the patterns that need none: read from the patterns' parse trees once per
    process (it was done for every log read: 70 % of a streamed read of a small log)."""
    from ddplab.explain.matcher import READ_LITERALS
    from ddplab.explain.rules import RULES

    literals, full = set(READ_LITERALS), []
    for rule in RULES:
        for pattern in rule.patterns:
            found = required_literals(pattern)
            if found:
                literals |= found
            else:
                full.append(pattern)
    return frozenset(literals), tuple(full)


# ----------------------------------------------------------------------------------------------- streaming


class _Kept:
    """Kept (line number, text) pairs in order: the first CAP_LINES, then a window of the latest CAP_LINES."""

    def __init__(self):
        self.head: list[tuple[int, str]] = []
        self.tail: collections.deque = collections.deque(maxlen=CAP_LINES)
        self.last = 0
        self.dropped = 0

    def extend(self, first: int, raws: list[bytes]) -> None:
        """Lines numbered first, first+1, ...; those already kept are skipped. Kept as bytes: most lines of a
        log full of candidates are dropped again, and decoding them would be wasted."""
        skip = max(self.last + 1 - first, 0)
        if skip >= len(raws):
            return
        pairs = list(zip(range(first + skip, first + len(raws)), raws[skip:]))
        self.last = pairs[-1][0]
        room = CAP_LINES - len(self.head)
        self.head.extend(pairs[:room])
        rest = pairs[room:] if room > 0 else pairs
        self.dropped += max(len(self.tail) + len(rest) - CAP_LINES, 0)
        self.tail.extend(rest)

    def lines(self) -> list[tuple[int, str]]:
        return [(n, raw[:MAX_LINE].decode("utf-8", errors="replace")) for n, raw in self.head + list(self.tail)]


def stream(f, prefilter: Prefilter | None = None) -> tuple[list[tuple[int, str]], int, int, int]:
    """(kept (line number, raw text) pairs, lines, bytes, lines dropped by the caps) of a binary stream."""
    prefilter = prefilter or _rule_prefilter()
    kept = _Kept()
    carry = b""
    before: list[bytes] = []  # the previous chunk's last BEFORE lines
    pending = 0  # lines still to keep after a candidate near the previous chunk's end
    base = 0  # lines before this chunk
    total_bytes = 0
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    eof = False
    while not eof:
        data = f.read(CHUNK)
        eof = not data
        total_bytes += len(data)
        buf = carry + data
        cut = len(buf) if eof else buf.rfind(b"\n") + 1
        if cut == 0 and len(buf) < 4 * CHUNK:
            carry = buf
            continue
        if cut == 0:  # one enormous line: cut it
            cut = len(buf)
        buf, carry = buf[:cut], buf[cut:]
        if not buf:
            continue
        if b"\x1b" in buf:  # one byte: memchr (a two-byte needle is 20x slower here)
            buf = ANSI_B.sub(b"", buf)
        lines_here = buf.count(b"\n") + (0 if buf.endswith(b"\n") else 1)
        # offsets of the lines to keep in this chunk, as (first, last) chunk-local line indices
        spans = []
        if base < HEAD_LINES:
            spans.append((0, HEAD_LINES - base - 1))
        if pending:
            spans.append((0, pending - 1))
        starts = prefilter.lines(buf)
        index, at = 0, 0
        for start in starts:
            index += buf.count(b"\n", at, start)
            at = start
            spans.append((index - BEFORE, index + AFTER))
        needed = min(-min((first for first, _ in spans), default=0), len(before))
        if needed > 0:  # a candidate near the chunk's start: its context is the previous chunk's end
            kept.extend(base - needed + 1, before[len(before) - needed :])
        pending = 0
        if spans:
            lines = buf.split(b"\n")
            for first, last in _merged(spans):
                first, end = max(first, 0), min(last, lines_here - 1) + 1
                if first < end:
                    kept.extend(base + first + 1, lines[first:end])
                if last >= lines_here:
                    pending = max(pending, last - lines_here + 1)
        before = _last_lines(buf, BEFORE)
        tail_lines = _last_lines(buf, TAIL_LINES)
        for k, raw in enumerate(tail_lines):
            tail.append((base + lines_here - len(tail_lines) + k + 1, raw))
        base += lines_here
    pairs = kept.lines()
    first_tail = tail[0][0] if tail else base + 1
    merged = [p for p in pairs if p[0] < first_tail]
    merged += [(n, raw[:MAX_LINE].decode("utf-8", errors="replace")) for n, raw in tail]
    return merged, base, total_bytes, kept.dropped


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping (first, last) line spans as disjoint ones, in order."""
    out: list[list[int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], last)
        else:
            out.append([first, last])
    return [(a, b) for a, b in out]


def _last_lines(buf: bytes, n: int) -> list[bytes]:
    """The last n lines of a chunk (without the final newline's empty one)."""
    end = len(buf) - 1 if buf.endswith(b"\n") else len(buf)
    at = end
    for _ in range(n):
        at = buf.rfind(b"\n", 0, at)
        if at < 0:
            break
    return buf[at + 1 : end].split(b"\n") if end > at + 1 else []


# ----------------------------------------------------------------------------------------------- inputs


def _sniff(path: Path, name: str) -> int:
    """The file's size; bad input (empty, binary, unreadable) is a DdplabError."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(SNIFF)
    except PermissionError:
        raise DdplabError(
            f"{name}: cannot read it (permission denied): check its permissions (`ls -l {name}`)"
        ) from None
    except OSError as e:
        raise DdplabError(f"{name}: cannot read it ({e.strerror}): check the path and its permissions") from None
    check_text(head, name, size)
    return size


def check_text(head: bytes, name: str, size: int | None = None) -> None:
    if not head.strip():
        what = "is empty" if not head else "holds only blank lines"
        raise DdplabError(
            f"{name}: {what}: nothing to explain; save the run's output with "
            f"`... 2>&1 | tee run.log` and pass that file"
        )
    if b"\x00" in head:
        raise DdplabError(
            f"{name}: is a binary file, not a log (it holds NUL bytes): pass the text a run printed "
            f"(for a core dump or checkpoint, explain reads the log of the run that wrote it)"
        )


def _read_one(
    path: Path, name: str, tag: str | None, prefilter_cache: list
) -> tuple[list[int], list[str], int, int, int, bool]:
    size = _sniff(path, name)
    if size <= STREAM_ABOVE:
        raw = path.read_bytes().decode("utf-8", errors="replace")
        lines = ANSI.sub("", raw.replace("\r\n", "\n")).split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        numbers = list(range(1, len(lines) + 1))
        pairs, total, dropped, streamed = list(zip(numbers, lines)), len(lines), 0, False
    else:
        if not prefilter_cache:
            prefilter_cache.append(_rule_prefilter())
        with open(path, "rb") as f:
            pairs, total, size, dropped = stream(f, prefilter_cache[0])
        streamed = True
    out_numbers, out_lines = [], []
    slurm = slurm_labelled([text for _, text in pairs])
    for number, text in pairs:
        text = text.rstrip("\r")
        for part in text.split("\r"):  # a progress bar's lone CRs: each state its own line, same number
            part = canonical(part, slurm)
            if tag and not (part.startswith("[default") if tag.startswith("[default") else _TORCH_TAG.match(part)):
                part = tag + (part if part.startswith("[") else f" {part}")
            out_numbers.append(number)
            out_lines.append(part)
    return out_numbers, out_lines, total, size, dropped, streamed


def _file_tag(path: Path, folder: Path) -> str | None:
    """The prefix a rank's file gives its lines: torchrun --tee's `[defaultN]:` for torch's layout (the folder is
    the local rank), `[rankN]:` for a file named after its rank."""
    rank = rank_of_file(path, folder)
    if rank is None:
        return None
    in_layout = any(part.isdigit() for part in path.relative_to(folder).parts[:-1])
    return f"[default{rank}]:" if in_layout else f"[rank{rank}]:"


def _tag_rank(line: str) -> int | None:
    m = _TAG_RANK.match(line)
    return int(m.group(1) or m.group(2)) if m and (m.group(1) or m.group(2)) else None


def rank_of_file(path: Path, root: Path) -> int | None:
    """The rank a per-rank log belongs to, from its path: torch's `attempt_N/LOCAL_RANK/stderr.log`, or a name such
    as `rank3.log`, `rank_3.err`, `worker-3.out`, `3.log`."""
    rel = path.relative_to(root)
    for part in reversed(rel.parts[:-1]):
        if part.isdigit():
            return int(part)
    m = re.search(r"(?:rank|worker|proc|node|task)[_-]?(\d+)|^(\d+)$", path.stem, re.IGNORECASE)
    return int(m.group(1) or m.group(2)) if m else None


def folder_files(folder: Path) -> list[Path]:
    """A log folder's logs: the ranks' files, oldest attempt first, then the others (the launcher's log)."""
    found = []
    for dirpath, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = Path(dirpath) / name
            if name.endswith(LOG_SUFFIXES) and not name.startswith("."):
                found.append(path)
        if len(found) > MAX_FILES:
            break

    def order(path: Path):  # the ranks' own files first (a match names the rank's file), then the launcher's log
        attempt = re.search(r"attempt_(\d+)", str(path))
        return (rank_of_file(path, folder) is None, int(attempt.group(1)) if attempt else -1, str(path))

    return sorted(found[:MAX_FILES], key=order)


def read_path(name: str) -> LogText:
    """A log file or a log folder, read and normalised; bad input is a DdplabError."""
    path = Path(name)
    if path.is_dir():
        return _read_folder(path, name)
    if not path.exists():
        raise DdplabError(
            f"{name}: no such file or folder: pass the path of a saved log, a log folder, or '-' to read stdin"
        )
    if not path.is_file():
        raise DdplabError(
            f"{name}: is not a regular file (a device or pipe?): save the log to a file, or pipe it "
            f"to `ddplab explain -`"
        )
    numbers, lines, total, size, dropped, streamed = _read_one(path, name, None, [])
    return LogText("\n".join(lines), str(path), total, size, numbers, skipped=dropped, streamed=streamed)


def _read_folder(folder: Path, name: str) -> LogText:
    files = folder_files(folder)
    if not files:
        raise DdplabError(
            f"{name}: is a folder with no logs in it (no *.log, *.out, *.err or *.txt files): pass "
            f"the log file, or the folder `ddplab launch`/torchrun --log-dir wrote"
        )
    numbers, lines, spans, cache = [], [], [], []
    total = size = dropped = 0
    readable = 0
    streamed = False
    own_files = {rank_of_file(path, folder) for path in files} - {None}
    for path in files:
        rank = rank_of_file(path, folder)
        try:
            n, ls, t, s, d, st = _read_one(path, str(path), _file_tag(path, folder), cache)
        except DdplabError:
            continue  # an empty stdout.log is normal in a log folder
        if rank is None and own_files:  # the launcher's log repeats (tee) what each rank's own file holds
            keep = [i for i, line in enumerate(ls) if _tag_rank(line) not in own_files]
            n, ls = [n[i] for i in keep], [ls[i] for i in keep]
        readable += 1
        spans.append((len(lines) + 1, str(path.relative_to(folder))))
        numbers += n
        lines += ls
        total, size, dropped, streamed = total + t, size + s, dropped + d, streamed or st
    if not readable:
        raise DdplabError(
            f"{name}: every log in this folder is empty or unreadable ({len(files)} file(s)): the "
            f"ranks printed nothing; rerun with output kept"
        )
    return LogText("\n".join(lines), str(folder), total, size, numbers, files=spans, skipped=dropped, streamed=streamed)


def read_stdin() -> LogText:
    if sys.stdin is None or sys.stdin.isatty():
        raise DdplabError(
            "no log given: pass a file (`ddplab explain train.log`) or pipe one "
            "(`torchrun ... 2>&1 | ddplab explain -`)"
        )
    f = sys.stdin.buffer
    head = f.read(SNIFF)
    check_text(head, "<stdin>")
    rest = f.read(STREAM_ABOVE)
    if len(head) + len(rest) <= STREAM_ABOVE:
        text = normalise((head + rest).decode("utf-8", errors="replace"))
        if text.endswith("\n"):
            text = text[:-1]
        return LogText(text, "<stdin>", text.count("\n") + 1, len(head) + len(rest))
    pairs, total, size, dropped = stream(_Joined(head + rest, f))
    slurm = slurm_labelled([t for _, t in pairs])
    return LogText(
        "\n".join(canonical(t.rstrip("\r"), slurm) for _, t in pairs),
        "<stdin>",
        total,
        size,
        [n for n, _ in pairs],
        skipped=dropped,
        streamed=True,
    )


class _Joined:
    """Bytes already read, then the rest of a stream."""

    def __init__(self, first: bytes, rest):
        self.first, self.rest = first, rest

    def read(self, n: int) -> bytes:
        if self.first:
            out, self.first = self.first, b""
            return out
        return self.rest.read(n)
