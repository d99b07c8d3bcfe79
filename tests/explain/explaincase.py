"""What the explain tests share: the rule a text gets first, all its rules in order, the facts a rule read, the text
a tests/logs/ log quotes, and real tracebacks made here by torch on this CPU."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from conftest import traceback_of

from ddplab.explain.matcher import explain_text

LOGS = Path(__file__).parents[1] / "logs"


def first_rule(text: str) -> str | None:
    e = explain_text(text)
    return e.matches[0].rule if e.matches else None


def rules(text: str) -> list[str]:
    return [m.rule for m in explain_text(text).matches]


def facts(text: str, rule: str) -> list[str]:
    return next(m.facts for m in explain_text(text).matches if m.rule == rule)


def read_quoted(path: Path) -> tuple[dict[str, str], str]:
    """(header fields, quoted text) of a tests/logs/ log: the leading `# key: value` lines, then the quote."""
    lines = path.read_text().splitlines()
    head = {}
    while lines and re.match(r"# \w+: ", lines[0]):
        key, value = lines.pop(0)[2:].split(": ", 1)
        head[key] = value
    return head, "\n".join(lines)


def quoted(name: str) -> str:
    """The text tests/logs/NAME quotes, without its header."""
    return read_quoted(LOGS / name)[1]


@functools.cache
def made_errors() -> dict[str, str]:
    """rule -> a real traceback from torch on this CPU: a collective before init_process_group, env:// without a
    launcher, and a store on a port in use. Made once per process."""
    import socket

    import torch
    import torch.distributed as dist
    from torch.distributed import TCPStore

    made = {"pg-not-initialized": traceback_of(lambda: dist.all_reduce(torch.ones(1)))}
    env = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k in os.environ}
    try:
        made["launcher-env-missing"] = traceback_of(lambda: dist.init_process_group("gloo", init_method="env://"))
    finally:
        os.environ.update(env)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        made["port-in-use"] = traceback_of(lambda: TCPStore("127.0.0.1", port, 1, True, wait_for_workers=False))
    return made
