"""bootstrap.py runs a user's script as Python itself would, and ties its life to its parent's."""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
from conftest import alive

BOOTSTRAP = Path(__file__).parent.parent.parent / "src" / "ddplab" / "launcher" / "bootstrap.py"
SHOW = textwrap.dedent("""
    import json, sys
    print(json.dumps({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "file": __file__}))
""")


def _run(*args, cwd):
    out = subprocess.run(
        [sys.executable, "-u", str(BOOTSTRAP), *args], capture_output=True, text=True, cwd=cwd, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_script_sees_what_python_script_py_would_give_it(tmp_path):
    script = tmp_path / "sub" / "show.py"
    script.parent.mkdir()
    script.write_text(SHOW)
    seen = _run(str(script), "--lr", "0.1", cwd=tmp_path)
    direct = json.loads(
        subprocess.run(
            [sys.executable, str(script), "--lr", "0.1"], capture_output=True, text=True, cwd=tmp_path, timeout=60
        ).stdout
    )
    assert seen == direct


def test_a_module_sees_what_python_m_would_give_it(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "show.py").write_text(SHOW)
    seen = _run("-m", "pkg.show", "x", cwd=tmp_path)
    assert seen["name"] == "__main__" and seen["argv"] == [str(tmp_path / "pkg" / "show.py"), "x"]
    assert seen["path0"] == str(tmp_path)


def test_a_rank_that_saved_on_the_notice_leaves_at_once_with_what_an_exit_does_for_it(tmp_path):
    """Exit 4 after ddplab.resume's save (its `saved_on_notice`, stood in for here so that no torch is imported):
    no interpreter teardown, but the script's atexit handlers run and a file it never closed is flushed (which
    Python's own teardown does not even promise: here it lost the line). Without the save, exit 4 is Python's
    own."""
    script = tmp_path / "leaving.py"
    script.write_text(
        textwrap.dedent(f"""
            import atexit, sys, types
            resume = types.ModuleType("ddplab.resume")
            resume.saved_on_notice = sys.argv[1] == "saved"
            sys.modules["ddplab.resume"] = resume
            log = open({str(tmp_path / "log.txt")!r}, "w")
            log.write("the epoch's last line")  # buffered: written only by a flush
            atexit.register(lambda: open({str(tmp_path / "atexit.txt")!r}, "w").write("ran"))
            # A finalizer of the interpreter's teardown: it runs on Python's own exit only.
            class Teardown:
                def __del__(self):
                    open({str(tmp_path / "teardown.txt")!r}, "w").write("ran")
            keep = Teardown()
            sys.exit(4)
        """)
    )
    for how, teardown in (("saved", False), ("not-saved", True)):
        for name in ("log.txt", "atexit.txt", "teardown.txt"):
            (tmp_path / name).unlink(missing_ok=True)
        ran = subprocess.run([sys.executable, "-u", str(BOOTSTRAP), str(script), how], capture_output=True, timeout=60)
        assert ran.returncode == 4, ran.stderr
        assert (tmp_path / "log.txt").read_text() == "the epoch's last line" or how == "not-saved"
        assert (tmp_path / "atexit.txt").read_text() == "ran"
        assert (tmp_path / "teardown.txt").exists() == teardown, how


def test_a_failing_script_exits_as_it_would_alone(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import sys\nraise SystemExit(7)\n")
    out = subprocess.run([sys.executable, str(BOOTSTRAP), str(script)], capture_output=True, timeout=60)
    assert out.returncode == 7
    script.write_text("raise ValueError('bad batch')\n")
    out = subprocess.run([sys.executable, str(BOOTSTRAP), str(script)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "ValueError: bad batch" in out.stderr
    # the traceback starts in the user's script: no frame of the bootstrap or runpy before it
    frames = [line for line in out.stderr.splitlines() if line.strip().startswith("File ")]
    assert frames and str(script) in frames[0] and "bootstrap" not in out.stderr and "runpy" not in out.stderr


def test_a_failing_module_traceback_starts_in_the_module(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("def step():\n    raise KeyError('labels')\n\nstep()\n")
    out = subprocess.run(
        [sys.executable, str(BOOTSTRAP), "-m", "pkg.train"], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    frames = [line for line in out.stderr.splitlines() if line.strip().startswith("File ")]
    assert out.returncode == 1 and "KeyError: 'labels'" in out.stderr
    assert "pkg/train.py" in frames[0] and len(frames) == 2 and "runpy" not in out.stderr


def test_the_rank_dies_with_its_parent_even_in_a_session_of_its_own(tmp_path, no_leftover_workers):
    """As the elastic agent starts it: a new session, so only the parent-death signal can end it."""
    script = tmp_path / "sleep.py"
    started = tmp_path / "started"  # the script runs: the bootstrap has armed the parent-death signal before it
    script.write_text(f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(600)\n")
    parent_code = (
        f"import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, {str(BOOTSTRAP)!r}, {str(script)!r}], "
        f"start_new_session=True)\nprint(p.pid, flush=True)\ntime.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 60
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists() and alive([child])
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 5
        while alive([child]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive([child])
    finally:
        parent.kill()
        if child is not None and alive([child]):
            psutil.Process(child).kill()
