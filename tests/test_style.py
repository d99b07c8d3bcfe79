"""The tree is ruff-clean (lint and format, configured in pyproject.toml): no commit rewraps lines by hand again."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_is_clean(args):
    ran = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]


def test_every_file_at_the_root_is_one_the_readme_explains():
    """A stray file (a coverage database, a wheel, a shell redirect's output) taken in by a broad `git add` stays
    out: the root holds the project's own files and those the README names."""
    ran = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if ran.returncode != 0:
        pytest.skip(f"not a git checkout: {ran.stderr.strip()[:200]}")
    at_root = [path for path in ran.stdout.splitlines() if "/" not in path]
    readme = (ROOT / "README.md").read_text()
    stray = [
        path for path in at_root if path not in {"README.md", "pyproject.toml", ".gitignore"} and path not in readme
    ]
    assert not stray, f"files at the root that the README does not explain: {stray}"
