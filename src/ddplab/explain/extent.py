"""Where one message ends and which layer a log proves (issue 43): so that findings fit the log.

- A message's continuation lines belong to it: torch's long errors (DDP's unused-parameter report, NCCL's
  `Last error:` block, a C++ exception's `Exception raised from ...` and frames) go on over several lines without a
  prefix of their own. `head()` finds the line a continuation line belongs to; matcher drops a second finding made
  from a continuation line of a message a specific rule already explained.
- A finding's layer must agree with the layer the log proves: a gloo rule does not fire on a message (or a log) that
  proves NCCL and never gloo, nor an NCCL rule on a gloo one. `layers()` names the layers a text proves.
"""

from __future__ import annotations

import re

# What proves a layer in a message: the words each prints in every version (its name, its process group's class,
# its sources)
LAYER_WORDS = {
    "nccl": re.compile(r"NCCL|\bnccl|ProcessGroupNCCL|\bsocketProgress|\bncclSocket|\bbootstrap\w*\.cc"),
    "gloo": re.compile(r"\bgloo\b|\bGloo\b|ProcessGroupGloo|gloo/transport|GLOO_|\bpair\.cc\b|\bgloo::"),
    # the c10d store (TCPStore) and torchrun's rendezvous over it: a lost connection there ("Broken pipe" from
    # c10d_rendezvous_backend's _call_store) is the store's server gone, not a gloo pair's peer
    "store": re.compile(r"c10d_rendezvous_backend|\b_call_store\b|\bTCPStore\b|\bDistStoreError\b"),
}
# What proves that a layer ran in the log (not only named: "doesn't have NCCL built in" is no NCCL run): its own
# log lines, its version banner, its process group, its result texts
LAYER_RAN = {
    "nccl": re.compile(r"NCCL (?:WARN|INFO|version)|ProcessGroupNCCL|NCCL [Ee]rror|ncclSocket|nccl\w*Error\b"),
    "gloo": re.compile(r"ProcessGroupGloo|gloo/transport|\bgloo::|\bpair\.cc\b|\[Gloo\]"),
}
# A line that starts something new rather than continuing the message above it
TRACEBACK = re.compile(r'^\s*(?:Traceback \(most recent call last\)|File "|During handling|The above exception)')
LOG_RECORD = re.compile(
    r"^\s*(?:[IWEF]\d{4} \d\d:|\[?\d{4}-\d\d-\d\d[ T]|\S+:\d+:\d+ \[\d+\] |(?:INFO|WARNING|ERROR|DEBUG)\b[: ]"
    r"|\[(?:INFO|WARNING|ERROR|W|E|I)\b|\*{5}|={5}|-{5})"
)
# A shell's or launcher's report of how a process ended: its own line, never a message's continuation
PROCESS_END = re.compile(r"^\s*(?:Aborted|Segmentation fault|Killed|Bus error|Illegal instruction)\b")
ERROR_HEAD = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b|^what\(\):|^terminate called")
MAX_CONTINUATION = 40  # lines: the longest torch message with its C++ frames


def _body(line: str, strip) -> str:
    return strip(line).rstrip()


def head(lines: list[str], i: int, strip, owner) -> int | None:
    """The line that starts the message line `i` continues (i itself when it starts one); None when line i is no
    part of an error message (a log record, a frame, a blank)."""
    me = owner(lines[i])
    for k in range(i, max(-1, i - MAX_CONTINUATION), -1):
        text = _body(lines[k], strip)
        if not text.strip() or owner(lines[k]) != me:
            return None
        stripped = text.strip()
        if ERROR_HEAD.match(stripped):
            return k
        if TRACEBACK.match(text) or LOG_RECORD.match(text) or PROCESS_END.match(text):
            return None
    return None


def end(lines: list[str], start: int, strip, owner) -> int:
    """The last line of the message that starts at `start`."""
    me, last = owner(lines[start]), start
    for k in range(start + 1, min(len(lines), start + MAX_CONTINUATION)):
        text = _body(lines[k], strip)
        stripped = text.strip()
        if not stripped or owner(lines[k]) != me or ERROR_HEAD.match(stripped):
            break
        if TRACEBACK.match(text) or LOG_RECORD.match(text) or PROCESS_END.match(text):
            break
        last = k
    return last


# Literals one of each layer's words holds: a substring test (fast on a whole log) before the regex
LAYER_NEEDLES = {
    "nccl": ("NCCL", "nccl", "socketProgress", "bootstrap"),
    "gloo": ("gloo", "Gloo", "GLOO_", "pair.cc"),
    "store": ("c10d_rendezvous_backend", "_call_store", "TCPStore", "DistStoreError"),
}


def raising_frame(lines: list[str], start: int, strip) -> int:
    """The first line of the Python frame that raised the message starting at `start` (its `File "...", line N`
    and its source line just above it), or `start` when none is there: the frame names the layer a bare
    "RuntimeError: Broken pipe" came from."""
    for k in (start - 2, start - 1):
        if k >= 0 and strip(lines[k]).lstrip().startswith('File "'):
            return k
    return start


def layers(text: str, ran: bool = False) -> set[str]:
    """The layers a message names (or, `ran`, that a log proves ran)."""
    return {
        name
        for name, rx in (LAYER_RAN if ran else LAYER_WORDS).items()
        if any(n in text for n in LAYER_NEEDLES[name]) and rx.search(text)
    }


def disagrees(rule_layer: str, said: set[str], log: set[str]) -> bool:
    """A rule of `rule_layer` does not fit a message that proves another layer and not its own, nor (when the
    message proves none) a log that does."""
    if not rule_layer:
        return False
    proven = said or log
    return bool(proven) and rule_layer not in proven
