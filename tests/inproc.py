"""Run the real CLI entry point (ddplab.cli.main) in the test's own process, for a command that starts no process
(preflight only, env, explain, bad input): the same code as `python -m ddplab ARGS` less the interpreter, which costs
~2-3 CPU s per case (importing torch) for what is an argument check or a report. The spawn guard still fails a
fast-tier test if the command starts a process after all."""

from __future__ import annotations

import contextlib
import io
import os
import signal

from conftest import Ran


def here(*args: str, env: dict | None = None, cwd=None, stdin: str | None = None, timeout: float = 0) -> Ran:
    """`ddplab ARGS` as cli() runs it (NO_COLOR, 200 columns, ENV on top of this process's environment; a value
    None unsets the variable), its exit code, stdout and stderr; the environment, the working folder and the
    SIGTERM handler main installs are put back afterwards. `timeout` is cli()'s, unused: pytest-timeout's deadline
    is the test's."""
    import sys
    import time

    from ddplab.cli import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_term, saved_stdin = signal.getsignal(signal.SIGTERM), sys.stdin
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    try:
        for key, value in {"NO_COLOR": "1", "COLUMNS": "200", **(env or {})}.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if cwd is not None:
            os.chdir(cwd)
        if stdin is not None:
            sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))  # with .buffer, as a pipe has
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse's own errors, --help
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        signal.signal(signal.SIGTERM, saved_term)
        sys.stdin = saved_stdin
    return Ran(code, out.getvalue(), err.getvalue(), time.monotonic() - start)
