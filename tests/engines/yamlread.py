"""Reads back the block YAML that ddplab.engines.yamltext writes (mappings, lists, literal blocks, JSON-quoted or
plain scalars), so the tests check the text itself, not only the dict it came from. Cross-checked against PyYAML's
safe_load and SkyPilot's own loader when the schemas were vendored (tools/vendor_engine_schemas.py)."""

from __future__ import annotations

import json
import re


def _scalar(text: str):
    if text.startswith('"'):
        return json.loads(text)
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if text == "{}":
        return {}
    if text == "[]":
        return []
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def load(text: str):
    lines = [line for line in text.split("\n") if not line.startswith("#")]
    value, _ = _block(lines, 0, 0)
    return value


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _skip(lines, i):
    while i < len(lines) and not lines[i].strip():
        i += 1
    return i


def _block(lines, i, indent):
    i = _skip(lines, i)
    if i >= len(lines):
        return None, i
    if lines[i].lstrip().startswith("- ") or lines[i].strip() == "-":
        return _list(lines, i, _indent(lines[i]))
    return _map(lines, i, _indent(lines[i]))


def _value(rest: str, lines, i, indent):
    """The value after 'key:' or '-' whose text is `rest`; i is the next line."""
    if rest == "|":
        body, j = [], i
        inner = None
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
            if lines[j].strip() and inner is None:
                inner = _indent(lines[j])
            body.append(lines[j])
            j += 1
        while body and not body[-1].strip():
            body.pop()
        return "\n".join(b[inner:] if b.strip() else "" for b in body) + "\n", j
    if rest:
        return _scalar(rest), i
    j = _skip(lines, i)
    if j < len(lines) and _indent(lines[j]) > indent:
        return _block(lines, j, _indent(lines[j]))
    if j < len(lines) and _indent(lines[j]) == indent and lines[j].lstrip().startswith("- "):
        return _list(lines, j, indent)  # a list under a key at the key's own indentation
    return None, i


def _key(text: str) -> tuple[str, str]:
    if text.startswith('"'):
        end = json.JSONDecoder().raw_decode(text)[1]
        return json.loads(text[:end]), text[end + 1 :].strip()
    key, _, rest = text.partition(":")
    return key, rest.strip()


def _map(lines, i, indent):
    out = {}
    while True:
        i = _skip(lines, i)
        if i >= len(lines) or _indent(lines[i]) != indent or lines[i].lstrip().startswith("- "):
            return out, i
        key, rest = _key(lines[i].strip())
        out[key], i = _value(rest, lines, i + 1, indent)


def _list(lines, i, indent):
    out = []
    while True:
        i = _skip(lines, i)
        if i >= len(lines) or _indent(lines[i]) != indent or not lines[i].lstrip().startswith("-"):
            return out, i
        rest = lines[i].strip()[1:].strip()
        if (
            rest
            and not rest.startswith('"')
            and re.match(r"^[^:]+:( |$)", rest)
            or rest.startswith('"')
            and '":' in rest
        ):
            # a mapping that starts on the dash's line: re-read it as if the dash were indentation
            lines = lines[:i] + [" " * (indent + 2) + rest] + lines[i + 1 :]
            item, i = _map(lines, i, indent + 2)
        else:
            item, i = _value(rest, lines, i + 1, indent)
        out.append(item)
