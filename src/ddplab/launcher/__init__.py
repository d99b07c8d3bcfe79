"""The launcher layer: start ranks through PyTorch's elastic launcher, watch them, end them, say what happened.

Everything that starts ranks goes through here (check, train, bench, scale, launch; monitor reads its runs):
- `agent`     the one agent entry point, `python -m ddplab.launcher.agent SPEC`: elastic_launch, called once here
- `launchplan`what the agent will start, decided from its spec alone (a pure function: no process, socket or store)
- `worker`    what a ddplab-owned rank runs (a `module:function` target); `progress.mark()` is all a target imports
- `bootstrap` what a user script's rank runs first: die with the agent, then the script itself (runpy)
- `local`     the caller's side for ddplab-owned workers: start(), PendingRun.run() -> RunResult
- `script`    the caller's side for a user's script (`ddplab launch`)
- `hang`      the one hang detector; `stacks` reads stuck ranks' Python stacks
- `outcome`   per-rank outcomes and the one root-cause rule; `logs` per-rank log files; `procs` ending processes
- `startup`   start the agent while the CLI still imports torch, restart it if the rank count was guessed wrong

This file imports nothing: a worker importing `ddplab.launcher.progress` must not pay for the caller's modules.
"""
