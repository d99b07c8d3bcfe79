"""A strict walk of a JSON schema (the engines' own, vendored in schemas/): every key of the document must be one the
schema names, at every level, even where the schema itself would let unknown keys through (pydantic's models leave
objects open; a key the engine ignores is a key the user thinks does something). Returns the problems, with paths."""

from __future__ import annotations

import re

TYPES = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def problems(doc, schema: dict, root: dict | None = None, path: str = "") -> list[str]:
    root = root or schema
    if "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/$defs/"), ref
        return problems(doc, root["$defs"][ref.split("/")[-1]], root, path)
    found: list[str] = []
    for key in ("anyOf", "oneOf"):
        if key in schema:
            choices = [s for s in schema[key] if doc is None or s.get("type") != "null"]  # Optional[X]: X's problems
            options = [problems(doc, s, root, path) for s in choices]
            if len(options) == 1:
                found += options[0]
            elif all(options):
                found.append(f"{path or '/'}: matches none of {key}: " + " | ".join(o[0] for o in options))
    for sub in schema.get("allOf", []):
        found += problems(doc, sub, root, path)
    kind = schema.get("type")
    if kind:
        kinds = kind if isinstance(kind, list) else [kind]
        ok = any(
            isinstance(doc, TYPES[k]) and not (k in ("integer", "number") and isinstance(doc, bool)) for k in kinds
        )
        if not ok:
            return found + [f"{path or '/'}: {doc!r} is not {' or '.join(kinds)}"]
    if "enum" in schema and doc not in schema["enum"]:
        found.append(f"{path}: {doc!r} not in {schema['enum']}")
    if "case_insensitive_enum" in schema and str(doc).lower() not in [
        e.lower() for e in schema["case_insensitive_enum"]
    ]:
        found.append(f"{path}: {doc!r} not in {schema['case_insensitive_enum']}")
    if "const" in schema and doc != schema["const"]:
        found.append(f"{path}: {doc!r} is not {schema['const']!r}")
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in schema and doc < schema["minimum"]:
            found.append(f"{path}: {doc} < {schema['minimum']}")
        if "maximum" in schema and doc > schema["maximum"]:
            found.append(f"{path}: {doc} > {schema['maximum']}")
    if isinstance(doc, str) and "pattern" in schema and not re.search(schema["pattern"], doc):
        found.append(f"{path}: {doc!r} does not match {schema['pattern']}")
    if isinstance(doc, dict):
        props = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties")
        for key in schema.get("required", []):
            if key not in doc:
                found.append(f"{path}/{key}: required")
        for key, value in doc.items():
            where = f"{path}/{key}"
            if key in props:
                found += problems(value, props[key], root, where)
            elif any(re.search(p, key) for p in patterns):
                found += problems(value, next(s for p, s in patterns.items() if re.search(p, key)), root, where)
            elif isinstance(extra, dict) and not props:  # a map (labels, resources' limits): its values' schema
                found += problems(value, extra, root, where)
            elif props or patterns or extra is False:
                found.append(f"{where}: unknown key")
    if isinstance(doc, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(doc):
            found += problems(item, schema["items"], root, f"{path}[{i}]")
    return found
