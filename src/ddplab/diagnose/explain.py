"""Match a log against the rule table and order the diagnoses the way a person should read them.

Order: the rules matched in what the root-cause rank died of first (torchrun's "Root Cause (first observed
failure)" summary names that rank; its last traceback, or the signal in the summary), then causes before
consequences (a rank that lost its peer reports it after the peer died), errors a C++ `terminate called after
throwing ... what(): ...` names before others (that rank aborted first; its peers' Python tracebacks follow), specific
messages before generic wrappers (NCCL's "invalid usage" before its "Last error: Duplicate GPU ..."), warnings last;
within each tier, in the order each error first appears in the log.
Lines are attributed to a rank by the prefixes torch writes: `[rank1]:` (a worker's uncaught exception) and
`[default1]:` (torchrun --tee: role and local rank).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

from ddplab.diagnose.exitcodes import describe_exit
from ddplab.diagnose.rules import GENERIC_STEPS, RULES, Rule, mechanism_rank

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
GLOBAL_TAG = re.compile(r"\[rank(\d+)\]:")
LOCAL_TAG = re.compile(r"^\[[A-Za-z_]+?(\d+)\]:")
ERROR_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b.*")
SUMMARY_HEAD = "Root Cause (first observed failure):"
SUMMARY_FIELD = re.compile(r"^\s*(\w+)\s*:\s*(.*?)\s*$")
TERMINATE = "terminate called after throwing"
SIGABRT = -6
SIGNALS_WITHOUT_OUTPUT = (-9, -15)  # SIGKILL, SIGTERM: the rank printed nothing about why; other signals may have
MAX_HITS = 500  # per pattern: enough to find the root-cause rank's first line in any real log

_COMPILED = [(rule, [re.compile(p, re.MULTILINE) for p in rule.patterns]) for rule in RULES]


@dataclass
class RootCause:
    rank: int
    local_rank: int | None = None
    exitcode: int | None = None
    signal: str | None = None  # "SIGKILL" when the exit code is a signal
    line: int | None = None  # where torchrun's summary names it (1-based)
    error: str | None = None  # the last error line that rank printed, when the log has it
    meaning: str | None = None  # what its exit code means (ddplab.diagnose.exitcodes.describe_exit)


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


@dataclass
class Explanation:
    source: str
    lines: int
    root_cause: RootCause | None
    matches: list[Match]
    matched: bool = False
    next_steps: list[str] = field(default_factory=list)  # generic steps, when nothing matched


def clean(text: str) -> str:
    return ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))


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
    for line in lines[starts[-1] + 1:]:
        if line.strip().startswith("==="):
            break
        m = SUMMARY_FIELD.match(strip_prefixes(line))
        if m:
            fields.setdefault(m.group(1), m.group(2))
    rank_m = re.match(r"(\d+)(?: \(local_rank: (\d+)\))?", fields.get("rank", ""))
    if not rank_m:
        return None
    exit_m = re.match(r"(-?\d+)", fields.get("exitcode", ""))
    sig_m = re.search(r"\((SIG\w+)\)", fields.get("exitcode", ""))
    return RootCause(rank=int(rank_m.group(1)),
                     local_rank=int(rank_m.group(2)) if rank_m.group(2) else None,
                     exitcode=int(exit_m.group(1)) if exit_m else None,
                     signal=sig_m.group(1) if sig_m else None,
                     line=starts[-1] + 1)


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
    died of; earlier ones it survived). A rank killed by SIGKILL/SIGTERM died of no traceback of its own; one that
    aborted or crashed (SIGABRT, SIGSEGV, SIGBUS) may have printed why (a C++ `what():`), so all its lines count."""
    if root is None:
        return set()
    found = set(summary)
    if root.exitcode is not None and root.exitcode in SIGNALS_WITHOUT_OUTPUT:
        return found
    if root.exitcode is not None and root.exitcode < 0:
        found |= {i for i, line in enumerate(lines) if i not in summary and _owned_by_root(line, root)}
        if root.exitcode == SIGABRT:
            # C++ writes `terminate called ... what():` straight to stderr, without torch's rank prefix: in a log
            # whose root cause aborted, an unprefixed one is that rank's.
            found |= {i for i in _terminate_lines(lines) if _line_owner(lines[i]) == (None, None)}
        return found
    own = [i for i, line in enumerate(lines) if i not in summary and _owned_by_root(line, root)]
    starts = [i for i in own if "Traceback (most recent call last)" in lines[i]]
    return found | {i for i in own if not starts or i >= starts[-1]}


def _last_error(lines: list[str], root_lines: set[int], summary: range) -> str | None:
    for index in sorted(root_lines - set(summary), reverse=True):
        text = strip_prefixes(lines[index]).strip()
        if text.startswith("what():"):  # a C++ exception that ended the process
            text = text[len("what():"):].strip()
        elif not ERROR_LINE.match(text):
            continue
        return text[:300]
    return None


def explain_text(text: str, source: str = "-", root: RootCause | None = None) -> Explanation:
    """Every rule that matches `text`, root cause first. `root` overrides the summary parsed from the text."""
    text = clean(text)
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    root = root or parse_root_cause(lines)
    summary = _summary_span(lines, root)
    root_lines = _root_lines(lines, root, summary)

    terminated = _terminate_lines(lines)
    matches = []
    explained: set[int] = set()
    for rule, patterns in _COMPILED:
        if rule.needs and not any(word in text for word in rule.needs):
            continue  # none of the words its patterns need: skip the regexes (families have many)
        hits = set()
        for pattern in patterns:
            for n, m in enumerate(pattern.finditer(text)):
                if n >= MAX_HITS:
                    break
                hits.add(bisect.bisect_right(starts, m.start()) - 1)
        if rule.covers:  # a family explains only lines no specific rule did (RULES lists families last)
            hits -= explained
        else:
            explained |= hits
        if not hits:
            continue
        ordered = sorted(hits)
        root_hits = [i for i in ordered if i in root_lines]
        first = root_hits[0] if root_hits else ordered[0]
        after_terminate = any(i in terminated for i in ordered)
        # family rules (rule.covers: a whole layer's messages) after specific ones; then by mechanism (rules.py)
        family, mechanism = bool(rule.covers), mechanism_rank(rule.id)
        if root_hits:  # what the root-cause rank died of: its own error before a generic pointer to it
            key = (0, rule.warning, family, rule.generic, mechanism, not after_terminate, first)
        else:
            key = (1, rule.warning, family, mechanism, rule.consequence, not after_terminate, rule.generic, first)
        matches.append((key, bool(root_hits), _match(rule, first, lines)))
    matches.sort(key=lambda item: item[0])
    result = []
    for _, in_root, match in matches:
        match.root_cause = in_root
        result.append(match)
    if root is not None and root.error is None:
        root.error = _last_error(lines, root_lines, summary)
    if root is not None and root.exitcode is not None and root.meaning is None:
        root.meaning = describe_exit(root.exitcode)
    return Explanation(source=source, lines=len(lines), root_cause=root, matches=result, matched=bool(result),
                       next_steps=[] if result else list(GENERIC_STEPS))


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
    return Match(rule=rule.id, title=rule.title, cause=rule.cause, fix=rule.fix, reference=rule.reference,
                 line=index + 1, text=strip_prefixes(lines[index]).strip()[:300],
                 rank=global_rank if global_rank is not None else local_rank, consequence=rule.consequence,
                 generic=rule.generic, warning=rule.warning)


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
    for n, m in enumerate(e.matches, 1):
        where = f"line {m.line}" + (f", rank {m.rank}" if m.rank is not None else "")
        tag = ((" (root cause)", "bold red") if m.root_cause
               else " (usually a consequence of another failure)" if m.consequence
               else " (a warning, not an error)" if m.warning else "")
        con.print(Text.assemble((f"{n}. {m.title}", "bold"), f" [{m.rule}] {where}", tag))
        con.print(f"   > {m.text}")
        con.print(f"   cause: {m.cause}")
        con.print(f"   fix:   {m.fix}")
        con.print(f"   see:   {m.reference}")
    if not e.matches:
        con.print("no known error found in this log. Next steps:")
        for step in e.next_steps:
            con.print(f"  - {step}")
