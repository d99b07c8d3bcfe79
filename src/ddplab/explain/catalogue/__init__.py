"""The messages torch, NCCL and the OS can print, extracted from the software itself by tools/make_catalogue.py.

One gzip'd JSON file per source: {"source", "version", "templates": [{"text", "file", ...}]}. A template's fields
are `{}` (Python) or printf's `%s`/`%d`/... (C). explain's family rules (explain/rules.py) derive patterns from them.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

HERE = Path(__file__).parent
SOURCES = ("torch-python", "torch-native", "nccl", "os")
FIELD = re.compile(r"\{[^{}]*\}|%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L|q)?[diouxXeEfgGcspn]|%%")


@functools.cache
def load(source: str) -> dict | None:
    path = HERE / f"{source}.json.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write(source: str, version: str, templates: list[dict]) -> Path:
    path = HERE / f"{source}.json.gz"
    data = {"source": source, "version": version, "templates": sorted(templates, key=lambda t: (t["file"], t["text"]))}
    # mtime=0: the same extraction writes the same bytes
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(data, indent=0, sort_keys=True).encode())
    load.cache_clear()
    _literal_parts.cache_clear()
    return path


def render(text: str) -> str:
    """A template as a log could show it: each field replaced by a sample value."""
    return FIELD.sub("7", text)


def chunks(text: str) -> list[str]:
    """The literal parts of a template, between its fields."""
    return [c.strip() for c in FIELD.split(text) if c.strip()]


@functools.cache
def _literal_parts(shortest: int) -> list[tuple[dict, dict, list[str], int]]:
    """Every template with its literal parts of `shortest` characters and more, and the length of all its parts:
    split once per process (closest() was splitting ~11,000 templates on every call: 90 % of explain's time)."""
    indexed = []
    for source in SOURCES:
        data = load(source)
        for t in (data or {}).get("templates", ()):
            every = chunks(t["text"])
            indexed.append((data, t, [c for c in every if len(c) >= shortest], max(1, sum(len(c) for c in every))))
    return indexed


# Close enough to name (issue 43): the shared parts cover this share of the error's own text, or are this long
CLOSE_SHARE = 0.3
CLOSE_CHARS = 40
EXCEPTION_TYPE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Warning)\b:?\s*")


def closest(error: str, shortest: int = 12, sources: tuple[str, ...] | None = None) -> str | None:
    """The catalogue entry whose literal parts the error line contains most of (parts of `shortest` characters and
    more: short ones match anything), said with where it comes from; None when no entry shares such a part, or when
    what it shares is a small part of the error (under CLOSE_SHARE of its text and CLOSE_CHARS characters: a
    common phrase, not the same message). `sources`: the catalogue's sources to look in (default: all)."""
    best, best_score, best_found = None, 0.0, 0
    for data, t, parts, total in _literal_parts(shortest):
        if sources is not None and data["source"] not in sources:
            continue
        found = sum(len(c) for c in parts if c in error)
        score = found / total
        if found and score > best_score:
            best, best_score, best_found = (data, t), score, found
    message = EXCEPTION_TYPE.sub("", error, count=1).strip()
    if best is None or (best_found < CLOSE_CHARS and best_found < CLOSE_SHARE * max(1, len(message))):
        return None
    data, t = best
    where = f"{t['file']}:{t['line']}" if t.get("line") else t["file"]
    return f"{t['text']} ({data['source']} {data['version']}, {where})"
