"""YAML text for the engines' files, written by hand (no YAML library in ddplab's dependencies): block mappings and
lists, scalars quoted as JSON strings where plain YAML could misread them, shell scripts as literal blocks."""

from __future__ import annotations

import json
import re

PLAIN = re.compile(r"^[A-Za-z0-9_./@-][A-Za-z0-9_./@:-]*$")  # safe unquoted: no ': ', '#', leading '-' + space...
TRUTHY = {"y", "yes", "n", "no", "true", "false", "on", "off", "null", "~"}  # YAML 1.1 would read these otherwise


class Literal(str):
    """A multi-line string written as a literal block (|), e.g. a shell script."""


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if PLAIN.match(text) and text.lower() not in TRUTHY and not re.fullmatch(r"[-+.\d:eE_]+", text):
        return text
    return json.dumps(text)


def dump(value, indent: int = 0) -> str:
    return "\n".join(_lines(value, indent)) + "\n"


def _lines(value, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _entry(f"{pad}{_scalar(key)}:", item, indent)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                first, *rest = _lines(item, indent + 2)
                out += [f"{pad}- {first.lstrip()}", *rest]
            else:
                out += _entry(f"{pad}-", item, indent)
    return out


def _entry(head: str, item, indent: int) -> list[str]:
    if isinstance(item, Literal):
        body = [(" " * (indent + 2) + line) if line else "" for line in item.rstrip("\n").split("\n")]
        return [f"{head} |", *body]
    if isinstance(item, (dict, list)) and item:
        return [head, *_lines(item, indent + 2)]
    if isinstance(item, dict):
        return [f"{head} {{}}"]
    if isinstance(item, list):
        return [f"{head} []"]
    return [f"{head} {_scalar(item)}"]
