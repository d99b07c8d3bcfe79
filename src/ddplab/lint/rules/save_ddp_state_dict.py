"""`save-ddp-state-dict`: the DDP wrapper's `state_dict()` saved (`module.` in every key) and never loaded back into a wrapper."""

from __future__ import annotations

import ast

from ddplab.lint.checks import Checks
from ddplab.lint.rules import BUG, Rule
from ddplab.lint.scriptread import dotted, given_for


def _handed_from_another_file(readers: dict, callers, entries: list) -> None:
    """`save_model(..., model_without_ddp=model)` in the script, where save_model (another module) saves
    `model_without_ddp.state_dict()`: the wrapper's keys, reported at the script's call that hands it over."""
    for path, reader in readers.items():
        if not any(reader._saves(c) for c in reader.calls):
            continue
        for call in reader.calls:
            if not (isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict"):
                continue
            func = reader.enclosing_function(call)
            if func is None:
                continue
            sites = {s: readers[w] for w, s in callers.sites(path, func) if w != path}
            for site in reader.wrapper_sites(call, list(sites), sites):
                wrapper = dotted(given_for(site, func, dotted(call.func.value)))
                sites[site].add_wrapper_saved(site, wrapper, call, path.name)


RULE = Rule(
    id="save-ddp-state-dict",
    severity=BUG,
    what="the DDP wrapper's `state_dict()` saved (`module.` in every key) and never loaded back into a wrapper",
    why="the file does not load into the plain model: every key starts with `module.`",
    example='torch.save(model.state_dict(), "model.pt")',
    fix="save `model.module.state_dict()`",
    check=Checks.check_saving,
    in_modules=False,
    across=_handed_from_another_file,
)
