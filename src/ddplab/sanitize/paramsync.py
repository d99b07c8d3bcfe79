"""Check `params-diverge`: after an optimizer step the ranks hold different parameters - the gradients were not
averaged, so each rank trains its own model and the job is N separate trainings.

DDP keeps the replicas bitwise identical: every rank gets the same averaged gradient (the all-reduce leaves the same
bits everywhere) and applies the same update. Rank side: after optimizer steps 1, 2, 8, 32... and the window's last
(digested()), a digest of each parameter the counted optimizer steps, over every one of its values (a sample of them
would miss a divergence confined to a few: an embedding's rows that only one rank's batches touched): two reductions per
tensor, the sum of its bit patterns as integers (exact, any order, wraps at 64 bits: one changed value changes it) and
the sum of its values in float64 (what a finding shows); all of them cross to the CPU in one copy. And what explains a
difference: whether a DistributedDataParallel holds the parameter, how many forwards since the last step went through
the wrapper and how many reached the wrapped module around it (ddp.module(x); where, the first time),
whether no_sync() was in effect at the step, and where optimizer.step() was called. The forward hooks that count
are global module hooks (none on the user's modules: a module's hooks travel with it into copy.deepcopy and
torch.save), on only for the steps digested (before steps 1, 2, 8, 32... and N): while one is on, every module leaves
PyTorch's fast call path, a cost on every forward. Nothing is sent between ranks (a collective of ddplab's among the
script's could change what the script does: a rank at another step would pair it with one of the script's); the
reader compares the ranks' digests after the run.

Parameters sharded on purpose are not compared: FSDP (its flat parameters, or an FSDP module built: its __init__ is
watched as DDP's is), DTensor parameters, ZeroRedundancyOptimizer (each rank steps its own shard).
"""

from __future__ import annotations

import functools
import gc
import sys
import weakref

from ddplab import afterimport
from ddplab.sanitize import Finding, ranks_text, rankside, short
from ddplab.sanitize.userframe import call_through, is_user

ID = "params-diverge"
# a parameter's bits read as integers of its element's size (complex ones as their real pairs)
BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}
SHARDING = [  # (module, class, what it means here): parameters or their updates split across the ranks
    (
        "torch.distributed.fsdp.fully_sharded_data_parallel",
        "FullyShardedDataParallel",
        "FSDP: each rank holds its own shard of the parameters",
    ),
    (
        "torch.distributed.optim.zero_redundancy_optimizer",
        "ZeroRedundancyOptimizer",
        "ZeroRedundancyOptimizer: each rank steps its own shard of the parameters",
    ),
]


def digested(steps: int) -> set[int]:
    """The steps whose parameters are digested: 1, 2, then every fourfold (8, 32, 128...) below the window's last, and
    the last. A divergence that starts late (an LR scheduler stepped on rank 0 only, whose rate first differs at
    step 8) is seen at the next of these, and a run that ends before the window's last step (48 steps under a window
    of 50) is still compared after its start; a handful of digests, none of them at every step."""
    at, step = {1, 2}, 8
    while step < steps:
        at.add(step)
        step *= 4
    return {s for s in at if s <= steps} | {steps}


class Observer(rankside.Observer):
    ID = ID

    def __init__(self, window):
        super().__init__(window)
        self.on = True
        self.at = digested(window.steps)
        # the DDP wrappers built, each as it was built: (a weak reference to it, the ids of the parameters its module
        # held, of those its reducer averages (the ones that required a gradient then, less those it was told to
        # ignore), of those it ignores); a list (a WeakSet's iteration cost 10 us at a digest, its guard's)
        self.ddps: list[tuple[weakref.ref, set[int], set[int], set[int]]] = []
        self.synced: bool | None = None  # the last forward through a wrapper since the step: outside no_sync()
        self.counting = True  # the forward hooks are on: the next step is one of self.at
        # the forward hooks' handles (_enter's, _leave's): registered once, then taken out of torch's global hooks and
        # put back into them by their handle's key (a new handle for each of the window's counted steps cost 20 us)
        self.handles: list = []
        self.hooked = False  # they are in torch's global hooks now
        self.placed: list[tuple] = []
        self.roles: dict[int, tuple[weakref.ref, bool]] = {}  # id(module) -> (the module, it is a DDP wrapper)
        self.undo: list = []
        # where weights were loaded into a watched model (a wrapper or the module it wraps), after its DDP() start-up
        # broadcast: a load on some ranks only is what makes the ranks' weights differ before a step
        self.loads: list[str | None] = []
        self.depth = 0  # inside a DDP forward
        self.calls = {"ddp": 0, "direct": 0}
        self.direct_where: str | None = None
        self.checks: list[dict] = []
        self.sharded: str | None = None
        self.names: tuple[dict[int, str], set[int]] | None = None  # found once: the search may walk the heap
        self.names_of: list[int] = []  # the ids of the parameters they were found for, in the optimizer's order

    def attach(self, torch) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.torch = torch
        init = DistributedDataParallel.__init__
        obs = self

        @functools.wraps(init)
        def __init__(ddp, *args, **kwargs):
            call_through(init, ddp, *args, **kwargs)
            if obs.on:
                obs.guarded(obs.built, ddp)

        DistributedDataParallel.__init__ = __init__
        load = torch.nn.Module.load_state_dict

        @functools.wraps(load)
        def load_state_dict(module, *args, **kwargs):
            if obs.on and obs.ddps:
                obs.guarded(obs._loaded, module)
            return load(module, *args, **kwargs)

        torch.nn.Module.load_state_dict = load_state_dict
        self.undo = [(DistributedDataParallel, "__init__", init), (torch.nn.Module, "load_state_dict", load)]
        # Sharded training, known when it is built (not tested at every step: a call a step costs microseconds)
        for module, name, why in SHARDING:
            afterimport.when_imported(
                module, functools.partial(self._watch_sharding, name, why), f"sanitizer's {name} watch"
            )

    def _watch_sharding(self, name: str, why: str, module) -> None:
        if not self.on:
            return
        kind = getattr(module, name)
        init = kind.__init__
        obs = self

        @functools.wraps(init)
        def __init__(built, *args, **kwargs):
            call_through(init, built, *args, **kwargs)
            obs.sharded = why

        kind.__init__ = __init__
        self.undo.append((kind, "__init__", init))

    def built(self, ddp) -> None:
        ref = weakref.ref(ddp)
        ignored = getattr(ddp, "parameters_to_ignore", None) or set()
        named = list(ddp.module.named_parameters())
        averaged = {id(p) for n, p in named if p.requires_grad and n not in ignored}
        averaged |= {id(p) for p in getattr(ddp, "_delay_all_reduce_params", ())}  # all-reduced apart, but averaged
        self.ddps.append((ref, {id(p) for _, p in named}, averaged, {id(p) for n, p in named if n in ignored}))
        self.roles[id(ddp)] = (ref, True)
        self.roles[id(ddp.module)] = (weakref.ref(ddp.module), False)
        if self.counting and not self.hooked:
            self._hook()

    def _hook(self) -> None:
        # Global module hooks, not hooks on the user's modules: a module's own hooks travel with it, and
        # copy.deepcopy(model) (an EMA, AveragedModel) or torch.save(model) would then try to copy this observer.
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self.hooked = True
        if self.handles:  # registered before: put back by their keys, at the end of torch's hooks as registering does
            for hooks, key, hook in self.placed:
                hooks[key] = hook
            return
        self.handles = [register_module_forward_pre_hook(self._enter), register_module_forward_hook(self._leave)]
        # (torch's dict of global hooks, the key, the hook): torch's module-level dicts, there for good
        self.placed = [(h.hooks_dict_ref(), h.id, f) for h, f in zip(self.handles, (self._enter, self._leave))]

    def _count(self, on: bool) -> None:
        """The forward hooks on (for a step that will be digested) or off (a hook costs every forward)."""
        if on == self.counting:
            return
        self.counting = on
        if on:
            if self._wrappers():
                self._hook()
        elif self.hooked:
            self.hooked = False
            for hooks, key, _ in self.placed:
                hooks.pop(key, None)

    def _role(self, module) -> bool | None:
        """True for a watched DDP wrapper, False for the module one wraps, None for any other module."""
        known = self.roles.get(id(module))
        return known[1] if known is not None and known[0]() is module else None

    def _enter(self, module, args) -> None:
        role = self._role(module)
        if role:
            self.depth += 1
            self.calls["ddp"] += 1
            if self.torch.is_grad_enabled():  # the forward whose backward DDP averages, unless in no_sync()
                self.synced = module.__dict__.get("require_backward_grad_sync", True)
        elif role is False and self.depth == 0:
            self.calls["direct"] += 1
            if self.direct_where is None:
                self.guarded(self._where_direct)

    def _leave(self, module, args, output) -> None:
        if self._role(module):
            self.depth = max(0, self.depth - 1)

    def _loaded(self, module) -> None:
        """A load into a DDP wrapper, its module, or a module inside it (`ddp.module.encoder`: a pretrained part)."""
        if self._role(module) is None:
            held = self._in_wrappers()
            if not any(id(p) in held for p in module.parameters()):
                return
        self.loads.append(self.window.where())

    def _where_direct(self) -> None:
        self.direct_where = self.window.where()

    def steps(self) -> set[int]:
        """The steps digested, and each one's step before: the forward hooks go on there, to count its forwards."""
        return self.at | {step - 1 for step in self.at if step > 1}

    def on_step(self, step: int, optimizer) -> None:
        calls, self.calls, self.depth = self.calls, {"ddp": 0, "direct": 0}, 0
        synced, self.synced = self.synced, None
        self._count(step + 1 in self.at and not self.sharded)
        if step not in self.at or self.sharded:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self.sharded = _sharded(params)
        if self.sharded:
            self._count(False)
            return
        key = [id(p) for p in params]
        if self.names is None or self.names_of != key:  # found again when the optimizer's list changed (a group added)
            self.names, self.names_of = self._names(params), key
        names, in_ddp = self.names
        # the gradients the step applied (their bit sums): DDP's all-reduce leaves them the same on every rank, so
        # they tell an update changed on some ranks (clipping under `if rank == 0:`) from weights that differed before
        strided = self.torch.strided
        applied = [g if (g := p.grad) is not None and g.layout == strided else None for p in params]
        grads = [g for g in applied if g is not None]
        # one call for both (a call's own work costs as much as a small tensor's); the gradients' bit sums only: a
        # finding shows the parameters' sums, never the gradients'
        digests = _digests(self.torch, params + grads, len(params))
        grad_bits = iter(bits for _, bits, _ in digests[len(params) :])
        ddps = self._wrappers()
        self.checks.append(
            {
                "step": step,
                "where": self.window.where(),
                "params": [
                    [names.get(i, f"parameter #{i}"), n, bits, total, i in in_ddp]
                    for i, (n, bits, total) in enumerate(digests[: len(params)])
                ],
                "grads": [None if g is None else next(grad_bits) for g in applied],
                "ddps": len(ddps),
                "ddp_forwards": calls["ddp"],
                "direct_forwards": calls["direct"],
                "direct_where": self.direct_where,
                "no_sync": any(not ddp.__dict__.get("require_backward_grad_sync", True) for ddp in ddps),
                # no_sync() left before the step, after the backward it covered: the gradients applied were not
                # averaged either (accumulation off by one: the last micro-batch's backward inside no_sync())
                "no_sync_backward": synced is False,
                "unaveraged": self._unaveraged(params, in_ddp),
                "optimizer": _settings(optimizer),
                "loads": len(self.loads),
                "load_where": self.loads[0] if self.loads else None,
            }
        )

    def held(self, optimizer) -> bool:
        """The optimizer steps a parameter that a live DDP wrapper holds."""
        held = self._in_wrappers()
        return any(id(p) in held for group in optimizer.param_groups for p in group["params"])

    def _in_wrappers(self) -> set[int]:
        """The ids of the parameters the live DDP wrappers hold."""
        return set().union(*(h for ref, h, _, _ in self.ddps if ref() is not None))

    def restart(self) -> None:
        self.checks, self.calls, self.depth, self.direct_where = [], {"ddp": 0, "direct": 0}, 0, None
        self.synced, self.sharded, self.names = None, None, None
        self._count(1 in self.at)  # the forwards before the new step 1 are counted

    def _wrappers(self) -> list:
        """The DDP wrappers built so far and still alive."""
        return [ddp for ref, *_ in self.ddps if (ddp := ref()) is not None]

    def _unaveraged(self, params, in_ddp: set[int]) -> dict[str, str]:
        """The parameters a wrapper's module holds that no wrapper's reducer averages, each with why: "added" to the
        module after DDP() was built, "frozen" (it did not require a gradient when DDP() was built, and was unfrozen
        since: the reducer knows only the parameters that did), "ignored" (DDP was told to); by index."""
        built = [entry[1:] for entry in self.ddps if entry[0]() is not None]
        if not in_ddp or not built:
            return {}
        averaged = set().union(*(a for _, a, _ in built))
        out = {}
        for i in in_ddp:
            key = id(params[i])
            if key in averaged:
                continue
            if any(key in ignored for _, _, ignored in built):
                out[str(i)] = "ignored"
            elif any(key in held for held, _, _ in built):
                out[str(i)] = "frozen"
            else:
                out[str(i)] = "added"
        return out

    def forked(self) -> None:
        self.checks, self.calls, self.depth, self.direct_where = [], {"ddp": 0, "direct": 0}, 0, None
        self.synced = None

    def _names(self, params) -> tuple[dict[int, str], set[int]]:
        """Parameter names from the DDP wrappers first, else from the live modules that no other module holds."""
        index = {id(p): i for i, p in enumerate(params)}
        names: dict[int, str] = {}
        for ddp in self._wrappers():
            for name, p in ddp.module.named_parameters():
                if id(p) in index:
                    names.setdefault(index[id(p)], name)
        in_ddp = set(names)
        if len(names) < len(params):
            Module = self.torch.nn.Module
            modules = [o for o in gc.get_objects() if issubclass(type(o), Module)]  # not isinstance: lazy proxies
            held = {id(c) for m in modules for c in m._modules.values() if c is not None}
            roots = [m for m in modules if id(m) not in held]
            for root in sorted(roots, key=lambda m: -sum(1 for _ in m.parameters())):
                own = [(name, p) for name, p in root.named_parameters() if id(p) in index and index[id(p)] not in names]
                if own:  # a module beside the wrapper: its parameters by the name the user's code gave it
                    holder = _holder_name(root) or type(root).__name__
                    for name, p in own:
                        names.setdefault(index[id(p)], f"{holder}.{name}")
        if len(names) < len(params):
            _variable_names(index, names)
        return names, in_ddp

    def stop(self) -> None:
        self.on = False
        self._count(False)
        self.handles, self.placed = [], []
        for owner, name, original in self.undo:
            setattr(owner, name, original)
        self.undo = []

    def data(self) -> dict:
        return {"checks": self.checks, "sharded": self.sharded}


def _held_by_user(frame):
    """(name, value) of what the user's code holds, in each user frame from `frame` outwards (the innermost first):
    its local variables, then its module's globals, then the attributes of its locals (`self.proj`)."""
    while frame is not None:
        if is_user(frame.f_code.co_filename):
            yield from list(frame.f_locals.items())
            yield from list(frame.f_globals.items())
            for name, value in list(frame.f_locals.items()):
                attrs = getattr(value, "__dict__", None)
                if isinstance(attrs, dict):
                    yield from ((f"{name}.{attr}", held) for attr, held in list(attrs.items()))
        frame = frame.f_back


def _holder_name(obj) -> str | None:
    """The name the user's code holds `obj` by, in a user frame on the stack of optimizer.step(): a local or global
    variable (`proj`), else an attribute of one (`self.proj`)."""
    return next((name for name, value in _held_by_user(sys._getframe(1)) if value is obj), None)


def _variable_names(index: dict[int, int], names: dict[int, str]) -> None:
    """A parameter no module holds (a learnable temperature beside the model: `logit_scale = nn.Parameter(...)`) by
    the name the user's code gave it (_held_by_user: a local variable, a global, an attribute of a local such as a
    trainer's `self.temp`), not a private one. At the first digested step, and again when the optimizer's list of
    parameters changed."""
    for name, value in _held_by_user(sys._getframe(1)):
        i = index.get(id(value))
        if i is not None and i not in names and not name.rpartition(".")[2].startswith("_"):
            names[i] = name


def _settings(optimizer) -> dict:
    """The optimizer's class and each param group's numbers (lr, momentum, betas, weight_decay...): tensors left out
    (reading a GPU's would wait for it)."""
    groups = []
    for group in optimizer.param_groups:
        kept = {}
        for key, value in group.items():
            if isinstance(value, (bool, int, float)):
                kept[key] = value
            elif isinstance(value, (tuple, list)) and value and all(isinstance(v, (int, float)) for v in value):
                kept[key] = list(value)
        groups.append(kept)
    return {"class": type(optimizer).__name__, "groups": groups}


def _sharded(params) -> str | None:
    for p in params:
        kind = _KINDS.get(type(p), False)
        if kind is False:  # a class's answer found once: its __mro__'s names took a microsecond per parameter
            names = {c.__name__ for c in type(p).__mro__}
            kind = _KINDS[type(p)] = (
                "DTensor parameters (FSDP2 or tensor parallel): each rank holds its own shard"
                if "DTensor" in names
                else (_FLAT if "FlatParameter" in names else None)
            )
        if kind is not None:
            return kind
        if getattr(p, "_is_flat_param", False):
            return _FLAT
    return None


_FLAT = "FSDP's flat parameters: each rank holds its own shard"
_KINDS: dict[type, str | None] = {}  # a parameter's class -> what _sharded says of it


def _digests(torch, params, sums: int | None = None) -> list[tuple[int, int, float | None]]:
    """(numel, the sum of its bit patterns as int64, the sum of its values in float64) per parameter, over all of its
    values: two reductions a tensor on its own device, then one copy of the 2 x len(params) numbers to the CPU.
    The values' sums of the first `sums` tensors only (all by default), None for the others': their bit sums are
    what is compared, the values' sum what is shown."""
    if not params:
        return []
    sums = len(params) if sums is None else sums
    on_cpu = _cpu_digests(torch, params, sums)
    if on_cpu is not None:
        return on_cpu
    with torch.no_grad():
        bits, totals = [], []
        for i, p in enumerate(params):
            x = p.detach()
            if x.is_complex():
                x = torch.view_as_real(x)
            kind = BITS.get(x.element_size())
            # .view(dtype) of the same size reinterprets the bits in place, whatever the strides
            bits.append(
                x.view(getattr(torch, kind)).sum(dtype=torch.int64) if kind else x.new_zeros((), dtype=torch.int64)
            )
            if i < sums:  # float64's bits as int64: one tensor of both, one copy to the CPU
                total = x.sum(dtype=torch.float64) if x.is_floating_point() else x.double().sum()
                totals.append(total.view(torch.int64))
        both = bits + totals
        if len({x.device for x in both}) > 1:
            both = [x.cpu() for x in both]
        both = torch.stack(both).cpu()
        n = len(params)
        b, t = both[:n].tolist(), both[n:].view(torch.float64).tolist() + [None] * (n - sums)
    return [(p.numel(), b[i], t[i]) for i, p in enumerate(params)]


# ------------------------------------------------------------------------------------------------------ reader side
def judge(ranks: dict[int, dict], world: int) -> list[Finding]:
    if len(ranks) < 2 or any(d.get("sharded") for d in ranks.values()):
        return []
    by_step: dict[int, dict[int, dict]] = {}
    for rank, data in ranks.items():
        for check in data.get("checks", []):
            by_step.setdefault(check["step"], {})[rank] = check
    for step in sorted(by_step):
        checks = by_step[step]
        # Ranks whose optimizers step parameters of other sizes hold different models on purpose (the stages of a
        # pipeline, one model per rank): there is nothing to compare.
        sizes = {tuple(p[1] for p in c["params"]) for c in checks.values()}
        if len(checks) < 2:
            continue
        if len(sizes) != 1:
            if (uneven := _uneven(step, checks)) is not None:
                return [uneven]
            continue
        if len({tuple(p[4] for p in c["params"]) for c in checks.values()}) > 1:
            continue  # the ranks digested different optimizers (one of a model no DDP wrapper holds): not comparable
        # the bit sums alone: exact whatever the order of the additions (a float sum may depend on threads)
        differ = [i for i in range(len(sizes.pop())) if len({c["params"][i][2] for c in checks.values()}) > 1]
        if differ:
            # the optimizers' settings agreed at an earlier digested step: they changed on some ranks during the run
            agreed = next(
                (s for s in sorted(by_step) if s < step and len(by_step[s]) > 1 and not _settings_differ(by_step[s])),
                None,
            )
            return [_finding(step, checks, differ, agreed)]
    return []


def _uneven(step: int, checks: dict[int, dict]) -> Finding | None:
    """Ranks whose optimizers step different parameters of one DDP-wrapped model: one rank steps every parameter
    (by its name in the wrapped module and its size) another rank steps, and more, each of those more held by a DDP
    wrapper (which checked at its start that every rank wraps the same model). A parameter the other rank never steps
    drifts apart from the first one's. The optimizer was built another way on some ranks (a param group added with
    add_param_group under `if rank == 0:`). The stages of a pipeline step models of their own: neither holds all of
    the other's parameters, and they stay unsaid."""
    keys = {r: {(p[0], p[1]): p for p in c["params"]} for r, c in checks.items()}
    for big, small in ((a, b) for a in sorted(keys) for b in sorted(keys) if a != b):
        extra = [keys[big][k] for k in keys[big] if k not in keys[small]]
        if not keys[small] or not extra or not set(keys[small]) <= set(keys[big]):
            continue
        if not checks[big]["ddps"] or not all(p[4] for p in extra):
            continue
        names = [p[0] for p in extra]
        groups = {r: len(c.get("optimizer", {}).get("groups", [])) for r, c in checks.items()}
        said_groups = (
            f" in {groups[big]} param group{'s' if groups[big] != 1 else ''} on rank {big}, {groups[small]} on rank "
            f"{small}"
            if groups[big] != groups[small]
            else ""
        )
        observed = (
            f"after optimizer step {step}, the optimizers step different parameters of the same DDP-wrapped model: "
            f"{len(keys[big])} on rank {big}, {len(keys[small])} on rank {small}{said_groups}; "
            f"{len(extra)} stepped on rank {big} only (first `{names[0]}`, {extra[0][1]} values): the optimizer was "
            f"built another way on some ranks (a param group added on one rank only, add_param_group under "
            f"`if rank == 0:`), so rank {small} never updates them and the ranks' models drift apart"
        )
        fix = (
            "build the optimizer with the same parameters and param groups on every rank: call add_param_group on "
            "every rank, outside any `if rank == 0:`"
        )
        evidence = {
            "step": step,
            "ranks": sorted(checks),
            "stepped": {r: len(k) for r, k in keys.items()},
            "groups": groups,
            "only_on": {"rank": big, "names": names[:10]},
        }
        return Finding(ID, observed, fix, where=checks[big]["where"], evidence=evidence)
    return None


def _sums(values: list[tuple[int, float]]) -> str:
    """Each rank's sum of the parameter, with as many digits as it takes to show the ranks' sums apart (a step of
    1e-6 on one rank's weights differs in the 7th digit: 6 showed the same number twice); sums equal to the last
    digit say so (their bit sums, the comparison itself, differ)."""
    distinct = len({v for _, v in values})
    for digits in (6, 9, 12, 17):
        texts = [f"{v:.{digits}g}" for _, v in values]
        if len(set(texts)) == distinct:
            break
    said = ", ".join(f"{t} on rank {r}" for t, (r, _) in zip(texts, values))
    return said + (" (equal as float sums: the values themselves differ)" if distinct == 1 and len(values) > 1 else "")


def _finding(step: int, checks: dict[int, dict], differ: list[int], agreed: int | None = None) -> Finding:
    ranks = sorted(checks)
    first = checks[ranks[0]]
    name, numel = first["params"][differ[0]][0], first["params"][differ[0]][1]
    sums = _sums([(r, c["params"][differ[0]][3]) for r, c in sorted(checks.items())[:4]])
    total = len(first["params"])
    observed = (
        f"after optimizer step {step}, ranks {ranks_text(ranks)} hold different parameters: {len(differ)} "
        f"of {total} differ (first `{name}`, {numel} values: sum {sums})"
    )
    # What explains it, from what the ranks saw (the first rank that saw each, so that one odd rank counts).
    no_sync = [r for r, c in checks.items() if c["no_sync"]]
    no_sync_backward = sorted(r for r, c in checks.items() if c.get("no_sync_backward"))
    # why no wrapper averages a differing parameter (added after DDP(), frozen when it was built...), as the first
    # rank that says so
    whys = {
        i: why
        for i in differ
        if (why := next((c["unaveraged"][str(i)] for c in checks.values() if str(i) in c.get("unaveraged", {})), None))
    }
    unaveraged = next(iter(whys.items()), None)
    direct = [r for r, c in checks.items() if c["direct_forwards"]]
    where = first["where"]
    differing = _settings_differ(checks)
    averaged = differing is None and _grads_agree(checks, differ)
    if (not any(c["ddps"] for c in checks.values()) or not any(p[4] for p in first["params"])) and averaged:
        # no DDP, yet the gradients the step applied were the same on every rank: the script averaged them itself
        # (an all_reduce of each gradient), and the weights it applied them to already differed
        cause = (
            "no DistributedDataParallel holds them, but the gradients the step applied were the same on every rank "
            "(averaged by the script itself: an all_reduce of each gradient), and so were the optimizer's settings: "
            "the weights already differed before the step: they were initialized on each rank its own way and not "
            f"all copied from one rank (`{name}` was not broadcast)"
        )
        fix = (
            "broadcast every parameter (and buffer) from rank 0 before training: for p in model.state_dict()"
            ".values(): dist.broadcast(p, src=0); or seed every rank alike before building the model; or wrap it "
            "in DDP, whose start-up does both"
        )
    elif (not any(c["ddps"] for c in checks.values()) or not any(p[4] for p in first["params"])) and (
        hand := _averaged_by_hand(checks, differ)
    ):
        # no DDP; the gradients of the parameters that stayed equal were the same on every rank (each rank read
        # its own data: only an all_reduce makes them equal), those of the differing ones were not
        others = f" and {len(hand) - 1} other{'s' if len(hand) > 2 else ''}" if len(hand) > 1 else ""
        cause = (
            "no DistributedDataParallel holds them; the script averages gradients itself (the gradients of "
            f"`{first['params'][hand[0]][0]}`{others} were the same on every rank), but not those of `{name}`"
            f"{' and the other differing ones' if len(differ) > 1 else ''}: its own all_reduce skips them"
        )
        fix = (
            "all_reduce the gradient of every parameter the optimizer steps (for group in optimizer.param_groups: "
            "for p in group['params']: ...), not those of one part of the model; or wrap the model in DDP"
        )
    elif not any(c["ddps"] for c in checks.values()) or not any(p[4] for p in first["params"]):
        cause = "no DistributedDataParallel holds the parameters the optimizer steps: nothing averaged the gradients"
        fix = (
            "wrap the model: ddp_model = DDP(model, device_ids=[local_rank]) on GPUs (device_ids=None on CPU), "
            "and call ddp_model(x) in the loop"
        )
    elif no_sync:
        cause = (
            f"the step ran with DDP's gradient sync off, inside ddp.no_sync() or with require_backward_grad_sync "
            f"set False (on rank{'s' if len(no_sync) > 1 else ''} {ranks_text(no_sync)}): DDP did not average this "
            "step's gradients"
        )
        fix = (
            "use no_sync() only around the accumulation micro-steps; run the backward of the micro-step before "
            "optimizer.step() outside it"
        )
    elif direct:
        c = checks[direct[0]]
        how = "none" if not c["ddp_forwards"] else f"only {c['ddp_forwards']}"
        cause = (
            f"of the forwards before this step on rank {direct[0]}, {c['direct_forwards']} reached the wrapped "
            f"module without the DDP wrapper ({how} through it), e.g. ddp_model.module(x) at "
            f"{short(c['direct_where'])}: DDP averages the gradients of the forwards it runs"
        )
        fix = "call ddp_model(x), not ddp_model.module(x) or the model it wraps"
        where = c["direct_where"] or where
    elif no_sync_backward:
        cause = (
            "the last forward before the step ran with DDP's gradient sync off, inside ddp.no_sync() or with "
            f"require_backward_grad_sync set False (on rank{'s' if len(no_sync_backward) > 1 else ''} "
            f"{ranks_text(no_sync_backward)}), turned on again before optimizer.step(): DDP did not average the gradients of "
            "the backward that preceded the step, so each rank applied gradients of its own (gradient accumulation "
            "off by one: no_sync() on the micro-batch the step follows, not on the ones before it)"
        )
        fix = (
            "run the forward and backward of the micro-batch that precedes optimizer.step() outside no_sync(), and "
            "only the others inside it: with model.no_sync() if (i + 1) % accum != 0 else nullcontext(), stepping "
            "when (i + 1) % accum == 0"
        )
    elif unaveraged is not None:
        i, why = unaveraged
        name = first["params"][i][0]
        if why == "frozen":
            cause = (
                f"`{name}` did not require a gradient when DDP() was built and was unfrozen since: DDP averages only "
                "the parameters that required one when it was built, so each rank steps its own"
            )
            fix = (
                "set requires_grad before wrapping the model in DDP; to unfreeze later, wrap the model in DDP again "
                "after changing requires_grad (a new wrapper averages the parameters that require a gradient then)"
            )
        elif why == "ignored":
            cause = f"DDP was told to ignore `{name}` (_ddp_params_and_buffers_to_ignore): nothing averages it"
            fix = "average the gradients of the parameters DDP ignores yourself (dist.all_reduce), or let DDP have them"
        else:
            cause = (
                f"`{name}` was added to the wrapped module after DDP() was built: DDP averages only the parameters "
                "the module held when it was wrapped, so each rank steps its own"
            )
            fix = (
                "create every parameter before wrapping the model in DDP (call the method that adds it first), or "
                "wrap the model again after adding it"
            )
    elif not first["params"][differ[0]][4]:
        cause = f"`{name}` is stepped by the optimizer but is not inside the DDP-wrapped module: DDP never sees it"
        fix = "put every trained parameter inside the module DDP wraps, and build the optimizer from it"
    elif differing and agreed is not None:
        cause = (
            f"DDP averaged the gradients, but the optimizers differ: {differing}, so each rank applied them its own "
            f"way; they agreed after step {agreed}: the setting changed on some ranks only during the run (an LR "
            "scheduler stepped, or param_groups edited, under `if rank == 0:` or on a rank's own loss)"
        )
        fix = (
            "step the LR scheduler (and change any param group setting) on every rank, outside any `if rank == 0:`; "
            "a scheduler that reads a metric (ReduceLROnPlateau) is given a value every rank shares"
        )
    elif differing:
        cause = (
            f"DDP averaged the gradients, but the optimizers differ: {differing}, so each rank applied them its own way"
        )
        fix = (
            "build the optimizer the same way on every rank (a learning rate scaled by the world size, never by "
            "the rank)"
        )
    elif (
        (grad := _grads_differ(checks, differ)) is not None
        and len(forwards := {r: c["ddp_forwards"] for r, c in sorted(checks.items())}) > 1
        and len(set(forwards.values())) > 1
    ):
        # the forwards through the wrapper since the last step differ: a rank skipped optimizer.step() after a
        # forward and backward, and now steps with another batch's gradients than the others
        each = ", ".join(f"{n} on rank {r}" for r, n in list(forwards.items())[:4])
        cause = (
            f"DDP averaged the gradients, yet the ones the step applied differ between the ranks (first `{grad}`), "
            f"and the ranks ran different numbers of forwards through the wrapper before this step ({each}): some "
            "ranks skipped optimizer.step() after a backward (a condition on the rank's own loss or batch: "
            "`if loss > limit: continue`), so the ranks step in turn with other batches' gradients"
        )
        fix = (
            "decide to skip a step the same way on every rank: on a value all ranks share (the loss all_reduced "
            "first), or skip nothing and clip the gradients on every rank"
        )
    elif grad is not None:
        cause = (
            f"DDP averaged the gradients, yet the ones the step applied differ between the ranks (first `{grad}`): "
            "something changed them after the backward on some ranks only (clipping, scaling or zeroing under "
            "`if rank == 0:`, a gradient hook on one rank), or some ranks skipped an optimizer.step() (a condition "
            "on the rank's own loss), and step with other batches' gradients since"
        )
        fix = (
            "change the gradients the same way on every rank: clip_grad_norm_ (and any scaling) on every rank, "
            "between loss.backward() and optimizer.step(); decide to skip a step on a value every rank shares"
        )
    elif len(loads := {r: c.get("loads", 0) for r, c in sorted(checks.items())}) > 1 and len(set(loads.values())) > 1:
        # some ranks loaded weights into the wrapped model after its start-up broadcast, the others did not
        loaded = [r for r, n in loads.items() if n]
        at = next((c["load_where"] for c in checks.values() if c.get("load_where")), None)
        where = at or where  # the load is where the fix goes
        cause = (
            f"the ranks' weights differed before the step: rank {ranks_text(loaded)} loaded weights into the wrapped "
            f"model after DDP's start-up broadcast{f' ({short(at)})' if at else ''}, the other ranks did not"
        )
        fix = (
            "load the weights (and the optimizer's state) on every rank, or on rank 0 before wrapping the model in "
            "DDP: its start-up broadcast copies rank 0's weights to every rank, a load after it does not"
        )
    else:
        grads_same = all(c.get("grads") for c in checks.values())
        cause = (
            (
                "the gradients the step applied were the same on every rank (DDP averaged them) and so were the "
                "optimizer's settings, yet the weights after it differ: they differed before the step. "
            )
            if grads_same
            else "DDP ran every forward, yet the parameters differ. "
        ) + (
            "Something changed the weights outside optimizer.step() on each rank its own way, after DDP's start-up "
            "broadcast: re-initialized in place with a seed of the rank's own, restored by arithmetic from a "
            "perturbation of the rank's own (`p.sub_(e)` does not undo `p.add_(e)` to the last bit), updated by "
            "hand under a rank test"
            + (", or loaded from another file on each rank" if any(c.get("loads") for c in checks.values()) else "")
        )
        fix = (
            "make every change to the weights outside the optimizer the same on every rank (one seed, an exact copy "
            "put back with p.copy_(saved), the same file loaded), or make it before wrapping the model in DDP: its "
            "start-up broadcast copies rank 0's weights to every rank"
        )
    evidence = {
        "step": step,
        "ranks": ranks,
        "differ": len(differ),
        "of": total,
        "first": {
            "name": name,
            "numel": numel,
            "sums": {r: c["params"][differ[0]][3] for r, c in checks.items()},
        },
        "differing": [first["params"][i][0] for i in differ[:10]],
        "ddp_forwards": {r: c["ddp_forwards"] for r, c in checks.items()},
        "direct_forwards": {r: c["direct_forwards"] for r, c in checks.items()},
        "no_sync": no_sync,
        "no_sync_backward": no_sync_backward,
        # every differing parameter no wrapper averages, with why (added after DDP(), frozen when it was built...)
        "unaveraged": {first["params"][i][0]: why for i, why in whys.items() if i in differ[:10]},
    }
    return Finding(ID, f"{observed}: {cause}", fix, where=where, evidence=evidence)


def _grads_agree(checks: dict[int, dict], differ: list[int]) -> bool:
    """Every rank recorded the gradients the step applied, and those of the differing parameters are the same."""
    if not all(c.get("grads") for c in checks.values()):
        return False
    for i in differ:
        seen = {c["grads"][i] for c in checks.values()}
        if None in seen or len(seen) > 1:
            return False
    return True


def _averaged_by_hand(checks: dict[int, dict], differ: list[int]) -> list[int]:
    """The parameters that stayed equal whose applied gradients were the same, and not zero, on every rank, when
    those of the differing parameters were not: a script that all_reduces some gradients and skips others."""
    if not all(c.get("grads") for c in checks.values()) or _grads_differ(checks, differ) is None:
        return []
    agree = []
    for i in range(len(next(iter(checks.values()))["grads"])):
        seen = {c["grads"][i] for c in checks.values()}
        if i not in differ and len(seen) == 1 and None not in seen and 0 not in seen:
            agree.append(i)
    return agree


def _grads_differ(checks: dict[int, dict], differ: list[int]) -> str | None:
    """The name of the first differing parameter whose gradient at the step was not the same on every rank."""
    for i in differ:
        seen = {c["grads"][i] for c in checks.values() if c.get("grads") and c["grads"][i] is not None}
        if len(seen) > 1:
            return next(iter(checks.values()))["params"][i][0]
    return None


def _settings_differ(checks: dict[int, dict]) -> str | None:
    """The first optimizer setting that is not the same on every rank, said with each rank's value."""
    seen = {r: c.get("optimizer") for r, c in sorted(checks.items()) if c.get("optimizer")}
    if len(seen) < 2:
        return None
    shown = list(seen.items())[:4]
    if len({s["class"] for s in seen.values()}) > 1:
        return "the optimizer is " + ", ".join(f"{s['class']} on rank {r}" for r, s in shown)
    for g, group in enumerate(next(iter(seen.values()))["groups"]):
        for key in group:
            values = {r: s["groups"][g].get(key) if g < len(s["groups"]) else None for r, s in seen.items()}
            if len({repr(v) for v in values.values()}) > 1:
                each = ", ".join(f"{values[r]} on rank {r}" for r, _ in shown)
                return f"`{key}` of param group {g} is {each}"
    return None


def _cpu_digests(torch, params, sums: int) -> list[tuple[int, int, float | None]] | None:
    """The same digests by numpy, reading the CPU tensors in place: a numpy reduction costs about a microsecond
    where a torch one costs several, between training steps. None when a parameter is not a plain CPU tensor of a
    dtype numpy holds (a GPU's, bfloat16, complex): torch computes them then."""
    try:
        import numpy
    except ImportError:
        return None
    # numpy.add.reduce is what ndarray.sum calls, less the Python layer between (a few microseconds a call)
    out, strided, add, int64, float64 = [], torch.strided, numpy.add.reduce, numpy.int64, numpy.float64
    for i, p in enumerate(params):
        if not p.is_cpu or p.layout != strided or p.is_complex():
            return None
        try:
            values = p.detach().numpy()
        except (RuntimeError, TypeError):  # a dtype numpy lacks (bfloat16), torch built without numpy
            return None
        kind = BITS.get(values.itemsize)
        if values.size <= SMALL:  # (a bias, a norm's weight) summed by Python: exact, wrapped at 64 bits as numpy's
            bits = (sum(values.view(getattr(numpy, kind)).ravel().tolist()) + WRAP) % (2 * WRAP) - WRAP if kind else 0
            total = float(sum(values.ravel().tolist())) if i < sums else None
        else:
            bits = int(add(values.view(getattr(numpy, kind)), axis=None, dtype=int64)) if kind else 0
            total = float(add(values, axis=None, dtype=float64)) if i < sums else None
        out.append((values.size, bits, total))
    return out


# values of a tensor summed from a Python list rather than by numpy: below this, numpy's own work per call (its
# reduction set up for a dtype, twice a tensor) costs more than the sum (6 us against 2 for 16 values, warm)
SMALL = 64
WRAP = 1 << 63  # an int64's sum wraps around at 2**64, numpy's and torch's
