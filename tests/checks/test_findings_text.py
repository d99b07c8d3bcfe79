"""Nothing hidden: every warning and failure a command's --json holds is readable, with its fix, in its text output
(at 80 columns, and through a pipe: these runs capture stdout and stderr, no terminal). None of these commands
starts a process, so they run in this process (tests/inproc.py: the CLI's entry point less the interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest
from inproc import here

SCRIPTS = Path(__file__).parents[1] / "scripts"
TEXT_KEYS = ("what", "problem", "message", "cause")


def findings(obj) -> list[str]:
    """Every text in a result that tells of something wrong: a finding (a dict with a fix, not level ok): its text
    and its fix; and each string listed under notes / problems."""
    found = []
    if isinstance(obj, dict):
        if obj.get("fix") and obj.get("level", "warn") != "ok":
            found += [obj[k] for k in TEXT_KEYS if obj.get(k)] + [obj["fix"]]
        for key, value in obj.items():
            if key in ("notes", "problems") and isinstance(value, list):
                found += [v for v in value if isinstance(v, str)]
            found += findings(value)
    elif isinstance(obj, list):
        for value in obj:
            found += findings(value)
    return found


def flat(text: str) -> str:
    return " ".join(text.split())


CASES = {
    "check: a broken launcher variable (a warning)": (["check", "--stages", "preflight"], {"WORLD_SIZE": "abc"}),
    "check: two failures and a warning": (
        ["check", "--stages", "preflight"],
        {"GLOO_SOCKET_IFNAME": "eth9", "OMP_NUM_THREADS": "abc", "RANK": "0"},
    ),
    "env: a broken launcher variable": (["env"], {"WORLD_SIZE": "abc"}),
    "lint: a script with mistakes": (["lint", str(SCRIPTS / "lint_bad.py")], {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_finding_in_json_is_in_the_text(case):
    args, env = CASES[case]
    env = {**env, "COLUMNS": "80"}
    as_json = here(*args, "--json", env=env)
    expected = findings(as_json.json())
    assert expected, f"{case}: the case shows nothing wrong, so it tests nothing"
    text = here(*args, env=env)
    assert text.code == as_json.code
    shown = flat(text.out + text.err)
    missing = [f for f in expected if flat(f) not in shown]
    assert not missing, f"{case}: in --json but not in the text output: {missing}\n{text.out}"
