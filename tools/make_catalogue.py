"""Extract the error and warning texts torch, NCCL and the OS can print, and report which ones explain's rules cover.

    python tools/make_catalogue.py                       # report on the catalogue in the repository
    python tools/make_catalogue.py --write               # re-extract from the installed torch and write it
    python tools/make_catalogue.py --write --download-nccl DIR   # + NCCL: pip download nvidia-nccl-cu12 into DIR
    python tools/make_catalogue.py --write --nccl-wheel WHEEL    # or use a wheel already downloaded
    python tools/make_catalogue.py --uncovered SOURCE    # list what no rule covers

Sources (one gzip'd JSON file each under src/ddplab/explain/catalogue/, with the version it came from):
- torch-python: every `raise X("...")`, `warnings.warn("...")` and `logger.warning/error/...("...")` in the Python
  sources of torch.distributed (elastic and its rendezvous, c10d, DDP, FSDP/fully_shard, DTensor, DeviceMesh,
  checkpoint), found with `ast`; f-strings and %-formats keep their fields as `{}` / `%s`.
- torch-native: the strings of libtorch_cpu / libtorch_python / libtorch_cuda (when installed) that come from
  torch/csrc/distributed/c10d/ and third_party/gloo/. A string is attributed to the source file whose path string lies
  nearest to it in .rodata (a compilation unit's literals are stored together; INTERNAL ASSERT texts name their file).
- nccl: the strings of libnccl.so from the nvidia-nccl-cu12 wheel (downloaded only when asked), attributed to NCCL's
  source files the same way; NCCL's result texts (ncclGetErrorString) are among them.
- os: strerror(errno) for every errno and strsignal(sig) for every signal this machine knows (Linux numbering).

Nothing is downloaded at run time: `ddplab explain` reads only the files written here.
"""

from __future__ import annotations

import argparse
import ast
import collections
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ddplab.explain import catalogue  # noqa: E402

# torch.distributed's parts the issue names; paths relative to the torch package
TORCH_PY_DIRS = (
    "distributed/elastic",
    "distributed/fsdp",
    "distributed/_composable",
    "distributed/tensor",
    "distributed/checkpoint",
    "distributed/launcher",
)
TORCH_PY_FILES = (
    "distributed/distributed_c10d.py",
    "distributed/rendezvous.py",
    "distributed/run.py",
    "distributed/device_mesh.py",
    "distributed/utils.py",
    "distributed/c10d_logger.py",
    "distributed/_functional_collectives.py",
    "nn/parallel/distributed.py",
    "nn/modules/batchnorm.py",
)
LOG_CALLS = {"warning", "warn", "error", "exception", "critical", "fatal", "info", "debug"}
NATIVE_LIBS = ("libtorch_cpu.so", "libtorch_python.so", "libtorch_cuda.so")
NATIVE_PATH = re.compile(r"(?:torch/csrc/distributed/c10d/|third_party/gloo/gloo/)[\w/.-]+\.(?:cpp|cc|h|hpp)$")
NCCL_PATH = re.compile(r"^C?((?:[a-z_]+/)*[a-z_]+(?:/[\w]+)*\.(?:cc|h|cu))$")
MIN_MESSAGE = re.compile(r"[A-Za-z]{3,}.*\s.*[A-Za-z]{3,}")  # two words at least: a message, not an identifier


# ------------------------------------------------------------------------------------------------ torch's Python


def _text(node: ast.AST) -> str | None:
    """A message argument as a template: literals kept, every formatted field as {}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left, right = _text(node.left), _text(node.right)
        if isinstance(node.op, ast.Mod):
            return left
        return (left or "{}") + (right or "{}") if (left or right) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _text(node.func.value)
    return None


def _call_name(func: ast.AST) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def python_templates(torch_dir: Path) -> list[dict]:
    files = [p for d in TORCH_PY_DIRS for p in sorted((torch_dir / d).rglob("*.py"))]
    files += [torch_dir / f for f in TORCH_PY_FILES if (torch_dir / f).exists()]
    found = []
    for path in files:
        rel = "torch/" + path.relative_to(torch_dir).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            kind = exc = None
            args: list[ast.AST] = []
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                kind, exc, args = "raise", _call_name(node.exc.func), node.exc.args
            elif isinstance(node, ast.Call):
                name = _call_name(node.func)
                owner = node.func.value if isinstance(node.func, ast.Attribute) else None
                owner_name = _call_name(owner) if owner is not None else ""
                if name == "warn" and owner_name == "warnings":
                    kind, args = "warn", node.args
                elif name in LOG_CALLS and re.search(r"log", owner_name, re.I):
                    kind, args = f"log.{name}", node.args
            if kind is None or not args:
                continue
            text = _text(args[0])
            if text and MIN_MESSAGE.search(text):
                found.append(
                    {
                        "text": " ".join(text.split()),
                        "file": rel,
                        "line": node.lineno,
                        "kind": kind,
                        **({"exc": exc} if exc else {}),
                    }
                )
    return _unique(found)


# ------------------------------------------------------------------------------------------------ native libraries


def _rodata(path: Path) -> tuple[int, bytes]:
    """(file offset, bytes) of an ELF64 file's .rodata section: the literals, not the debug strings."""
    with open(path, "rb") as f:
        head = f.read(64)
        (shoff,) = struct.unpack_from("<Q", head, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
        f.seek(shoff)
        table = f.read(shentsize * shnum)
        sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
        names_off, names_size = sections[shstrndx][4], sections[shstrndx][5]
        f.seek(names_off)
        names = f.read(names_size)
        for sec in sections:
            name = names[sec[0] : names.index(b"\0", sec[0])].decode()
            if name == ".rodata":
                f.seek(sec[4])
                return sec[4], f.read(sec[5])
    raise ValueError(f"{path}: no .rodata section")


def _strings(data: bytes, minimum: int = 6) -> list[tuple[int, str]]:
    return [(m.start(), m.group().decode("ascii")) for m in re.finditer(rb"[\x20-\x7e\t]{%d,}" % minimum, data)]


def _attribute(strings: list[tuple[int, str]], path_re: re.Pattern, window: int | None) -> list[tuple[str, str]]:
    """(text, source file) for each string within `window` bytes of the nearest source-path string (any distance
    when window is None)."""
    paths = [
        (off, m.group(1) if m.groups() else m.group())
        for off, s in strings
        for m in [path_re.search(s.strip())]
        if m and "INTERNAL ASSERT" not in s
    ]
    offsets = [p[0] for p in paths]
    import bisect

    out = []
    for off, s in strings:
        if not paths:
            break
        i = bisect.bisect_left(offsets, off)
        near = [paths[j] for j in (i - 1, i) if 0 <= j < len(paths)]
        best = min(near, key=lambda p: abs(p[0] - off))
        if (window is None or abs(best[0] - off) <= window) and best[1] != s.strip():
            out.append((s, best[1]))
    return out


# The linker pools short literals apart from their file's path; a string counts as c10d/gloo's when most of its
# neighbours in the pool name c10d/gloo things.
POOL_MARK = re.compile(
    r"c10d|gloo|Gloo|ProcessGroup|TCPStore|Store|socket|Socket|[Rr]educer|DDP|collective|"
    r"rendezvous|enforce fail|bucket|world_size|rank"
)


def _pooled(strings: list[tuple[int, str]], span: int = 20, share: float = 0.3) -> list[tuple[str, str]]:
    marks = [bool(POOL_MARK.search(s)) for _, s in strings]
    prefix = [0]
    for m in marks:
        prefix.append(prefix[-1] + m)
    out = []
    for i, (_, s) in enumerate(strings):
        lo, hi = max(0, i - span), min(len(strings), i + span + 1)
        if (prefix[hi] - prefix[lo]) / (hi - lo) >= share:
            out.append((s, "c10d/gloo (pooled literal)"))
    return out


def native_templates(torch_dir: Path) -> tuple[list[dict], list[str]]:
    found, libs = [], []
    for lib in NATIVE_LIBS:
        path = torch_dir / "lib" / lib
        if not path.exists():
            continue
        libs.append(lib)
        _, data = _rodata(path)
        strings = _strings(data)
        for text, src in _attribute(strings, NATIVE_PATH, window=4096) + _pooled(strings):  # noqa: E501
            own = re.search(
                r'INTERNAL ASSERT FAILED at "[^"]*?((?:torch/csrc/distributed/c10d|third_party/gloo)'
                r'/[^"]+)"',
                text,
            )
            src = own.group(1) if own else src
            src = re.sub(r"^.*?(torch/csrc/|third_party/gloo/)", r"\1", src)
            if MIN_MESSAGE.search(text):
                found.append({"text": " ".join(text.split()), "file": src, "lib": lib})
    return _unique(found), libs


def nccl_templates(wheel: Path) -> tuple[list[dict], str]:
    version = re.search(r"nvidia_nccl_cu\d+-([\d.]+)", wheel.name).group(1)
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        name = next(n for n in z.namelist() if re.search(r"lib/libnccl\.so", n))
        lib = Path(z.extract(name, tmp))
        _, data = _rodata(lib)
    found = []
    for text, src in _attribute(_strings(data), NCCL_PATH, window=None):
        if MIN_MESSAGE.search(text):
            found.append({"text": " ".join(text.split()), "file": src})
    return _unique(found), version


def os_templates() -> list[dict]:
    found = [
        {"text": os.strerror(n), "file": "strerror", "errno": n}
        for n in range(1, 134)
        if not os.strerror(n).startswith("Unknown error")
    ]
    for sig in signal.Signals:
        text = signal.strsignal(sig)
        if text:
            found.append({"text": text, "file": "strsignal", "signal": sig.name, "number": int(sig)})
    return found


def _unique(items: list[dict]) -> list[dict]:
    seen, out = set(), []
    for item in items:
        key = item["text"]  # the first attribution wins (a path nearby before a pooled guess)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


# ------------------------------------------------------------------------------------------------ coverage


def report(uncovered: str | None = None) -> int:
    from ddplab.explain.rules import coverage

    rows = []
    for source in catalogue.SOURCES:
        data = catalogue.load(source)
        if data is None:
            print(f"{source:13s} not in the catalogue (run with --write)")
            continue
        counts = collections.Counter()
        missing = []
        for t in data["templates"]:
            how, _ = coverage(source, t)
            counts[how] += 1
            if how == "uncovered":
                missing.append(t)
        user = counts["rule"] + counts["family"] + counts["uncovered"]
        share = 100 * (counts["rule"] + counts["family"]) / max(user, 1)
        rows.append((source, data["version"], len(data["templates"]), counts, user, share))
        if uncovered == source:
            for t in missing:
                print(f"  {t['file']}: {t['text'][:150]}")
    print(
        f"{'source':13s} {'version':22s} {'templates':>9s} {'rule':>6s} {'family':>6s} {'not user-facing':>15s} "
        f"{'uncovered':>9s} {'covered':>8s}"
    )
    for source, version, total, c, _user, share in rows:
        print(
            f"{source:13s} {version[:22]:22s} {total:9d} {c['rule']:6d} {c['family']:6d} {c['internal']:15d} "
            f"{c['uncovered']:9d} {share:7.1f}%"
        )
    from ddplab.explain.rules import NOT_USER_FACING

    print("not user-facing: " + "; ".join(NOT_USER_FACING.values()), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="re-extract and write the catalogue files")
    parser.add_argument("--download-nccl", metavar="DIR", help="pip download the nvidia-nccl-cu12 wheel into DIR")
    parser.add_argument("--nccl-wheel", metavar="WHEEL", help="an nvidia-nccl-cu12 wheel already downloaded")
    parser.add_argument("--uncovered", metavar="SOURCE", help="list the templates of SOURCE no rule covers")
    args = parser.parse_args(argv)
    if args.write:
        import torch

        torch_dir = Path(torch.__file__).parent
        catalogue.write("torch-python", torch.__version__, python_templates(torch_dir))
        native, libs = native_templates(torch_dir)
        catalogue.write("torch-native", f"{torch.__version__} ({', '.join(libs)})", native)
        catalogue.write("os", f"{sys.platform} {os.uname().release}", os_templates())
        wheel = Path(args.nccl_wheel) if args.nccl_wheel else None
        if args.download_nccl:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "nvidia-nccl-cu12",
                    "--no-deps",
                    "-q",
                    "-d",
                    args.download_nccl,
                ],
                check=True,
            )
            wheel = max(Path(args.download_nccl).glob("nvidia_nccl_cu*.whl"))
        if wheel is not None:
            templates, version = nccl_templates(wheel)
            catalogue.write("nccl", version, templates)
    return report(args.uncovered)


if __name__ == "__main__":
    sys.exit(main())
