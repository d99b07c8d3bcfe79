"""Match a log against the rule table and order the diagnoses the way a person should read them.

Order: the rules matched in what the root-cause rank died of first (torchrun's "Root Cause (first observed
failure)" summary names that rank; its last traceback, or the signal in the summary), then causes before
consequences (a rank that lost its peer reports it after the peer died), errors a C++ `terminate called after
throwing ... what(): ...` names before others (that rank aborted first; its peers' Python tracebacks follow), specific
messages before generic wrappers (NCCL's "invalid usage" before its "Last error: Duplicate GPU ..."), warnings last;
within each tier, in the order each error first appears in the log.
Before these, but after the warnings, by mechanism (`Rule.mechanism`, rules.MECHANISMS): a difference between machines
(versions, drivers, interfaces) first, then a resource limit, then the rest; and a family rule (a whole layer's
messages, `Rule.covers`) after the specific ones.
Lines are attributed to a rank by the prefixes torch writes: `[rank1]:` (a worker's uncaught exception) and
`[default1]:` (torchrun --tee: role and local rank); other launchers' prefixes are rewritten to these when the log is
read (ddplab/explain/logread.py). ddplab's own hang reports are findings too (ownreport.py), and every answer carries
the structured reading of the failure (reading.py): what a person reads when no rule knows the error.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from ddplab.explain import extent, ownreport
from ddplab.explain.exitcodes import describe_exit
from ddplab.explain.logread import LogText, normalise
from ddplab.explain.reading import Reading, read
from ddplab.explain.rules import BY_ID, GENERIC_STEPS, LOCAL_STEPS, MECHANISMS, RULES, Rule

GLOBAL_TAG = re.compile(r"\[rank(\d+)\]:")
RAISED_FROM = re.compile(r"Exception raised from \S+ at ")
LOCAL_TAG = re.compile(r"^\[[A-Za-z_]+?(\d+)\]:")
ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b.*")
SUMMARY_HEAD = "Root Cause (first observed failure):"
SUMMARY_FIELD = re.compile(r"^\s*(\w+)\s*:\s*(.*?)\s*$")
TERMINATE = "terminate called after throwing"
TEARDOWN_ABORT = "terminate called without an active exception"  # the rules' teardown-abort: a C++ thread at exit
SIGABRT = -6
SIGNALS_WITHOUT_OUTPUT = (-9, -15)  # SIGKILL, SIGTERM: the rank printed nothing about why; other signals may have
ERRNO_FAMILY = ("os:strerror",)  # os-error: an errno text, explained by the layer's family when one names its line
MAX_HITS = 500  # per pattern: enough to find the root-cause rank's first line in any real log
RESTART = "attempts left; will restart worker group"  # torch/distributed/elastic/agent/server/api.py (INFO)
# The agent's one ERROR line per failed attempt (elastic/multiprocessing/api.py, _poll: the attempt's first failure)
ATTEMPT_FAILED = re.compile(r"\] failed \(exitcode: -?\d+\) local_rank: \d+")
# Lines the reading needs besides the rules' own text: a large log's prefilter keeps the lines holding any of these.
READ_LITERALS = (
    "Traceback",
    "Error",
    "Exception",
    "Interrupt",
    "Exit",
    "what():",
    "terminate called",
    "Root Cause",
    'File "',
    RESTART,
    "TIMEOUT",
    "=> rank",
    "fix first:",
    "Signal ",
    "exitcode",
    "failed (exitcode",
)

# Every rule with its patterns as they are meant: MULTILINE (a pattern may be anchored to a line, "^..."). The
# launcher's own-cause check (launcher/outcome.py) reads the same table.
COMPILED = [(rule, [re.compile(p, re.MULTILINE) for p in rule.patterns]) for rule in RULES]

# A message a paste or a terminal wrapped onto the next line ("... your training graph has\nchanged in this
# iteration", "internal error, NCCL\nversion 2.14.3"): a specific rule's patterns are also searched in the text with
# each line break, and the blanks around it, read as one space; a hit across 1 to MAX_WRAPS breaks (a pattern that
# reads to the end of a line, [^\n]*, reads on up to MAX_WRAPS lines there) counts on the line it starts on.
# Families' (many literals, slow) only when no specific rule matched (explain_text's second pass).
WRAPPABLE = [(rule, [] if rule.covers else patterns) for rule, patterns in COMPILED]
LINE_BREAK = re.compile(r"[ \t]*\n[ \t]*")
MAX_WRAPS = 2
_NOCASE: list = []  # COMPILED with case ignored, made on first use (_nocase)
# Wrapped lines and retyped case are a person's paste (an issue, a title, a quoted line), not a program's log file:
# a longer text (the software's own lines, as printed) is not searched again (the second searches cost 1-3x the
# first on a long log)
PASTE_MAX = 200_000


def _nocase() -> list:
    """COMPILED with the specific rules' patterns case-insensitive: a title or a retyped line changes the case of the
    software's text ("Address Already In Use", "default process group has not been initialized"). Families keep
    theirs (their file names and NCCL's WARN tag are not retyped, and their literals are many)."""
    if not _NOCASE:
        _NOCASE.extend(
            (rule, patterns if rule.covers else [re.compile(p.pattern, re.MULTILINE | re.IGNORECASE) for p in patterns])
            for rule, patterns in COMPILED
        )
    return _NOCASE


def unwrapped(text: str) -> tuple[str, list[int], list[int]]:
    """`text` with every line break (and the blanks around it) as one space, and where each joined piece starts:
    in the joined text and in `text` (the hits found in it map back with _original)."""
    pieces, joined_at, original_at, length, last = [], [0], [0], 0, 0
    for m in LINE_BREAK.finditer(text):
        pieces += [text[last : m.start()], " "]
        length += m.start() - last + 1
        last = m.end()
        joined_at.append(length)
        original_at.append(last)
    pieces.append(text[last:])
    return "".join(pieces), joined_at, original_at


@dataclass
class RootCause:
    rank: int
    local_rank: int | None = None
    exitcode: int | None = None
    signal: str | None = None  # "SIGKILL" when the exit code is a signal
    line: int | None = None  # where torchrun's summary names it (1-based)
    error: str | None = None  # the last error line that rank printed, when the log has it
    meaning: str | None = None  # what its exit code means (ddplab.explain.exitcodes.describe_exit)
    time: str | None = None  # the summary's `time` (whole seconds: torchrun's order within one is arbitrary)


@dataclass
class Match:
    rule: str
    title: str
    cause: str
    fix: str
    reference: str
    line: int  # 1-based line where its text first appears
    text: str  # that line
    rank: int | None  # whose output the line is, when a prefix says so
    consequence: bool  # usually follows another rank's failure
    root_cause: bool = False  # matched in the root-cause rank's own output
    generic: bool = False  # a wrapper message; a more specific match explains it better
    warning: bool = False  # not an error
    file: str | None = None  # which file of a log folder `line` is in
    mechanism: str | None = None  # the rule's kind of failure (rules.MECHANISMS)
    said: list[str] = field(default_factory=list)  # what the message itself said, read by message.py (its kinds)
    facts: list[str] = field(default_factory=list)  # the particulars the message states (explain/facts.py)


@dataclass
class Explanation:
    source: str
    lines: int
    root_cause: RootCause | None
    matches: list[Match]
    matched: bool = False
    next_steps: list[str] = field(default_factory=list)  # generic steps, when nothing matched
    reading: Reading | None = None  # what the log says about the failure, whatever matched
    skipped_lines: int = 0  # lines of a huge log the reader dropped from the middle (logread's caps)


def clean(text: str) -> str:
    """CRLF/CR, ANSI colours, launchers' rank prefixes as torch's (logread.normalise)."""
    return normalise(text)


# A pasted source line holds a message split across string literals: Python's adjacent literals and `+`
# ("Distributed package doesn't have NCCL " "built in"), C++'s `"a" "b"` and `<< "a" << "b"`, and in a macro call
# (TORCH_CHECK(cond, "a", "b"), c10::str("a", "b")) literals given as separate arguments. Joined (join_literals),
# the rules' patterns see the message as it prints; the line count stays the same.
_PREFIX = r"[rRfFbBuU]{0,2}"  # Python's string prefixes (r"", f"", b"")


def _joiners(q: str) -> tuple[re.Pattern, re.Pattern, re.Pattern, re.Pattern]:
    lit = q + r"((?:[^" + q + r"\\\n]|\\.)*)" + q
    return (
        re.compile(lit + r"\s*(?:\+|<<)?\s*" + _PREFIX + lit),  # "a" "b", "a" + "b", "a" << "b"
        re.compile(lit + r"\s*(?:\+|<<|,)?\s*" + _PREFIX + lit),  # also "a", "b" inside a macro call
        re.compile(lit + r"\s*(?:\+|<<|,|\\)?\s*$"),  # a line that ends in a literal
        re.compile(r"^\s*(?:\+|<<)?\s*" + _PREFIX + lit),
    )  # a line that goes on with one


_JOINERS = {q: _joiners(q) for q in "\"'"}
_MACRO_CALL = re.compile(r"\b(?:[A-Z][A-Z0-9_]{2,}|c10::str)\(")
_SPLIT_HINT = re.compile(r"""(["'])\s*(?:\+|<<|,)?\s*(?:\\\s*)?(?:\n\s*(?:\+|<<)?\s*)?[rRfFbBuU]{0,2}\1""")


def _unescape(body: str) -> str:
    """A literal's escaped quotes as the message prints them (`doesn\\'t` -> `doesn't`)."""
    return body.replace("\\'", "'").replace('\\"', '"')


def join_literals(text: str) -> str:
    """Each source line that splits a message across string literals, with the literals joined; a statement
    continued on the next lines (a literal ending one line, the next starting with one) is joined onto its first
    line, and the continuation lines stay as they are. Text without such a line comes back unchanged."""
    if not _SPLIT_HINT.search(text):
        return text
    lines = text.split("\n")
    changed = False
    for i, line in enumerate(lines):
        joined = line
        for q, (adjacent, adjacent_args, ends, starts) in _JOINERS.items():
            if q not in joined:
                continue
            k = i + 1
            while k < len(lines) and k <= i + 4 and ends.search(joined) and starts.match(lines[k]):
                joined = re.sub(r"\s*\\?\s*$", "", joined) + " " + lines[k].strip()
                k += 1
            rx = adjacent_args if _MACRO_CALL.search(joined) else adjacent
            while True:
                merged = rx.sub(lambda m, q=q: q + _unescape(m.group(1) + m.group(2)) + q, joined)
                if merged == joined:
                    break
                joined = merged
        if joined != line:
            lines[i], changed = joined, True
    return "\n".join(lines) if changed else text


def _line_owner(line: str) -> tuple[int | None, int | None]:
    """(global rank, local rank) that printed this line, from torch's prefixes."""
    tag = GLOBAL_TAG.search(line[:48])
    local = LOCAL_TAG.match(line)
    return (int(tag.group(1)) if tag else None, int(local.group(1)) if local else None)


def strip_prefixes(line: str) -> str:
    """`[default1]:[rank1]: ValueError: x` -> `ValueError: x`."""
    line = LOCAL_TAG.sub("", line, count=1)
    line = GLOBAL_TAG.sub("", line, count=1)
    return line[1:] if line.startswith(" ") else line


def parse_root_cause(lines: list[str]) -> RootCause | None:
    """The last torchrun failure summary's root cause: rank, local rank, exit code, signal."""
    starts = [i for i, line in enumerate(lines) if SUMMARY_HEAD in line]
    if not starts:
        return None
    fields: dict[str, str] = {}
    for line in lines[starts[-1] + 1 :]:
        if line.strip().startswith("==="):
            break
        m = SUMMARY_FIELD.match(strip_prefixes(line))
        if m:
            fields.setdefault(m.group(1), m.group(2))
    return _failure(fields, starts[-1] + 1)


def _failure(fields: dict[str, str], line: int) -> RootCause | None:
    """One entry of torchrun's summary (its `rank`, `exitcode`, `time` fields) as a RootCause."""
    rank_m = re.match(r"(\d+)(?: \(local_rank: (\d+)\))?", fields.get("rank", ""))
    if not rank_m:
        return None
    exit_m = re.match(r"(-?\d+)", fields.get("exitcode", ""))
    sig_m = re.search(r"\((SIG\w+)\)", fields.get("exitcode", ""))
    return RootCause(
        rank=int(rank_m.group(1)),
        local_rank=int(rank_m.group(2)) if rank_m.group(2) else None,
        exitcode=int(exit_m.group(1)) if exit_m else None,
        signal=sig_m.group(1) if sig_m else None,
        line=line,
        time=fields.get("time"),
    )


def _other_failures(lines: list[str], root: RootCause) -> list[RootCause]:
    """The ranks in the same summary's `Failures:` block (above its root cause), as RootCauses."""
    found: list[RootCause] = []
    fields: dict[str, str] = {}
    for line in reversed(lines[: root.line - 1]):
        text = strip_prefixes(line).strip()
        if text.startswith("===") or text == "Failures:":
            break
        m = SUMMARY_FIELD.match(text)
        if m:
            fields.setdefault(m.group(1), m.group(2))
        elif re.fullmatch(r"\[\d+\]:", text):  # an entry's head: its fields (read bottom-up) are complete
            failure = _failure(fields, root.line)
            found += [failure] if failure else []
            fields = {}
    return found


def _is_consequence(error: str) -> bool:
    """The error is one a rank reports because another failed (a lost peer, a timeout), and nothing more."""
    said = [rule for rule, patterns in COMPILED if any(p.search(error) for p in patterns)]
    return any(r.consequence for r in said) and all(r.consequence or r.generic or r.warning for r in said)


def _tie_broken(lines: list[str], root: RootCause | None) -> RootCause | None:
    """torchrun orders the failures by timestamps in whole seconds (ProcessFailure.timestamp) and gives a tie to
    the lowest rank: a rank that only lost its peer is then named first though the peer failed before it (both
    exited in the same second). When the named rank's own error is such a consequence and a rank that failed in
    the same second printed an error that is not, that rank failed first."""
    if root is None or root.line is None or root.time is None:
        return root
    summary = _summary_span(lines, root)
    own = _root_lines(lines, root, summary)
    error = _last_error(lines, own, summary)
    # A rank that aborted at exit (teardown-abort: no error, only `terminate called without an active exception`)
    # had done its work: a rank of the same second that raised an error of its own failed first, even if what it
    # raised is the lost peer (the one that was leaving).
    left_after_work = (
        error is None and root.exitcode == SIGABRT and any(TEARDOWN_ABORT in lines[i] for i in own - set(summary))
    )
    if not left_after_work and (error is None or not _is_consequence(error)):
        return root
    for other in _other_failures(lines, root):
        # the agent's SIGTERM to the survivors follows the failure it saw at once: a whole second apart is rounding
        stopped = left_after_work and other.exitcode in SIGNALS_WITHOUT_OUTPUT
        if other.time != root.time and not stopped:
            continue
        error = _last_error(lines, _root_lines(lines, other, summary), summary)
        if error is not None and (left_after_work or not _is_consequence(error)):
            return other
    return root


def _summary_span(lines: list[str], root: RootCause | None) -> range:
    if root is None or root.line is None:
        return range(0)
    end = root.line
    while end < len(lines) and not lines[end].strip().startswith("==="):
        end += 1
    return range(root.line - 1, end)


def _owned_by_root(line: str, root: RootCause) -> bool:
    global_rank, local_rank = _line_owner(line)
    if global_rank is not None:
        return global_rank == root.rank
    return local_rank is not None and local_rank == (root.local_rank if root.local_rank is not None else root.rank)


def _root_lines(lines: list[str], root: RootCause | None, summary: range) -> set[int]:
    """Lines that tell why the root-cause rank died: the summary's block, and that rank's last traceback (what it
    died of; earlier ones it survived). A rank killed by SIGKILL/SIGTERM died of no traceback of its own, unless it
    was already leaving on an uncaught one; one that aborted or crashed (SIGABRT, SIGSEGV, SIGBUS) may have printed
    why (a C++ `what():`), so all its lines count."""
    if root is None:
        return set()
    found = set(summary)
    if root.exitcode is not None and root.exitcode in SIGNALS_WITHOUT_OUTPUT:
        # ...unless it had already raised: torch's excepthook writes `[rankN]:` before an uncaught exception's
        # lines, so that traceback was the process leaving on its own error, and the signal cut its exit short
        # (the agent's SIGTERM to the survivors of a rank that died in the same moment). Only in this attempt:
        # after the agent's line on the attempt before, when torchrun restarted the workers.
        failed = [i for i, line in enumerate(lines[: summary.start]) if ATTEMPT_FAILED.search(line)]
        since = failed[-2] if len(failed) > 1 else -1
        uncaught = [
            i
            for i, line in enumerate(lines)
            if since < i and i not in summary and _owned_by_root(line, root) and GLOBAL_TAG.search(line[:48])
        ]
        return found | set(_last_traceback(lines, uncaught) or ())
    if root.exitcode is not None and root.exitcode < 0:
        found |= {i for i, line in enumerate(lines) if i not in summary and _owned_by_root(line, root)}
        if root.exitcode == SIGABRT:
            # C++ writes `terminate called ... what():` straight to stderr, without torch's rank prefix: in a log
            # whose root cause aborted, an unprefixed one is that rank's.
            found |= {i for i in _terminate_lines(lines) if _line_owner(lines[i]) == (None, None)}
        return found
    own = [i for i, line in enumerate(lines) if i not in summary and _owned_by_root(line, root)]
    return found | set(_last_traceback(lines, own) or own)


def _last_traceback(lines: list[str], own: list[int]) -> list[int] | None:
    """The lines of `own` from its last `Traceback (most recent call last)` on; None when it holds none."""
    starts = [i for i in own if "Traceback (most recent call last)" in lines[i]]
    return [i for i in own if i >= starts[-1]] if starts else None


def _last_error(lines: list[str], root_lines: set[int], summary: range) -> str | None:
    for index in sorted(root_lines - set(summary), reverse=True):
        text = strip_prefixes(lines[index]).strip()
        if text.startswith("what():"):  # a C++ exception that ended the process
            text = text[len("what():") :].strip()
        elif not ERROR_LINE.match(text):
            continue
        return text[:300]
    return None


# The NCCL watchdog's own findings: after a collective timed out (or its heartbeat monitor saw no progress) it takes
# the process down with abort() ("To avoid data inconsistency, we are taking the entire process down"), so a SIGABRT
# in the same log is what the watchdog did, not a cause of its own
WATCHDOG_ABORTS = ("collective-timeout", "nccl-watchdog-stuck")


def _abort_after_watchdog(result: list[Match]) -> None:
    """A SIGABRT pointer (worker-abort, not the root cause rank's) goes after the watchdog timeout that explains it."""
    abort = next((i for i, m in enumerate(result) if m.rule == "worker-abort" and not m.root_cause), None)
    watchdog = next((i for i, m in enumerate(result) if m.rule in WATCHDOG_ABORTS), None)
    if abort is not None and watchdog is not None and abort < watchdog:
        result.insert(watchdog, result.pop(abort))


def explain_log(log: LogText, root: RootCause | None = None) -> Explanation:
    """explain_text for a log read by logread: line numbers (and files of a folder) as in the input."""
    e = explain_text(log.text, source=log.source, root=root, normalised=True)
    e.lines, e.skipped_lines = log.lines_total, log.skipped
    starts = [start for start, _ in log.files]
    for m in e.matches:
        index = m.line - 1
        if log.files:
            k = bisect.bisect_right(starts, index + 1) - 1
            m.file = log.files[k][1] if k >= 0 else None
        if log.line_numbers is not None and index < len(log.line_numbers):
            m.line = log.line_numbers[index]
    if e.root_cause is not None and e.root_cause.line is not None and log.line_numbers is not None:
        e.root_cause.line = log.line_numbers[min(e.root_cause.line - 1, len(log.line_numbers) - 1)]
    return e


def explain_text(text: str, source: str = "-", root: RootCause | None = None, normalised: bool = False) -> Explanation:
    """Every rule that matches `text`, root cause first. `root` overrides the summary parsed from the text."""
    text = join_literals(text if normalised else clean(text))
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    root = root or _tie_broken(lines, parse_root_cause(lines))
    summary = _summary_span(lines, root)
    root_lines = _root_lines(lines, root, summary)

    terminated = _terminate_lines(lines)
    matches = _matches(text, lines, starts, root_lines, terminated, COMPILED, WRAPPABLE)
    if len(text) <= PASTE_MAX and not any(not BY_ID[m.rule].covers for _, _, m in matches):
        # no specific rule in the software's own case: perhaps a retyped text (their patterns, case ignored), or a
        # wrapped paste of a message only a family knows (families' patterns across line breaks too)
        matches = _matches(text, lines, starts, root_lines, terminated, _nocase(), _nocase())
    result = [_hang_match(h) for h in ownreport.find(lines)]  # ddplab said what hung: that comes first
    for _, in_root, match in matches:
        match.root_cause = in_root
        result.append(match)
    _abort_after_watchdog(result)
    if root is not None and root.error is None:
        root.error = _last_error(lines, root_lines, summary)
    if root is not None and root.exitcode is not None and root.meaning is None:
        leaving = root.exitcode in SIGNALS_WITHOUT_OUTPUT and root_lines - set(summary)  # its uncaught error
        root.meaning = (
            (
                f"exit code {root.exitcode} ({root.signal or 'a signal'}) while it was leaving on the uncaught "
                "error below: that error is why it failed; the signal (torchrun stopping the ranks once one "
                "failed) only cut its exit short"
            )
            if leaving
            else describe_exit(root.exitcode)
        )
    attempts = max(1 + sum(RESTART in line for line in lines), sum(bool(ATTEMPT_FAILED.search(line)) for line in lines))
    named = extent.layers(text)
    involved = named | ({"cuda"} if any(w in text for w in ("CUDA", "cuda", "GPU", "nvidia")) else set())
    reading = _reading(lines, root, root_lines, summary, attempts, involved)
    matched = bool(result)
    said = _said(text, lines, root, root_lines, result, reading, named)
    if said is not None:
        result = said
    for m in result:
        m.facts = _facts(m, text, lines)
    return Explanation(
        source=source,
        lines=len(lines),
        root_cause=root,
        matches=result,
        matched=matched,
        next_steps=[] if matched else list(GENERIC_STEPS if _distributed(text, lines, root, named) else LOCAL_STEPS),
        reading=reading,
    )


def _facts(m: Match, text: str, lines: list[str]) -> list[str]:
    """What the message `m` matched states (explain/facts.py): read from its line and its continuation lines."""
    from ddplab.explain import facts

    if m.rule not in facts.READERS:
        return []
    start = m.line - 1
    stop = extent.end(lines, start, strip_prefixes, _line_owner)
    message = "\n".join(strip_prefixes(lines[k]) for k in range(start, stop + 1))
    return facts.read(m.rule, message, text)


# The generic answer (explain/message.py): what the message says about itself, used when no specific rule names the
# cause. Beside a family rule or a generic pointer it leads that finding's cause and fix (its rule id stays); with no
# finding at all it is one finding of its own, rule "message" (`matched` stays False: no rule knew the error).
MESSAGE_REFERENCES = {
    "errno": "https://man7.org/linux/man-pages/man3/errno.3.html",
    "cuda": "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html",
    "nccl": "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/types.html",
    "data-parallel": "https://pytorch.org/docs/stable/notes/cuda.html#use-nn-parallel-distributeddataparallel-instead-of-multiprocessing-or-nn-dataparallel",
    "unsupported": "https://pytorch.org/docs/stable/distributed.html#backends",
    "version": "https://docs.python.org/3/reference/import.html#submodules",
}
# A log of a multi-process run says so: a launcher's name, the world size, torchrun's summary (plain substrings: fast
# on a whole log)
MULTI_WORDS = (
    "torchrun",
    "torch.distributed.run",
    "torch.distributed.launch",
    "WORLD_SIZE",
    "world_size",
    "Root Cause (first observed",
    "srun ",
    "mpirun",
    "deepspeed",
    "accelerate launch",
)


# What shows that a log is a distributed run's (torch.distributed's words and sources, collectives, the backends, the
# store, the wrappers, a device mesh), beside MULTI_WORDS (launchers, world size, torchrun's summary) and rank prefixes.
# Collectives by their API names only: "broadcast" alone is in every shape error ("cannot be broadcast to").
DISTRIBUTED = re.compile(
    r"torch\.distributed|[\\/]distributed[\\/]|distributed_c10d|\bc10d\b|init_process_group|ProcessGroup"
    r"|\bdist\.\w+\(|\ball_?reduce\b|\ball_?gather\w*|\breduce_scatter\w*|\ball_to_all\w*|broadcast_object_list"
    r"|\bbarrier\(|NCCL|\bnccl|\bgloo\b|\bGloo\b|TCPStore|[Rr]endezvous|ChildFailedError|DistributedDataParallel"
    r"|FullyShardedDataParallel|\bFSDP\b|DeviceMesh|init_device_mesh|\bLOCAL_RANK\b|\blocal_rank\b"
)


def _distributed(text: str, lines: list[str], root: RootCause | None, named: set[str]) -> bool:
    """The log shows something distributed: a launcher's summary or name, a rank prefix, a layer of
    torch.distributed (NCCL, gloo, the store), a collective, a process group or a wrapper. Otherwise it is one
    process's own error, and the distributed next steps (NCCL_DEBUG, TORCH_DISTRIBUTED_DEBUG) say nothing about it."""
    if root is not None or named or any(w in text for w in MULTI_WORDS):
        return True
    if any(_line_owner(line) != (None, None) for line in lines[:5000]):
        return True
    return bool(DISTRIBUTED.search(text))


def _said(
    text: str,
    lines: list[str],
    root: RootCause | None,
    root_lines: set[int],
    result: list[Match],
    reading: Reading,
    named: set[str],
) -> list[Match] | None:
    """The findings with the message's own answer in them, or None when it adds nothing (a specific rule names the
    cause, or the message says nothing message.py reads)."""
    from ddplab.explain import message

    if any(m.rule == "ddplab-hang" or not (m.generic or m.consequence or m.warning) for m in result):
        return None
    first = next((m for m in result if not m.warning and not m.consequence), None)
    at = first.line - 1 if first is not None and _is_error_text(lines, first.line - 1) else _error_index(lines, reading)
    if at is None and not result:
        at = _answered_line(lines, message)  # a paste without an exception line: the last line the message reads
    if at is None:
        return None
    start = extent.head(lines, at, strip_prefixes, _line_owner)
    start = at if start is None else start
    stop = extent.end(lines, start, strip_prefixes, _line_owner)
    body = "\n".join(strip_prefixes(lines[k]).strip() for k in range(start, stop + 1))
    if body.startswith("what():"):
        body = body[len("what():") :].strip()
    frame = reading.user_frame.code if reading.user_frame is not None and reading.user_frame.code else ""
    inner = _innermost_code(lines, start)
    ranks = {r for line in lines[:2000] for r in _line_owner(line) if r is not None}  # rank 1 exists: world >= 2
    multi = root is not None or bool(ranks - {0}) or any(w in text for w in MULTI_WORDS)
    a = message.answer(
        body,
        code=" ; ".join(c for c in (frame, inner) if c),
        block="\n".join(lines[max(0, start - 60) : stop + 1]),
        log=text,
        multi=multi,
        rank=root.rank if root is not None else reading.rank,
        backend=next((b for b in ("nccl", "gloo") if b in named), None),
    )
    if a is None:
        return None
    reference = next((MESSAGE_REFERENCES[k] for k in a.kinds if k in MESSAGE_REFERENCES), None)
    if first is not None and (first.generic or BY_ID.get(first.rule, None) is not None and BY_ID[first.rule].covers):
        if not a.specific and first.rule in BY_ID and not BY_ID[first.rule].covers:
            return None  # a pointer (an exit code, NCCL's result word) says as much as the enum alone
        if a.specific:  # an enum's name or the release alone do not name the cause: the layer's title stays
            first.title = f"{a.title} ({first.title})"
        first.cause = f"{a.cause} (This layer: {first.cause})"
        # a CUDA/NCCL enum's fix is that layer's own: the family's would say it twice
        first.fix = a.fix if {"cuda", "nccl"} & set(a.kinds) else f"{a.fix} (Otherwise: {first.fix})"
        first.said = list(a.kinds)
        return result
    if result:
        return None
    global_rank, local_rank = _line_owner(lines[at])
    return [
        Match(
            rule="message",
            title=a.title,
            cause=a.cause,
            fix=a.fix,
            reference=reference or "https://pytorch.org/docs/stable/distributed.html",
            line=at + 1,
            text=strip_prefixes(lines[at]).strip()[:300],
            rank=global_rank if global_rank is not None else local_rank,
            consequence=False,
            root_cause=at in root_lines,
            generic=True,
            said=list(a.kinds),
        )
    ]


QUOTED_ERROR = re.compile(r"\b[A-Z]\w*(?:Error|Exception): \S")  # an exception quoted inside a line of prose


def _answered_line(lines: list[str], message) -> int | None:
    """The last of the log's last 200 lines that the message reading answers (a pasted error in prose)."""
    for i in range(len(lines) - 1, max(-1, len(lines) - 201), -1):
        line = strip_prefixes(lines[i]).strip()
        if len(line) > 12:
            a = message.answer(line)
            # an instruction alone is not enough in prose (a paste's "Run it on 4 GPUs"): an error's grammar is
            if a is not None and a.specific and (set(a.kinds) - {"advice", "old-release"} or QUOTED_ERROR.search(line)):
                return i
    return None


def _is_error_text(lines: list[str], i: int) -> bool:
    return 0 <= i < len(lines) and extent.head(lines, i, strip_prefixes, _line_owner) is not None


def _error_index(lines: list[str], reading: Reading) -> int | None:
    """The line of the error the reading names (its last occurrence)."""
    if not reading.exception:
        return None
    needle = reading.exception[:120]
    for i in range(len(lines) - 1, -1, -1):
        if needle in lines[i]:
            return i
    return None


def _innermost_code(lines: list[str], before: int) -> str:
    """The source line of the innermost frame above the error (the call that raised it)."""
    for k in range(before - 1, max(-1, before - 40), -1):
        if 'File "' in lines[k]:
            code = strip_prefixes(lines[k + 1]).strip() if k + 1 < before else ""
            return "" if code.startswith("File ") else code
    return ""


def _matches(
    text: str,
    lines: list[str],
    starts: list[int],
    root_lines: set[int],
    terminated: set[int],
    compiled: list,
    wrappable: list,
) -> list[tuple[tuple, bool, Match]]:
    """(order key, in the root cause's lines, Match) for every rule of `compiled` found in `text`, sorted."""
    matches = []
    explained: set[int] = set()
    joined = unwrapped(text) if wrappable and "\n" in text and len(text) <= PASTE_MAX else None
    found: list[tuple[Rule, set[int]]] = []
    log_layers = extent.layers(text, ran=True)
    heads: dict[int, int | None] = {}

    def head(i: int) -> int | None:
        if i not in heads:
            heads[i] = extent.head(lines, i, strip_prefixes, _line_owner)
        return heads[i]

    for k, (rule, patterns) in enumerate(compiled):
        if rule.needs and not any(word in text for word in rule.needs):
            continue  # none of the words its patterns need: skip the regexes (families have many)
        hits = set()
        for pattern in patterns:
            for n, m in enumerate(pattern.finditer(text)):
                if n >= MAX_HITS:
                    break
                hits.add(bisect.bisect_right(starts, m.start()) - 1)
        if joined is not None:
            hits |= _wrapped_hits(joined, wrappable[k][1], starts)
        if hits and rule.layer_of:
            # a finding's layer agrees with the layer its message (or, when that says none, the log) proves
            hits = {i for i in hits if not extent.disagrees(rule.layer_of, _message_layers(lines, i, head), log_layers)}
        if rule.covers:  # a family explains only lines no specific rule did (RULES lists families last)
            hits -= explained
        else:
            explained |= hits
        if hits:
            found.append((rule, hits))
    # One message's continuation lines belong to it: a line inside a message a specific (not generic) rule matched
    # above makes no second finding (NCCL's `Last error:` under its generic result word still does)
    decisive = {i for rule, hits in found if not rule.covers and not rule.generic for i in hits}
    layered: set[int] = set()  # lines a layer's family explains: the errno text in them is that layer's
    for rule, hits in found:
        if rule.covers and decisive:
            hits = {i for i in hits if not _continues(i, head, decisive, lines)}
        if rule.covers == ERRNO_FAMILY:
            hits -= layered
        elif rule.covers:
            layered |= hits
        if not hits:
            continue
        ordered = sorted(hits)
        root_hits = [i for i in ordered if i in root_lines]
        first = root_hits[0] if root_hits else ordered[0]
        after_terminate = any(i in terminated for i in ordered)
        # The finding that explains the others first, by mechanism (rules.py: a difference between machines, then a
        # resource limit, then the rest); then family rules (rule.covers: a whole layer's messages) after specific ones.
        family, mechanism = bool(rule.covers), MECHANISMS.get(rule.mechanism, MECHANISMS["error"])
        if root_hits and not (rule.generic and not family):
            # what the root-cause rank died of: its own error (a family's too) first
            key = (rule.warning, mechanism, 0, family, rule.generic, not after_terminate, first)
        else:
            # then the other errors: specific ones, consequences (peer-closed, timeouts), families, family
            # consequences; a generic pointer to the root cause (its exit code, NCCL's result word) after the
            # specific errors and before the consequences: where the rank's lines carry no prefix (torch < 2.2, no
            # --tee) the error it printed is not known to be its own, but it is what the pointer points at
            slot = (
                1
                if root_hits
                else {(False, False): 0, (False, True): 2, (True, False): 3, (True, True): 4}[
                    (family, rule.consequence)
                ]
            )
            key = (rule.warning, mechanism, 1, slot, not after_terminate, rule.generic, first)
        match = _match(rule, first, lines)
        match.mechanism = rule.mechanism
        matches.append((key, bool(root_hits), match))
    matches.sort(key=lambda item: item[0])
    return matches


def _message_layers(lines: list[str], i: int, head) -> set[str]:
    """The layers the message line `i` belongs to proves (the frame that raised it, its head and the lines down to
    i)."""
    start = head(i)
    start = extent.raising_frame(lines, start if start is not None else i, strip_prefixes)
    return extent.layers("\n".join(lines[start : i + 1]))


def _continues(i: int, head, decisive: set[int], lines: list[str] | None = None) -> bool:
    """Line i continues a message whose earlier line a decisive rule matched; or line i is the frame that raised a
    message a decisive rule matched (a family's traceback pattern starts at the raising frame)."""
    start = head(i)
    if start is not None and start < i and any(k in decisive for k in range(start, i)):
        return True
    if lines is not None and RAISED_FROM.match(strip_prefixes(lines[i]).strip()):
        # c10::Error's what() is the message, then "Exception raised from FN at FILE:LINE (most recent call
        # first):": that line (and the C++ file it names) belongs to the message printed just above it
        k = i - 1
        while k >= 0 and i - k <= 3 and not strip_prefixes(lines[k]).strip():
            k -= 1
        if k >= 0 and k in decisive:
            return True
    if lines is not None and start is None and 'File "' in lines[i]:
        for k in range(i + 1, min(len(lines), i + 6)):
            if extent.ERROR_HEAD.match(strip_prefixes(lines[k]).strip()):
                return k in decisive
    return False


def _wrapped_hits(joined: tuple[str, list[int], list[int]], patterns: list[re.Pattern], starts: list[int]) -> set[int]:
    """Lines where a pattern matches only across line breaks (WRAPPABLE, unwrapped)."""
    text, joined_at, original_at = joined
    hits = set()
    for pattern in patterns:
        for n, m in enumerate(pattern.finditer(text)):
            if n >= MAX_HITS:
                break
            first = bisect.bisect_right(joined_at, m.start()) - 1
            last = bisect.bisect_right(joined_at, m.end()) - 1  # a break's space ending the match counts
            if 0 < last - first <= MAX_WRAPS:  # on one line it was found already
                hits.add(bisect.bisect_right(starts, original_at[first] + m.start() - joined_at[first]) - 1)
    return hits


def _is_error(text: str) -> bool:
    return bool(ERROR_LINE.match(text)) or text.startswith("what():")


def _reading(
    lines: list[str], root: RootCause | None, root_lines: set[int], summary: range, attempts: int, involved: set[str]
) -> Reading:
    """The structured reading of the rank that failed first: the root cause's lines when the log names it, else
    the owner of the first error line (its last traceback up to its last error)."""
    if root is not None:
        own = sorted(root_lines - set(summary))
        block = [strip_prefixes(lines[i]) for i in own]
        return read(block, root.rank, root.meaning, root.error, attempts, involved)
    first = next((i for i, line in enumerate(lines) if _is_error(strip_prefixes(line).strip())), None)
    if first is None:
        return read([strip_prefixes(line) for line in lines[-200:]], None, None, None, attempts, involved)
    owner = _line_owner(lines[first])
    own = (
        [i for i, line in enumerate(lines) if _line_owner(line) == owner]
        if owner != (None, None)
        else list(range(len(lines)))
    )
    errors = [i for i in own if _is_error(strip_prefixes(lines[i]).strip())]
    last = errors[-1]
    tracebacks = [i for i in own if i <= last and "Traceback (most recent call last)" in lines[i]]
    start = tracebacks[-1] if tracebacks else max(own[0], last - 200)
    block = [strip_prefixes(lines[i]) for i in own if start <= i <= last]
    text = strip_prefixes(lines[last]).strip()
    error = text[len("what():") :].strip() if text.startswith("what():") else text
    rank = owner[0] if owner[0] is not None else owner[1]
    return read(block, rank, None, error[:300], attempts, involved)


def _hang_match(hang: ownreport.Hang) -> Match:
    cause = f"ddplab {hang.command}'s watchdog saw no progress: {hang.reason}"
    if hang.flight:
        cause += f"; Flight Recorder: {hang.flight}"
    return Match(
        rule="ddplab-hang",
        title=f"a hang, reported by ddplab {hang.command}",
        cause=cause,
        fix=hang.fix or ownreport.HANG_FIX,
        reference=ownreport.REFERENCE,
        line=hang.line + 1,
        text=hang.text[:300],
        rank=None,
        consequence=False,
        root_cause=True,
    )


def _terminate_lines(lines: list[str]) -> set[int]:
    """Lines that say why a C++ exception ended a process: `what(): ...` and the few lines after `terminate called`."""
    found = set()
    for i, line in enumerate(lines):
        if TERMINATE in line:
            found.update(range(i, min(i + 4, len(lines))))
        elif "what():" in line:
            found.add(i)
    return found


def _match(rule: Rule, index: int, lines: list[str]) -> Match:
    global_rank, local_rank = _line_owner(lines[index])
    return Match(
        rule=rule.id,
        title=rule.title,
        cause=rule.cause,
        fix=rule.fix,
        reference=rule.reference,
        line=index + 1,
        text=strip_prefixes(lines[index]).strip()[:300],
        rank=global_rank if global_rank is not None else local_rank,
        consequence=rule.consequence,
        generic=rule.generic,
        warning=rule.warning,
    )


def render(con, e: Explanation, show_root: bool = True) -> None:
    """Text for people (rich console); the command and `ddplab launch` (which names the root cause itself) share it.
    Every line is plain text with styles as objects: log lines and error messages are never read as markup."""
    from rich.text import Text

    if e.root_cause is not None and show_root:
        rc = e.root_cause
        code = rc.meaning or (describe_exit(rc.exitcode) if rc.exitcode is not None else "")
        con.print(Text.assemble(("root cause:", "bold"), f" rank {rc.rank} failed first", f", {code}" if code else ""))
        if rc.error:
            con.print(f"  {rc.error}")
    if e.matches and not e.matched:
        con.print("no rule knows this error; what the message itself says:")
    for n, m in enumerate(e.matches, 1):
        where = (
            f"line {m.line}" + (f" of {m.file}" if m.file else "") + (f", rank {m.rank}" if m.rank is not None else "")
        )
        tag = (
            (" (root cause)", "bold red")
            if m.root_cause
            else " (usually a consequence of another failure)"
            if m.consequence
            else " (a warning, not an error)"
            if m.warning
            else ""
        )
        con.print(Text.assemble((f"{n}. {m.title}", "bold"), f" [{m.rule}] {where}", tag))
        con.print(f"   > {m.text}")
        if m.facts:
            con.print(f"   read:  {'; '.join(m.facts)}")
        con.print(f"   cause: {m.cause}")
        con.print(f"   fix:   {m.fix}")
        con.print(f"   see:   {m.reference}")
    explained = any(m.root_cause and not (m.generic or m.consequence) for m in e.matches)
    if not e.matches:
        con.print("no known error found in this log; what it says:")
    elif not explained and e.reading is not None:
        # only pointers (a worker's exit code; a lost peer, even in the rank that failed first): the log says more
        con.print("what the log says:")
    for line in reading_lines(e.reading) if not explained else []:
        con.print(f"  {line}", markup=False)
    if not explained and any(m.root_cause and m.consequence for m in e.matches) and e.root_cause is not None:
        # The rank that failed first lost its peer: the peer left without failing, so it was never in the
        # collective this rank called (one called on some ranks only, such as under `if rank == 0`).
        where = f" at {e.reading.user_frame}" if e.reading is not None and e.reading.user_frame else ""
        con.print(
            f"  rank {e.root_cause.rank} failed first, and what it reports is a lost peer: the other ranks "
            f"left without an error, so they were not in the collective it called{where}; a collective (or a "
            "DDP forward/backward) run on some ranks only, e.g. under `if rank == 0`",
            markup=False,
        )
    if not e.matched:
        con.print("Next steps:")
        for step in e.next_steps:
            con.print(f"  - {step}")
    if e.skipped_lines:
        con.print(
            f"({e.skipped_lines:,} candidate lines in the middle of this log were not read: it holds more "
            "errors than explain keeps; the first and the last are above)"
        )


def reading_lines(r: Reading | None) -> list[str]:
    """The structured reading as plain lines (no markup: every part of it is text from the log)."""
    if r is None:
        return []
    out = []
    if r.rank is not None or r.how:
        out.append(
            "failed first: " + (f"rank {r.rank}" if r.rank is not None else "a rank") + (f", {r.how}" if r.how else "")
        )
    if r.exception:
        kind = "a plain Python error in your own code" if r.user_code_error else "the error"
        out.append(f"{kind}: {r.exception}")
    if r.user_frame:
        out.append(f"your code: {r.user_frame}" + (f": {r.user_frame.code}" if r.user_frame.code else ""))
    out.append(f"printed by: {r.layer}; to make it say more: {r.more}")
    if r.attempts > 1:
        out.append(f"torchrun restarted the workers: {r.attempts} attempts in this log (the last one is read)")
    if r.closest:
        out.append(f"closest known message: {r.closest}")
    return out
