"""The generic answer: what an error message says about itself, read as an engineer reads it, when no specific rule
knows the message (issue 43). Mechanisms over the message's grammar and the runtimes' own tables, never one log's
wording:

- advice: the message's own instruction ("Please specify ...", "Consider ...", "Set X to Y", "Use X instead", an
  imperative sentence) is the fix;
- errno: an OS error with its operands (the path, the address): ENOENT on a write -> the folder that does not exist
  (on every node, for a multi-process run), EACCES, EADDRINUSE, ECONNREFUSED with the address;
- unsupported: "X is not supported / not implemented by Y", "Y does not support X", "no support for X in Y" -> X is
  unsupported by Y, with the alternatives known for X (the device each backend runs on, the collectives gloo runs);
- runtime enums: a CUDA or NCCL error text or number mapped to the runtime's enum (cudaError / ncclResult_t) and the
  meaning its header or documentation gives (catalogue/runtime_errors.json.gz, tools/make_runtime_errors.py), old
  numbering (`cuda runtime error (59)`, CUDA <= 10.0) included;
- old release: what the log proves about the software's age (python3.6 paths, THC, torch/lib/...) and what changed;
- DataParallel: nn.DataParallel's errors (one process, one thread per GPU) told apart from DDP's.

`answer()` returns an Answer (title, cause, fix, the kinds that spoke) or None when the message says nothing of these.
"""

from __future__ import annotations

import errno as _errno
import functools
import gzip
import json
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

RUNTIME_ERRORS = Path(__file__).parent / "catalogue" / "runtime_errors.json.gz"


@dataclass
class Answer:
    title: str
    cause: str
    fix: str
    kinds: list[str] = field(default_factory=list)  # which readings spoke: advice, errno, unsupported, cuda, ...
    specific: bool = True  # names a cause (not only the age of the software)


# ------------------------------------------------------------------ advice: the message's own instruction
# Verbs a message's instruction starts with (the imperative: "Specify the backend", "Set NCCL_P2P_DISABLE=1").
IMPERATIVE = (
    "add|avoid|call|change|check|choose|consider|convert|create|define|delete|disable|downgrade|enable|ensure|export|"
    "give|increase|initialize|initialise|install|launch|load|lower|make|move|pass|pick|provide|raise|rebuild|reduce|"
    "register|reinstall|remove|rename|replace|rerun|re-run|restart|run|save|select|set|specify|start|switch|try|"
    "turn|unset|update|upgrade|use|verify|wrap"
)
ADVICE = re.compile(
    rf"^(?:please,?\s+|kindly\s+|either\s+|instead,?\s+)?(?:(?:{IMPERATIVE})\b"
    r"|you (?:should|must|need to|have to|can|could|may want to|might want to|may need to|might need to)\b"
    r"|to (?:fix|avoid|resolve|solve|enable|disable|use|suppress|silence|get|make)\b[^,]{0,80},"
    r"|(?:it is|it's) (?:recommended|advised|suggested) to\b|did you mean\b|maybe you\b|perhaps you\b"
    # a condition and its instruction in one clause, no comma between ("If you are running with a single node
    # please remove /job/hostfile or setup passwordless ssh.": DeepSpeed's runner)
    rf"|(?:if|when|unless)\b[^.;:]{{0,160}}?\s(?:please|then|kindly)\s+(?:{IMPERATIVE})\b)",
    re.IGNORECASE,
)
# Sentences that ask to report a bug or to attach details are not a fix.
NOT_A_FIX = re.compile(
    r"\breport(?:ing)?\b|\bfile (?:a|an) (?:bug|issue)\b|\bopen an issue\b|\bgithub\.com/\S+/issues\b"
    r"|\bfor (?:more )?details\b|\bfor debugging\b|\bfor more information\b",
    re.IGNORECASE,
)
SENTENCE = re.compile(
    r"(?<=[.!?;])\s+(?=[A-Z`'\"(\[])|\n+|,\s+(?=(?:please|consider|try|run|use|set|pass|call)\s)", re.IGNORECASE
)
EXCEPTION_HEAD = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Warning|Interrupt|Exit)\b:?\s*")


def sentences(message: str) -> list[str]:
    body = EXCEPTION_HEAD.sub("", message.strip(), count=1)
    return [s.strip() for s in SENTENCE.split(body) if s and s.strip()]


def advice(message: str) -> tuple[list[str], list[str]]:
    """(the message's instructions, its other sentences)."""
    said, rest = [], []
    for s in sentences(message):
        clause = re.sub(r"^(?:so|hint|note|tip|suggestion|solution)\s*[:,-]\s*", "", s, flags=re.IGNORECASE)
        if ADVICE.match(clause) and not NOT_A_FIX.search(clause) and len(clause) > 8:
            said.append(clause)
        else:
            rest.append(s)
    return said, rest


# ------------------------------------------------------------------ errno with its operands
PY_OSERROR = re.compile(r"\[Errno (-?\d+)\] ([^:\n(]+?)(?:: '([^'\n]*)'(?: -> '([^'\n]*)')?)?\s*$", re.MULTILINE)
ADDRESS = re.compile(
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|\d{1,3}(?:\.\d{1,3}){3}|[A-Za-z][\w.-]*)"
    r"(?::|<|, port |\s+port\s+|\)?:)(?P<port>\d{2,5})\b>?"
)
ADDRESS_TUPLE = re.compile(r"\(\s*'?(?P<host>[\w.:-]+)'?\s*,\s*(?P<port>\d{2,5})\s*\)")
# A frame's source line that writes (the path is where output goes) rather than reads
WRITES = re.compile(
    r"\b(?:save\w*|dump\w*|write\w*|mkdir|makedirs|to_csv|to_json|savefig|SummaryWriter|copy\w*|move|rename|"
    r"symlink|touch|export\w*|log_dir|output_dir|save_dir|ckpt_dir|checkpoint_dir)\b"
    r"|open\([^)]*,\s*(?:mode\s*=\s*)?['\"][^'\"]*[wax+]"
)


@functools.cache
def _strerrors() -> list[tuple[str, str]]:
    """(strerror text, errno name) of this machine, longest text first (the os catalogue's source)."""
    found = {}
    for number, name in _errno.errorcode.items():
        text = os.strerror(number)
        if text and not text.startswith("Unknown error"):
            found.setdefault(text, name)
    return sorted(found.items(), key=lambda kv: -len(kv[0]))


def _errno_of(message: str) -> tuple[str, str, str | None, int] | None:
    """(errno name, its text, the operand path, where the text ends) found in the message."""
    m = PY_OSERROR.search(message)
    if m:
        name = _errno.errorcode.get(int(m.group(1)))
        if name:
            return name, m.group(2).strip(), m.group(3), m.end()
    for text, name in _strerrors():
        if len(text) >= 10:
            at = message.find(text)
            if at >= 0:
                return name, text, None, at + len(text)
    return None


def _address(message: str) -> str | None:
    m = ADDRESS_TUPLE.search(message) or ADDRESS.search(message)
    if not m:
        return None
    return f"{m.group('host')}:{m.group('port')}"


# torch.save's own check (caffe2 serialize, torch >= 2.1: "Parent directory X does not exist."), and the same
# grammar of other writers: a folder or file named, then "does not exist" / "not found" -> ENOENT with its operand
MISSING_PATH = re.compile(
    r"\b(?P<what>[Pp]arent directory|[Dd]irectory|[Ff]older|[Ff]ile|[Pp]ath) '?\"?(?P<path>/[^\s'\"]+|\.{0,2}[\w.-]*/[^\s'\"]*)"
    r"'?\"? (?:does not exist|doesn't exist|not found|is not found)"
)


def errno_answer(message: str, code: str | None, multi: bool, rank: int | None) -> Answer | None:
    found = _errno_of(message)
    missing = MISSING_PATH.search(message)
    if not found and missing:
        path = missing.group("path").rstrip(".")
        if missing.group("what").lower() in ("parent directory", "directory", "folder"):
            # the folder itself is what is missing: name a file inside it, as a write to it would
            path, code = posixpath.join(path, "..."), (code or "") + " save"
        found = ("ENOENT", os.strerror(_errno.ENOENT), path, missing.end())
    if not found:
        return None
    name, text, path, _ = found
    where = f" (rank {rank}'s node)" if rank is not None else ""
    node_note = (
        " This is a multi-process run: a path must exist on every node that uses it (a node-local disk is not "
        "shared; a folder rank 0 creates exists on rank 0's node only)."
        if multi
        else ""
    )
    if name == "ENOENT" and path:
        folder = posixpath.dirname(path.rstrip("/")) or "."
        if code and WRITES.search(code):
            return Answer(
                f"the folder {folder} does not exist",
                f"{name} ({text}) writing {path}: the folder {folder} does not exist where it ran{where}; nothing "
                "creates it before this write." + node_note,
                f"Create the folder before writing (os.makedirs({folder!r}, exist_ok=True)), on every node that "
                "writes, or point the output at storage every node shares.",
                ["errno"],
            )
        return Answer(
            f"{path} does not exist",
            f"{name} ({text}): {path} does not exist where it ran{where}: a path from another machine, a relative "
            "path resolved from another working directory, or a file not yet written." + node_note,
            f"Check the path (ls -l {path}); give an absolute path, and copy the file to every node (or use "
            "storage every node shares).",
            ["errno"],
        )
    if name == "EACCES":
        target = path or _address(message) or "the file or port it names"
        return Answer(
            f"permission denied on {target}",
            f"{name} ({text}): the user running it{where} may not use {target}." + node_note,
            f"Give that user the rights (ls -ld {posixpath.dirname(path) or '.'}; chmod/chown), or use a folder it "
            "owns; for a port below 1024 use a higher one."
            if path
            else "Use a path or port this user may use (ports below 1024 need root).",
            ["errno"],
        )
    address = _address(message)
    if name == "EADDRINUSE":
        port = address.rsplit(":", 1)[1] if address else None
        return Answer(
            f"address {address or ''} already in use".replace("  ", " "),
            f"{name} ({text}): another process already listens on {address or 'that port'}: an earlier run still "
            "alive, two jobs on one node with the same MASTER_PORT, or another service.",
            (f"`ss -ltnp | grep :{port}` names the process; " if port else "")
            + "stop it or choose another port (MASTER_PORT / --master-port, --rdzv-endpoint HOST:PORT).",
            ["errno"],
        )
    if name == "ECONNREFUSED":
        return Answer(
            f"nothing listens at {address or 'the address it connects to'}",
            f"{name} ({text}): nothing accepted the connection at {address or 'that address'}: the server side "
            "(rank 0's store, torchrun's agent, the other rank) had not started yet or had already exited, or the "
            "host or port is wrong.",
            f"Check that MASTER_ADDR:MASTER_PORT{' (' + address + ')' if address else ''} is the first node's address "
            "and port on every node, that rank 0 / the first node is up and listening (`ss -ltn`), and that no "
            "firewall is in the way; if it exited, read its error first.",
            ["errno"],
        )
    if name in ("ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH") and address:
        return Answer(
            f"{address} cannot be reached",
            f"{name} ({text}): no answer from {address}: a wrong address, a firewall, or a route the nodes do not "
            "share.",
            f"From this node, `nc -zv {address.replace(':', ' ')}`; check the address every node was given and the "
            "firewall between them.",
            ["errno"],
        )
    operand = path or address
    return Answer(
        f"{name}: {text}" + (f" ({operand})" if operand else ""),
        f"A system call failed with {name} ({text})" + (f" on {operand}" if operand else "") + f"{where}.",
        "Check " + (operand if operand else "the file, device or address the message names") + f" for {name}: "
        f"`man 3 errno` and the call's man page say when it is returned.",
        ["errno"],
        specific=bool(operand),
    )


# ------------------------------------------------------------------ "not supported / not implemented"
UNSUPPORTED = (
    re.compile(
        r"(?P<y>[\w.`'\"]+(?: [\w.`'\"]+){0,3}) (?:does not|doesn't|do not|cannot|can't) support "
        r"(?P<x>[^.;:\n]{2,80})",
        re.IGNORECASE,
    ),
    re.compile(r"(?P<y>[\w.`'\"]+(?: [\w.`'\"]+){0,3}) (?:has no|lacks) support for (?P<x>[^.;:\n]{2,80})", re.I),
    re.compile(
        r"\b(?P<y>PyTorch|torch|NCCL|gloo|[\w.]+) (?:was|is) (?:built|build|compiled) without (?P<x>[\w.-]+)(?: support)?",
        re.IGNORECASE,
    ),
    re.compile(r"\bno support for (?P<x>[^.;:\n]{2,60}?) (?:in|on|by|with|for) (?P<y>[^.;:\n]{2,60})", re.I),
    re.compile(
        # "=": a keyword setting is the subject ("offload_to_cpu=True and NO_SHARD is not supported yet", FSDP)
        r"(?P<x>[\w.`'\"()\[\]/=-]+(?: [\w.`'\"()\[\]/=-]+){0,6}) (?:is|are) (?:currently |still )?(?:not|un)"
        r"(?: yet)? ?(?:supported|implemented)(?: yet)?(?: (?:for|by|on|in|with|when using|under) "
        r"(?P<y>[^.;:\n]{2,60}))?",
        re.IGNORECASE,
    ),
    re.compile(
        r"(?P<x>[\w.`'\"]+(?: [\w.`'\"]+){0,4}) not (?:supported|implemented)(?: (?:for|by|on|in|with) "
        r"(?P<y>[^.;:\n]{2,60}))?",
        re.I,
    ),
)
COLLECTIVE = re.compile(
    r"\b(all_?reduce|reduce_?scatter\w*|all_?gather\w*|all_?to_?all\w*|alltoall\w*|broadcast|barrier|gather|"
    r"scatter|reduce|send|recv)\b",
    re.IGNORECASE,
)
BACKEND_DEVICE = {  # the device each backend's collectives run on (torch.distributed docs, "Backends")
    "nccl": "CUDA tensors only",
    "gloo": "CPU tensors (and CUDA tensors for some collectives, through host copies)",
    "mpi": "CPU tensors, and CUDA ones when the MPI build is CUDA-aware (torch built from source)",
}


def unsupported_answer(message: str, backend: str | None) -> Answer | None:
    body = EXCEPTION_HEAD.sub("", message, count=1)
    for rx in UNSUPPORTED:
        m = rx.search(body)
        if not m:
            continue
        x = m.group("x").strip(" `'\"")
        y = (m.groupdict().get("y") or "").strip(" `'\"") or backend or "this build or setup"
        alternatives = []
        op = COLLECTIVE.search(x) or COLLECTIVE.search(body)
        low = (x + " " + y).lower()
        if op or any(b in low for b in BACKEND_DEVICE):
            gloo = runtime_tables().get("gloo_cpu_ops") or {}
            alternatives.append(
                "backends: "
                + "; ".join(f"{b} runs on {d}" for b, d in BACKEND_DEVICE.items())
                + (
                    f"; gloo on CPU runs {', '.join(gloo['ops'])} in torch {gloo['torch']} (an older torch's gloo "
                    "lacks some of them: upgrade torch)"
                    if gloo.get("ops")
                    else ""
                )
            )
        if re.search(r"\bcpu\b|\bcuda\b|\bgpu\b|\bmps\b|\bxpu\b|device", low):
            alternatives.append("device: move the tensor or module to a device the backend runs on (.to(device))")
        if re.search(r"windows|win32|macos|darwin|libuv", body, re.IGNORECASE):
            alternatives.append(
                "platform: on Windows and macOS use the gloo backend; a torch built without libuv needs "
                "USE_LIBUV=0 (env) or init_method='tcp://...?use_libuv=0'"
            )
        fix = (
            "Use what the message's subject supports instead: " + "; ".join(alternatives) + "."
            if alternatives
            else f"Avoid {x} with {y}: use another option for it, or a version of the software that supports it "
            "(its release notes say when it was added)."
        )
        return Answer(
            f"{x} is not supported by {y}", f"{x} is unsupported by {y}: the software refuses it.", fix, ["unsupported"]
        )
    return None


# ------------------------------------------------------------------ CUDA and NCCL enums
@functools.cache
def runtime_tables() -> dict:
    try:
        with gzip.open(RUNTIME_ERRORS, "rt", encoding="utf-8") as f:
            return json.load(f)
    except OSError:
        return {}


CUDA_TEXT = re.compile(
    r"(?:CUDA error|CUDA Error|cuda error|Cuda failure|CUDA failure|cudaError)[^:'\n]{0,40}?[:'] ?'?([^'\n]+?)'?"
    r"(?:\n|$|\. |\s+CUDA kernel errors|\s+\(|\s+at\s)"
)
CUDA_NUMBER = re.compile(
    r"cuda runtime error \((\d+)\)|CUDA error (\d+)\b|Cuda failure (\d+)\b|CUDA error: \w+ \((\d+)\)"
    r"|THCudaCheck FAIL [^\n]*?\berror=(\d+)",
    re.IGNORECASE,
)
CUDA_NAME = re.compile(r"\b(cudaError\w+)\b")
NCCL_TEXT = re.compile(r"NCCL [Ee]rror(?: in: \S+:\d+,| \d+:) ([^,\n]+)")
NCCL_NUMBER = re.compile(r"NCCL [Ee]rror (\d+)\b")
NCCL_NAME = re.compile(
    r"\b(nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|"
    r"RemoteError|InProgress|Timeout))\b"
)
CUDA_FIX = (
    "Rerun with CUDA_LAUNCH_BLOCKING=1 so that the call that failed reports it (CUDA reports kernel errors "
    "at a later call); check nvidia-smi for the GPU's state and the driver against torch's CUDA."
)


def _cuda_row(message: str) -> tuple[dict, str] | None:
    rows = runtime_tables().get("cuda", [])
    if not rows:
        return None
    by_text = {r["text"].lower(): r for r in rows}
    m = CUDA_NAME.search(message)
    if m:
        for r in rows:
            if r["name"] == m.group(1):
                return r, r["name"]
    m = CUDA_NUMBER.search(message)
    if m:
        number = int(next(g for g in m.groups() if g))
        old = "runtime error (" in m.group(0).lower() or "thcudacheck" in m.group(0).lower()
        text_after = message[m.end() :].lstrip(" :").split("\n")[0].strip().lower()
        for r in rows:  # the text printed next to the number decides which numbering it is
            if r["text"].lower() and text_after.startswith(r["text"].lower()):
                return r, f"{r['name']} (number {number})"
        new = [r for r in rows if r["number"] == number]
        before = [r for r in rows if r.get("number_before_10_1") == number]
        if old and before and (not new or before[0] is not new[0]):
            alt = f"; in CUDA >= 10.1's numbering {number} is {new[0]['name']}" if new else ""
            return before[0], f"{before[0]['name']} ({number} in CUDA <= 10.0's numbering{alt})"
        if new:
            return new[0], f"{new[0]['name']} ({number})"
    for m in CUDA_TEXT.finditer(message):
        said = m.group(1).strip().rstrip(".").lower()
        for text, r in sorted(by_text.items(), key=lambda kv: -len(kv[0])):
            if text and said.startswith(text):
                return r, r["name"]
    return None


def cuda_answer(message: str) -> Answer | None:
    found = _cuda_row(message)
    if not found:
        return None
    row, named = found
    own, _ = advice(row["meaning"])
    return Answer(
        f"CUDA: {row['text']} ({row['name']})",
        f'The CUDA runtime returned {named}: "{row["text"]}". Its header says: {row["meaning"]}',
        " ".join(own) + (" " if own else "") + CUDA_FIX,
        ["cuda"],
    )


def nccl_answer(message: str) -> Answer | None:
    rows = runtime_tables().get("nccl", [])
    found = None
    m = NCCL_NAME.search(message)
    if m:
        found = next((r for r in rows if r["name"] == m.group(1)), None)
    if found is None:
        m = NCCL_TEXT.search(message)
        if m:
            said = m.group(1).strip().lower()
            found = next(
                (r for r in rows if r["text"] and said.startswith(r["text"].split(" (")[0].split(" - ")[0].lower())),
                None,
            )
    if found is None:
        m = NCCL_NUMBER.search(message)
        if m:
            found = next((r for r in rows if r["number"] == int(m.group(1))), None)
    if found is None:
        return None
    return Answer(
        f"NCCL: {found['name']}",
        f"NCCL returned {found['name']} ({found['number']}): {found['meaning']} NCCL's `Last error:` line, or its "
        "WARN line with NCCL_DEBUG=WARN, names the call that failed.",
        "Rerun with NCCL_DEBUG=WARN (or INFO) and read the WARN line just before this error: it names the call "
        "and its argument; if another rank failed first, fix that one.",
        ["nccl"],
        specific=False,
    )


# ------------------------------------------------------------------ the software's age, proven by the log
# (what the log holds, the release it proves, what changed since)
OLD_RELEASES = (
    (
        re.compile(r"\bTHC(?:udaCheck|General|Tensor|Storage|Blas|/)|/THC/"),
        "THC (torch <= 1.10: THC was removed in torch 1.11)",
        "torch now prints CUDA errors as `CUDA error: TEXT` with the CUDA_LAUNCH_BLOCKING hint",
    ),
    (
        re.compile(r"torch/lib/(?:c10d|THD|gloo|THC)\b|/THD/"),
        "sources under torch/lib/ (torch 1.x before c10d moved to torch/csrc/distributed/, or THD: torch <= 1.0)",
        "the distributed package was rewritten (c10d, torchrun); old errors in it were fixed since",
    ),
    (
        re.compile(r"/python(?:2\.\d|3\.[0-7])/|Python (?:2\.\d|3\.[0-7])\.\d"),
        "an old Python (torch 1.10 was the last for Python 3.6, torch 1.13 for 3.7)",
        "current torch needs Python >= 3.10",
    ),
    (
        re.compile(r"\btorch[ =_-]?(?:version[: ]+)?(0\.\d+|1\.\d+)\.\d+\b"),
        "torch {0}",
        "torch 2.x replaced torch.distributed.launch by torchrun and fixed many distributed errors",
    ),
)


OLD_NEEDLES = ("THC", "torch/lib/", "/THD/", "python2.", "python3.", "Python 2.", "Python 3.", "torch")


def old_release(text: str) -> tuple[str, str] | None:
    """(what the log proves, what changed since) for the first sign of an old release in the log."""
    if not any(n in text for n in OLD_NEEDLES):
        return None
    for rx, proves, changed in OLD_RELEASES:
        m = rx.search(text)
        if m:
            return proves.format(*m.groups()) if m.groups() else proves, changed
    return None


# ------------------------------------------------------------------ nn.DataParallel
DATA_PARALLEL = re.compile(
    r"torch[\\/]nn[\\/]parallel[\\/](?:data_parallel|parallel_apply|replicate|scatter_gather)\.py"
    r"|\bnn\.DataParallel\b|Caught \w+ in replica \d+ on device \d+|module must have its parameters and buffers on "
    r"device"
)
DDP_SIGN = re.compile(r"DistributedDataParallel|nn[\\/]parallel[\\/]distributed\.py|reducer\.cpp")


def data_parallel_answer(message: str, block: str) -> Answer | None:
    if not DATA_PARALLEL.search(message + "\n" + block) or DDP_SIGN.search(message + "\n" + block):
        return None
    replica = re.search(r"Caught (\w+) in replica (\d+) on device (\d+)", message + "\n" + block)
    if replica:
        cause = (
            f"nn.DataParallel (one process driving every GPU through threads; not DDP) ran the model's forward on "
            f"replica {replica.group(2)} (GPU {replica.group(3)}) and it raised {replica.group(1)}: the error is the "
            "model's own, shown under `Original Traceback`."
        )
    elif "parameters and buffers on device" in message:
        cause = (
            "nn.DataParallel (one process, threads per GPU; not DDP) needs the module on device_ids[0] before it is "
            "called; some parameter or buffer is elsewhere (on the CPU)."
        )
    else:
        cause = "The error comes from nn.DataParallel (one process driving every GPU through threads), not DDP."
    return Answer(
        "an nn.DataParallel error (not DDP)",
        cause,
        "Move the model to device_ids[0] before wrapping (model.to('cuda:0'); nn.DataParallel(model)) and read the "
        "original traceback for an error in forward; PyTorch recommends DistributedDataParallel (torchrun, one "
        "process per GPU) instead of DataParallel, and `ddplab new` writes such a script.",
        ["data-parallel"],
    )


# ------------------------------------------------------------------ Python's own grammar: argparse, imports, wrappers
ARGPARSE_REQUIRED = re.compile(r"error: the following arguments are required: (?P<args>[^\n]+)")
ARGPARSE_UNKNOWN = re.compile(r"(?:(?P<prog>[\w.-]+): )?error: unrecognized arguments: (?P<args>[^\n]+)")
TORCH_LAUNCHERS = ("launch.py", "run.py", "torchrun")
NO_MODULE = re.compile(r"(?:(?P<python>\S*python[\d.]*):\s+)?No module named '?(?P<module>[\w.]+)'?")
# Python 3's import system imports a dotted name part by part (`import a.b.c`: a, then a.b, then a.b.c) and names
# the first part it cannot find, quoted ("No module named 'a.b'", Python >= 3.3): a dotted name in it means every
# package above its last part was imported. When that top package is an installed one (frames of it under
# site-packages, or a package every such log has installed), its installed release lacks the submodule the code
# imports: a version mismatch between the code and the package, not a package missing from the interpreter.
NO_SUBMODULE = re.compile(r"No module named '(?P<module>(?P<top>[A-Za-z_]\w*)(?:\.\w+)*\.(?P<last>\w+))'")
# The names packages give their compiled extension: torch._C, torchvision._C, detectron2._C, mmcv._ext,
# pointnet2._ext, a _cuda or _C suffix.
COMPILED_PART = re.compile(r"_(?:C|ext|\w*_(?:C|ext|cuda|cpp))$")
WELL_KNOWN_PACKAGES = frozenset(
    "torch torchvision torchaudio torchtext transformers accelerate deepspeed datasets peft diffusers timm "
    "tokenizers huggingface_hub safetensors triton apex numpy scipy sklearn pandas tensorflow keras jax flax "
    "mmcv mmdet mmseg mmengine pytorch_lightning lightning torchmetrics xformers bitsandbytes vllm PIL cv2".split()
)
WRAPPER_ATTRIBUTE = re.compile(
    r"'(?P<wrapper>DistributedDataParallel|DataParallel|FullyShardedDataParallel|DeepSpeedEngine|"
    r"OptimizedModule)' object has no attribute '(?P<attr>\w+)'"
)
LOCAL_RANK_ARG = re.compile(r"--local[_-]rank")


# torch's dispatcher and device checks, the loader and pickle: fixed grammar around the names they print
TWO_DEVICES = re.compile(r"found at least two devices,\s*(?P<a>[\w:]+) and (?P<b>[\w:]+)")
NO_KERNEL = re.compile(r"Could not run '(?P<op>[\w:.]+)' with arguments from the '(?P<backend>\w+)' backend")
NO_LIBRARY = re.compile(r"(?P<lib>lib[\w.+-]+\.so[\w.]*): cannot open shared object file")
CANT_PICKLE = re.compile(r"(?:Can't|cannot|Can not) pickle (?:local object )?'?(?P<what>[^'\n:\s]{1,80})'?", re.I)
# pickle's find_class (Lib/pickle.py, Modules/_pickle.c, every Python 3): "Can't get attribute {name!r} on {module!r}":
# the unpickling process has no such name in that module; for __main__ / __mp_main__ that is a spawned child (mp.spawn,
# DataLoader workers under spawn, a spawn-based launcher) that re-imports the parent's main script as __mp_main__ and
# does not run its `if __name__ == "__main__":` block, or has no script at all (a notebook: "(built-in)").
CANT_GET_ATTRIBUTE = re.compile(
    r"Can't get attribute '(?P<name>[\w.<>]{1,80})' on <module '(?P<module>__main__|__mp_main__)'(?P<where>[^>\n]*)>"
)


def torch_answer(message: str) -> Answer | None:
    m = TWO_DEVICES.search(message)
    if m:
        a, b = m.group("a"), m.group("b")
        gpus = a.startswith("cuda") and b.startswith("cuda")
        return Answer(
            f"one operation got tensors on {a} and {b}",
            f"An operation got tensors on two devices ({a} and {b})."
            + (
                " With one process per GPU, a tensor or module created on the default device (cuda:0: a missing "
                "torch.cuda.set_device(local_rank), a hard-coded .cuda() or 'cuda:0', a checkpoint loaded without "
                "map_location) meets the rank's own GPU."
                if gpus
                else " Part of the model or of the batch was not moved to the device the rest is on."
            ),
            "Put everything a rank uses on its own device: torch.cuda.set_device(local_rank) first, then "
            "model.to(device) and batch.to(device) with device = torch.device('cuda', local_rank); "
            "torch.load(..., map_location=device)."
            if gpus
            else "Move the model and every input to one device (model.to(device); x = x.to(device)) before the call.",
            ["torch"],
        )
    m = NO_KERNEL.search(message)
    if m:
        op, backend = m.group("op"), m.group("backend")
        return Answer(
            f"{op} has no {backend} kernel here",
            f"The operator {op} has no implementation for the {backend} backend in this build: the tensor is on a "
            f"device the op does not support, or the library that provides it was built without {backend} (a "
            "CPU-only wheel of torch, torchvision or an extension, or one built for another torch).",
            f"Move the input to a device {op} supports, or install builds of torch and the extension (torchvision, "
            f"...) made for each other and with {backend} support (`python -c 'import torch; print(torch.__version__, "
            "torch.version.cuda)'`).",
            ["torch"],
        )
    m = NO_LIBRARY.search(message)
    if m:
        lib = m.group("lib")
        return Answer(
            f"the loader cannot find {lib}",
            f"A compiled module needs {lib} and the dynamic loader finds no such file: it was built against another "
            "version of that library (a CUDA or NCCL runtime other than the installed one) or the library's folder "
            "is not on the loader's path.",
            f"Install the build made for the installed runtime (torch and its extensions from the same CUDA index), "
            f"or put {lib}'s folder on LD_LIBRARY_PATH (`ldconfig -p | grep {lib.split('.so')[0]}`).",
            ["torch"],
        )
    m = CANT_PICKLE.search(message)
    if m:
        what = m.group("what").strip(" '\"")
        return Answer(
            f"{what} cannot be pickled",
            f"Starting processes with spawn (mp.spawn, DataLoader workers, some launchers) pickles what is passed "
            f"to them, the model and its attributes included; {what} cannot be pickled (a lambda, a local "
            "function, a lock or an open handle).",
            "Define functions at module level instead of lambdas or local functions, keep locks and handles out of "
            "what the processes receive (create them inside the worker), or pass a name and build the object there.",
            ["python"],
        )
    m = CANT_GET_ATTRIBUTE.search(message)
    if m:
        name, where = m.group("name"), m.group("where")
        notebook = "built-in" in where
        return Answer(
            f"the spawned process cannot find {name} in __main__",
            f"Starting processes with spawn (mp.spawn, DataLoader workers under spawn, spawn-based DDP) pickles {name} "
            "by reference to the module that defines it, and the new process could not find it there: "
            + (
                "it was defined in a notebook or an interactive session, whose __main__ the new process does not have."
                if notebook
                else "the child imports the main script as __mp_main__ without running its "
                "`if __name__ == '__main__':` block, so a class or function defined inside that block (or created "
                "dynamically) does not exist there."
            ),
            f"Define {name} at module level in an importable .py file and import it"
            + (" (run DDP from a script with torchrun, not from the notebook)" if notebook else "")
            + "; start the processes from a script, under `if __name__ == '__main__':`.",
            ["python"],
        )
    return None


def _installed(top: str, context: str) -> bool:
    """The log shows `top` installed: frames (or paths) of it under site-packages/dist-packages, or it is one of
    the well-known packages."""
    if top in WELL_KNOWN_PACKAGES:
        return True
    return re.search(rf"(?:site|dist)-packages[\\/]{re.escape(top)}[\\/]", context) is not None


def submodule_answer(message: str, context: str = "") -> Answer | None:
    """`No module named 'pkg.sub'`: pkg's compiled extension never built (sub named as extensions are), or, pkg
    installed, its installed release has no such submodule (an interpreter's own "python3: No module named x", for
    `python -m x`, is python_answer's)."""
    m = NO_SUBMODULE.search(message)
    if not m:
        return None
    module, top, last = m.group("module"), m.group("top"), m.group("last")
    parent = module.rsplit(".", 1)[0]
    # an installed package or a project's own source tree: either way Python imported the parent, not its build
    if COMPILED_PART.match(last):
        return Answer(
            f"{top}'s compiled extension {module} is missing: not built, or built for another Python",
            f"{module} is, by its name, {top}'s compiled (C++/CUDA) extension, and Python imported {parent} but "
            f"found no built {last} in it: {top} was installed without building it (a source install whose build "
            f"step did not run or failed, or a package without its compiled ops, e.g. mmcv rather than mmcv-full), "
            f"it was built for another Python version (the file's name carries the version it was built for), or "
            f"Python imported {top}'s source folder (the current directory shadows the installed package) where "
            f"it was never built.",
            f"Install a build of {top} that includes it, made for your torch, CUDA and Python (the project's install "
            f"instructions name it), or build it (`pip install -v -e .` in its source, and read the compiler's "
            f"errors); then check with `python -c 'import {module}'` run outside {top}'s source folder.",
            ["python", "build"],
        )
    if not _installed(top, context + message):
        return None
    what = (
        f"{last} is a private submodule (its leading underscore), which packages move or remove between releases "
        "without notice"
        if last.startswith("_")
        else f"this release of {top} does not have it (it came in a newer release, or was removed or renamed in one)"
    )
    return Answer(
        f"the installed {top} has no {module}: a version mismatch",
        f"Python imported {parent} (an import names the first part of a dotted name it cannot find), so {top} is "
        f"installed, but not {module}: {what}. The code that imports it (yours, or a library's: the frame above the "
        f"error) was written for another version of {top} than the one installed.",
        f"Install the version of {top} the code was written for (its requirements or README; `python -c 'import "
        f"{top}; print({top}.__version__)'` shows the installed one), or update the code: upgrade the library that "
        f"imports {module} to a release made for this {top}, or change the import in your own code.",
        ["python", "version"],
    )


def python_answer(message: str, context: str = "") -> Answer | None:
    m = ARGPARSE_REQUIRED.search(message)
    if m:
        args = m.group("args").strip()
        launcher = (
            " torchrun (and torch.distributed.launch --use-env) pass no --local_rank argument: they set LOCAL_RANK "
            "in the environment."
            if LOCAL_RANK_ARG.search(args)
            else ""
        )
        return Answer(
            f"the script requires {args}",
            f"The script's argument parser requires {args} and the command that started it did not pass it." + launcher,
            f"Pass {args} on the command line"
            + (
                ", or better make the argument optional and read int(os.environ['LOCAL_RANK']) (what torchrun sets)"
                if launcher
                else ""
            )
            + ".",
            ["python"],
        )
    m = ARGPARSE_UNKNOWN.search(message)
    if m:
        args = m.group("args").strip()
        if m.group("prog") in TORCH_LAUNCHERS:
            return Answer(
                f"this torch's launcher does not accept {args}",
                f"torch's own launcher ({m.group('prog')}) of this torch version does not know {args}: the flag "
                "belongs to a newer torch (torchrun and its --rdzv-* flags came with torch 1.9-1.10; older "
                "spellings use underscores) or is misspelled.",
                f"Check `python -m torch.distributed.launch --help` (or `torchrun --help`) of this torch and drop or "
                f"respell {args}, or upgrade torch to the version the command was written for.",
                ["python"],
            )
        launcher = (
            " torch.distributed.launch passes --local_rank=N (torch < 2.0) or --local-rank=N (torch >= 2.0) to "
            "every process; the script does not define that spelling."
            if LOCAL_RANK_ARG.search(args)
            else ""
        )
        return Answer(
            f"the script does not accept {args}",
            f"The script's argument parser does not know {args}, which the command that started it passed." + launcher,
            "Define the argument in the script (for the launcher's: parser.add_argument('--local-rank', "
            "'--local_rank', type=int, default=0)), or start it with torchrun and read LOCAL_RANK from the "
            "environment."
            if launcher
            else f"Remove {args} from the command, or define it in the script's argument parser.",
            ["python"],
        )
    m = WRAPPER_ATTRIBUTE.search(message)
    if m:
        wrapper, attr = m.group("wrapper"), m.group("attr")
        return Answer(
            f"{wrapper} hides the model's attribute {attr}",
            f"The model was wrapped in {wrapper}; the wrapper is a new module that holds the model as .module, so "
            f"the model's own attribute {attr} is not on the wrapper.",
            f"Reach it through the wrapped model: model.module.{attr} (keep a reference to the unwrapped model, or "
            "use accelerator.unwrap_model / model.module when saving).",
            ["python"],
        )
    m = NO_MODULE.search(message)
    if m and not m.group("python") and (submodule := submodule_answer(message, context)):
        return submodule
    if m:
        module, python = m.group("module"), m.group("python")
        who = f"the interpreter {python}" if python else "the Python that ran it"
        return Answer(
            f"{module} is not installed in {who}",
            f"{who[0].upper() + who[1:]} cannot import {module}: it is not installed there. Usually another "
            "interpreter than the one you installed into (sudo's or the system's python, another virtual "
            "environment or conda env, a node whose environment differs).",
            f"Run with the Python that has it (`which python`; `python -c 'import {module.split('.')[0]}'`), or "
            "install it into that one; under sudo or a scheduler, give the full path of your environment's python.",
            ["python"],
        )
    return None


# ------------------------------------------------------------------ all of it
def answer(
    message: str,
    *,
    code: str | None = None,
    block: str = "",
    log: str = "",
    multi: bool = False,
    rank: int | None = None,
    backend: str | None = None,
) -> Answer | None:
    """The message's own answer. `message`: the error (with its continuation lines); `code`: the source line of
    the frame that raised it; `block`: the failing rank's traceback; `log`: the whole log (for the release it
    proves); `multi`: the log is a multi-process run."""
    if not message:
        return None
    parts: list[Answer] = []
    dp = data_parallel_answer(message, block)
    if dp:
        parts.append(dp)
    for reading in (
        python_answer(message, log or block),
        torch_answer(message),
        cuda_answer(message),
        nccl_answer(message),
        errno_answer(message, code, multi, rank),
        unsupported_answer(message, backend),
    ):
        if reading:
            parts.append(reading)
            break
    own, rest = advice(message)
    if own:
        statement = rest[0] if rest else None
        parts.insert(
            0 if not parts or not parts[0].specific else 1,
            Answer(
                "the message says what to do",
                statement or ("" if parts else "The message states its own fix."),
                " ".join(own[:3]),
                ["advice"],
            ),
        )
    old = old_release(log or block or message)
    if not parts and not old:
        return None
    if not parts:
        return Answer(
            f"a message from an old release: {old[0]}",
            f"This log comes from an old release ({old[0]}); {old[1]}.",
            "Upgrade torch (and the Python it supports) first: an error of an old release is often fixed since.",
            ["old-release"],
            specific=False,
        )
    first = parts[0]
    cause = " ".join(dict.fromkeys(p.cause for p in parts if p.cause))
    fix = " ".join(dict.fromkeys(p.fix for p in parts))
    kinds = [k for p in parts for k in p.kinds]
    if old:
        cause += f" The log comes from an old release ({old[0]}); {old[1]}."
        fix += " Upgrading torch is worth trying first: an old release's error is often fixed since."
        kinds.append("old-release")
    return Answer(first.title, cause, fix, kinds, specific=any(p.specific for p in parts))
