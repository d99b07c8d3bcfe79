"""`ddplab explain`: what a failure log means and how to fix it. Knowledge only: no processes, no torch.

- `rules`      the rule table (invariant error texts of torch, NCCL, gloo and the OS, each with cause and fix), built
               on the message catalogue in `catalogue/` (extracted by tools/make_catalogue.py)
- `matcher`    matches a log against the rules and orders the diagnoses (root cause first); renders them
- `logread`    reads a log as it arrives: launchers' rank prefixes, log folders, huge logs streamed
- `reading`    the structured reading of a failure when no rule knows the error
- `ownreport`  ddplab's own hang reports, read back
- `exitcodes`  a process's exit code or signal in one line

The launcher uses `matcher.COMPILED` and `exitcodes` to name a run's root cause. This file imports nothing: the
launcher and the CLI import only the modules they need (the rule table costs 0.3 s).
"""
