"""docs/guide.md shows only what its commands really do: rerun every block and compare exit codes."""

import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_documented_command_still_runs_as_shown():
    proc = subprocess.run([sys.executable, str(DOCS / "make_guide.py"), "--check"], capture_output=True, text=True,
                          timeout=880)
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert proc.stderr.count("] ") >= 15  # every block ran (one status line each)


def test_every_block_names_a_command_and_has_output():
    sys.path.insert(0, str(DOCS))
    import make_guide

    text = (DOCS / "guide.md").read_text()
    blocks = list(make_guide.BLOCK.finditer(text))
    assert len(blocks) >= 15
    for match in blocks:
        block = make_guide.parse(match)
        body = match.group(0).split("```console\n", 1)[1]
        assert body.startswith(f"$ {block.command}\n") and len(body.splitlines()) > 2, block.command


def test_paths_in_the_output_are_the_projects_not_this_machines(tmp_path):
    """A real command's output, as the generator writes it: no absolute path of this machine is left."""
    sys.path.insert(0, str(DOCS))
    import make_guide

    code, out = make_guide.run_block(make_guide.Block(
        'python -c "import os, sys, torch, ddplab; print(torch.__file__, ddplab.__file__, sys.executable, '
        'os.__file__, os.getcwd())"', 0, False, {}), tmp_path)
    assert code == 0, out
    torch_file, ddplab_file, python, stdlib, cwd = out.split()
    assert torch_file == "<site-packages>/torch/__init__.py"
    assert ddplab_file == "src/ddplab/__init__.py"  # the project's own files: relative to its root
    assert python.startswith("<python>/bin/python") and stdlib.startswith("<python>/lib/")
    assert cwd == "."
    assert str(DOCS.parent) not in out and sys.prefix not in out
