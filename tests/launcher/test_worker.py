"""A forked rank starts as a new interpreter would: the agent's signal handlers are not its own."""

from __future__ import annotations

import signal

from ddplab.launcher.worker import default_signals


def test_a_forked_rank_dies_of_the_signals_the_agent_handles():
    names = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
    before = {name: signal.getsignal(getattr(signal, name)) for name in names}
    try:
        for name in names:  # what torch's agent (SIGTERM, SIGINT, SIGHUP, SIGQUIT) and ddplab's (USR1/2) install
            signal.signal(getattr(signal, name), lambda signum, frame: None)
        default_signals()
        after = {name: signal.getsignal(getattr(signal, name)) for name in names}
    finally:
        for name, handler in before.items():
            signal.signal(getattr(signal, name), handler)
    assert after.pop("SIGINT") is signal.default_int_handler  # KeyboardInterrupt, as in any new interpreter
    assert set(after.values()) == {signal.SIG_DFL}
