"""How `ddplab lint` reads a script before judging it: names through the imports, what each name holds (a rank of
some kind, a stored rank test), and which rank tests decide whether a line runs, followed the way a reader follows
them (enclosing ifs, early exits, functions only called under a guard, mp.spawn parents)."""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field

RANK_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
SCHEDULER_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_", "MV2_COMM_WORLD_")  # ranks a scheduler sets
COLLECTIVES = {
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "barrier",
    "monitored_barrier",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "all_to_all",
    "all_to_all_single",
    "new_group",
}
GLOBAL_RANK_NAMES = {"rank", "global_rank", "world_rank", "ddp_rank", "my_rank", "process_rank", "rank_id"}
# a device index: the local rank, or the rank of a one-node job: a fine guard for printing, unclear for saving
DEVICE_INDEX_NAMES = {"gpu", "gpu_id", "gpu_idx", "gpu_index", "device_id", "device_index", "cuda_id", "local_gpu"}
MAIN_CALLS = {"is_main_process", "is_master", "is_rank_zero", "is_main"}  # `if is_main_process():` helpers
# decorators that run the function on global rank 0 only (mmcv/mmengine's, Lightning's, accelerate's)
RANK0_DECORATORS = {"master_only", "rank_zero_only", "on_main_process"}
MAIN_NAMES = {
    "is_main",
    "is_master",
    "master_process",
    "is_main_process",
    "is_rank_zero",
    "is_global_zero",
    "main_process",
    "is_rank0",
    "is_chief",
}
ANY_RANK0 = frozenset({"global", "local", "device", "single"})
# the ranks a launcher or a scheduler puts in the environment: torchrun's, Slurm's srun, Open MPI's, MPICH/PMI's
RANK_ENV = {
    "RANK": "global",
    "SLURM_PROCID": "global",
    "OMPI_COMM_WORLD_RANK": "global",
    "PMI_RANK": "global",
    "PMIX_RANK": "global",
    "LOCAL_RANK": "local",
    "SLURM_LOCALID": "local",
    "OMPI_COMM_WORLD_LOCAL_RANK": "local",
    "MPI_LOCALRANKID": "local",
}
SPAWN_CALLS = {
    "torch.multiprocessing.spawn",
    "torch.multiprocessing.start_processes",
    "multiprocessing.Process",
    "torch.multiprocessing.Process",
}
# Command-line runners: `fire.Fire(main)` calls main in this process, where it runs (main is not handed to workers)
CLI_RUNNERS = {"fire.Fire", "typer.run", "jsonargparse.CLI", "tyro.cli", "defopt.run"}
DDP_NAMES = {"DistributedDataParallel", "DDP"}
# a switch that holds when a process group runs: `if not use_ddp or rank == 0:` is the one process, or rank 0
DIST_FLAG_NAMES = {
    "distributed",
    "is_distributed",
    "use_ddp",
    "ddp",
    "use_distributed",
    "is_ddp",
    "multi_gpu",
    "multigpu",
}
WORLD_NAMES = {"world_size", "world", "num_processes", "nprocs", "ddp_world_size"}  # how many processes run


# ----------------------------------------------------------------------------------------------- ast helpers


# Calls that give each process its own name: a path built from one is not shared (os.replace(tmp, final) after it).
UNIQUE_NAMES = {
    "getpid",
    "uuid1",
    "uuid4",
    "mkstemp",
    "mkdtemp",
    "NamedTemporaryFile",
    "TemporaryDirectory",
    "token_hex",
    "token_urlsafe",
}


def dotted(node: ast.AST | None) -> str:
    """`torch.distributed.all_reduce` for the callee or value expression; '' when it is not a plain name chain."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        base = dotted(node.func)
        return f"{base}()" if base else ""
    return ""


def last(name: str) -> str:
    return name.rstrip("()").rsplit(".", 1)[-1]


# torch's modules that define what a package re-exports: `from torch.multiprocessing.spawn import spawn` is
# torch.multiprocessing.spawn, `torch.distributed.distributed_c10d.init_process_group` torch.distributed's
_DEFINED_IN = {
    "torch.multiprocessing.spawn.": "torch.multiprocessing.",
    "torch.distributed.distributed_c10d.": "torch.distributed.",
    "torch.nn.parallel.distributed.": "torch.nn.parallel.",
}


def _resolved(aliases: dict[str, str], name: str) -> str:
    head, _, rest = name.partition(".")
    full = aliases.get(head.rstrip("()"))
    found = f"{full}.{rest}" if full and rest else (full or name)
    for module, package in _DEFINED_IN.items():
        if found.startswith(module):
            return package + found[len(module) :]
    return found


def _hands_a_name(call: ast.Call) -> bool:
    return bool(call.args) and isinstance(call.args[0], ast.Name)


def given_for(call: ast.Call, func: ast.AST, param: str) -> ast.AST | None:
    """What `call` gives `func`'s parameter `param`, by keyword or by position (the self of a method called on an
    object, or of a class's __init__, is Python's to pass); None where the call leaves it to its default or hands
    its arguments over as *args, or hands `func` itself to a runner (`fire.Fire(func)`: the command line's)."""
    if _hands_a_name(call) and call.args[0].id == getattr(func, "name", None):
        return None
    params = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
    if param not in params:
        return keyword(call, param)
    bound = params[0] in ("self", "cls") and (isinstance(call.func, ast.Attribute) or func.name == "__init__")
    at = params.index(param) - (1 if bound else 0)
    return keyword(call, param) or (
        call.args[at]
        if 0 <= at < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: at + 1])
        else None
    )


def default_of(func: ast.AST, param: str) -> ast.AST | None:
    """The default of `func`'s parameter `param` (positional or keyword-only); None when it has none."""
    a = func.args
    positional = [*a.posonlyargs, *a.args]
    pairs = [*zip(positional[len(positional) - len(a.defaults) :], a.defaults), *zip(a.kwonlyargs, a.kw_defaults)]
    return next((d for arg, d in pairs if arg.arg == param), None)


def passed(call: ast.Call, func: ast.AST, param: str) -> ast.AST | None:
    """What `call` gives `param`: the argument, or the default where the call leaves it out (None where a *args or
    **kwargs may hold it)."""
    value = given_for(call, func, param)
    if value is None and not any(k.arg is None for k in call.keywords):
        if not any(isinstance(a, ast.Starred) for a in call.args):
            return default_of(func, param)
    return value


def const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == 1


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in (0, "0") and not isinstance(node.value, bool)


def _is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def is_main_block(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`"""
    test = getattr(node, "test", None)
    return (
        isinstance(test, ast.Compare)
        and dotted(test.left) == "__name__"
        and any(const_str(c) == "__main__" for c in test.comparators)
    )


def body_exits(body: list[ast.stmt]) -> bool:
    """The block always leaves: return / continue / break / raise / sys.exit()."""
    if not body:
        return False
    tail = body[-1]
    if isinstance(tail, (ast.Return, ast.Continue, ast.Break, ast.Raise)):
        return True
    return (
        isinstance(tail, ast.Expr)
        and isinstance(tail.value, ast.Call)
        and last(dotted(tail.value.func)) in ("exit", "_exit")
    )


def block_of(parent: ast.AST | None, child: ast.AST, fields=("body", "orelse", "finalbody")) -> list | None:
    """The statement list of `parent` (its body, else or finally) that holds `child`; None if none does."""
    for name in fields:
        block = getattr(parent, name, None)
        if isinstance(block, list) and child in block:
            return block
    return None


def method_name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def said_plainly(test: ast.AST) -> ast.AST:
    """`flag == True` / `flag is True` is `flag`."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Eq, ast.Is))
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is True
    ):
        return test.left
    return test


def walk_same_function(body: list[ast.stmt], into_loops: bool = True):
    """Every node under these statements, not entering nested functions or classes (nor loops, if told)."""
    stack = list(body)
    skip = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda) + (
        () if into_loops else (ast.For, ast.While, ast.AsyncFor)
    )
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, skip):
            stack.extend(ast.iter_child_nodes(node))


def function_locals(nodes: list[ast.AST]) -> set[int]:
    """ids of the Names that are a local of their function (`run = wandb.init(...)`, then `run.name`): a local
    assigned anywhere in a function is that function's own name throughout it, not the module's function `run`."""
    found: set[int] = set()
    for func in nodes:
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = list(walk_same_function(func.body))
        declared = {name for n in body if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names}
        args = func.args
        local = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
        local |= {n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        local |= {
            (a.asname or a.name).split(".")[0]
            for n in body
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for a in n.names
        }
        local -= declared
        found |= {id(n) for n in body if isinstance(n, ast.Name) and n.id in local}
    return found


def calls_in(body: list[ast.stmt]) -> list[ast.Call]:
    return [n for n in walk_same_function(body) if isinstance(n, ast.Call)]


def _kind_by_name(name: str) -> str | None:
    """The kind of rank a name (or a config key) says it holds: `local_rank`, `rank`, `gpu_id`."""
    name = name.lstrip("_")  # a module's private `__rank` is the rank too
    if "local" in name and "rank" in name:
        return "local"
    if name in GLOBAL_RANK_NAMES:
        return "global"
    return "device" if name in DEVICE_INDEX_NAMES else None


@dataclass
class Facts:
    """What the other files of the project say about this one's run (project.py reads them): a print filter, the
    device set, the group destroyed, helpers that test or return the rank, functions that build the DDP wrapper."""

    replaces_print: bool = False
    sets_device: bool = False
    destroys: bool = False
    distributed: bool = False
    no_sync: bool = False
    ddp: bool = False
    gpu_training: bool = False  # a file builds DDP and puts something on a GPU unconditionally there: GPU-only
    classes: set = field(default_factory=set)  # the project's own class names
    spawns: bool = False
    visible_per_process: bool = False  # CUDA_VISIBLE_DEVICES chosen from the rank: each process sees one GPU, cuda:0
    rank_tests: dict = field(default_factory=dict)  # function name -> (kind, rank0): `def is_main(): return rank == 0`
    rank_values: dict = field(default_factory=dict)  # function name -> kind: `def get_rank(): return dist.get_rank()`
    ddp_factories: set = field(default_factory=set)  # functions that return a DDP wrapper
    buffer_factories: set = field(default_factory=set)  # of those, the ones whose model has buffers (BatchNorm)
    reads_local_rank_env: bool = False  # LOCAL_RANK read from the environment somewhere
    local_rank_flags: set = field(default_factory=set)  # dests of argparse --local_rank flags (an options module's)
    stored_attrs: dict = field(default_factory=dict)  # attribute some file assigns -> from: `=` a constant, x.A's A, ?
    backend_nccl: bool = False  # init_process_group("nccl") somewhere
    sampler: bool = False  # a DistributedSampler somewhere: loaders give each rank its shard
    group_makers: set = field(default_factory=set)  # project functions that make the process group (transitively)
    spawners: set = field(default_factory=set)  # project functions that start workers (mp.spawn), transitively
    reduce_returners: dict = field(default_factory=dict)  # function -> positions of its result out of a reducer
    sum_returners: dict = field(default_factory=dict)  # function -> positions of its result that are per-rank sums
    plain_loader_makers: set = field(default_factory=set)  # functions returning a DataLoader with no sampler
    loader_branches: dict = field(default_factory=dict)  # functions whose loader has a sampler in some branches only
    rank0_decorators: set = field(default_factory=set)  # the project's decorators that run a function on rank 0 only
    rank0_printers: set = field(default_factory=set)  # functions that print or log only under a rank-0 test
    set_epoch: bool = False  # some file of the project calls set_epoch (on any sampler)
    seeded: bool = False  # some file of the project seeds a random generator (manual_seed, seed_everything, ...)
    param_ranks: dict = field(default_factory=dict)  # (function, parameter) -> kind: every call passes a rank
    param_tests: dict = field(default_factory=dict)  # (function, parameter) -> (kind, rank0): a rank test passed
    print_installers: set = field(default_factory=set)  # functions that install a builtins.print filter
    buffer_classes: set = field(default_factory=set)  # project classes whose modules hold buffers (BatchNorm, ...)
    attr_truths: dict = field(default_factory=dict)  # attribute name -> the one truth every store gives it
    sharding_datasets: set = field(default_factory=set)  # project data sets that build a DistributedSampler inside
    attr_tests: dict = field(default_factory=dict)  # attribute name -> (kind, rank0): every store is that test
    attr_ranks: dict = field(default_factory=dict)  # attribute name -> kind: every store in the project is that rank
    meter_classes: set = field(default_factory=set)  # project classes whose update() adds to self, never reduced


@dataclass
class Guard:
    kind: str  # global | local | device | single (the parent of mp.spawn workers: one process)
    rank0: bool  # the guarded code runs on rank 0 only (True) or on every rank but 0 (False)
    node: ast.If | ast.IfExp
    other: list[ast.AST] = field(default_factory=list)  # the other branch: a collective there pairs with ours


_STATIC: dict[int, tuple] = {}  # id(tree) -> (tree, nodes, parent, syntax): one walk per file, however many readers


def static(tree: ast.Module) -> tuple[list[ast.AST], dict[ast.AST, ast.AST]]:
    """Every node of the tree (one walk) and each node's parent, kept for the next reader of the same tree."""
    held = _held(tree)
    return held[1], held[2]


def forget_trees() -> None:
    """Drop what static() keeps: each lint reads its files anew."""
    _STATIC.clear()


def _held(tree: ast.Module) -> tuple:
    held = _STATIC.get(id(tree))
    if held is None or held[0] is not tree:
        nodes, parent = [tree], {}
        for node in nodes:  # the list grows as it is read: breadth first, ast.walk's order, each node's fields once
            for child in ast.iter_child_nodes(node):
                parent[child] = node
                nodes.append(child)
        if len(_STATIC) > 5000:
            _STATIC.clear()
        held = _STATIC[id(tree)] = (tree, nodes, parent, {})
    return held


class ScriptReader:
    def __init__(self, tree: ast.Module, facts: Facts | None = None):
        self.tree = tree
        self.facts = facts or Facts()
        _, self.nodes, self.parent, syntax = _held(tree)
        # What the file's text alone says (its imports, calls, functions) is read once per file: a project's files
        # are read twice, to gather the project's facts and then with them.
        if not syntax:
            self._read_syntax(syntax)
        self._callees: dict[ast.Call, str] = syntax["callees"]
        self.aliases, self.calls, self.calls_by_name = syntax["aliases"], syntax["calls"], syntax["calls_by_name"]
        self.functions, self.passed = syntax["functions"], syntax["passed"]
        self.distributed = (
            any(
                self.callee_last(c) in {"init_process_group", *DDP_NAMES} or self.callee(c).startswith("ddplab.dist.")
                for c in self.calls
            )
            or self.facts.distributed
        )
        self.sets_device = self.sets_device_here() or self.facts.sets_device
        # mp.spawn / start_processes: the script is its own launcher (sets MASTER_ADDR, runs the parent once)
        self.spawns = any(self.callee(c) in SPAWN_CALLS and not self._in_dead_function(c) for c in self.calls)
        self.learn_assignments()
        self.ddp_names: dict[str, int] = {}  # `model = DDP(...)`: the wrapper's name -> line
        self.ddp_scopes: dict[str, set] = {}  # the wrapper's name -> the functions it is a local of (None: attribute)
        for node in self.nodes:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and (
                    self.callee_last(node.value) in DDP_NAMES
                    or self.callee_last(node.value) in self.facts.ddp_factories
                )
            ):
                for target in node.targets:
                    self.ddp_names.setdefault(dotted(target), node.lineno)
                    self.ddp_scopes.setdefault(dotted(target), set()).add(
                        self.enclosing_function(node) if isinstance(target, ast.Name) else None
                    )
        # `ddp_model.load_state_dict(...)`: the wrapper's own checkpoints (with 'module.') load back into it; not a
        # load into the plain model before the same scope wraps it (`model.load_state_dict(...)`, then `model =
        # DDP(model)`): that file had no 'module.' keys
        self.loaded_into = {
            dotted(c.func.value)
            for c in self.calls
            if isinstance(c.func, ast.Attribute)
            and c.func.attr == "load_state_dict"
            and not self._before_the_wrap(dotted(c.func.value), c)
        }

    def _before_the_wrap(self, name: str, node: ast.AST) -> bool:
        """`node` comes before `name = DDP(...)` in the same function (or both at module level)."""
        return self.enclosing_function(node) in self.ddp_scopes.get(name, ()) and node.lineno < self.ddp_names[name]

    def _read_syntax(self, syntax: dict) -> None:
        calls = [n for n in self.nodes if isinstance(n, ast.Call)]
        calls_by_name: dict[str, list[ast.Call]] = {}
        for c in calls:
            calls_by_name.setdefault(last(dotted(c.func)), []).append(c)
        aliases = self._imports()
        # `fire.Fire(train)` is a call of train where it stands, with what the command line gives its parameters
        run = [c for c in calls if _resolved(aliases, dotted(c.func)) in CLI_RUNNERS and _hands_a_name(c)]
        for c in run:
            calls_by_name.setdefault(c.args[0].id, []).append(c)
        syntax.update(
            callees={},
            aliases=aliases,
            calls=calls,
            calls_by_name=calls_by_name,
            functions={n.name: n for n in self.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))},
            # functions handed to another call (mp.spawn(main_worker, ...)): they run where that call runs them (a
            # local of the calling function by that name is not the function: `save_ckpt_dict = {...}`)
            passed={
                last(dotted(a))
                for c in calls
                if c not in run
                for a in [*c.args, *(k.value for k in c.keywords)]
                if isinstance(a, (ast.Name, ast.Attribute)) and not (isinstance(a, ast.Name) and self._local(a))
            },
        )

    def _local(self, name: ast.Name) -> bool:
        """`name` is a parameter or an assigned local of the function it is read in."""
        func = self.enclosing_function(name)
        return func is not None and (
            name.id in {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
            or name.id in self.stores(func)
        )

    def stores(self, func: ast.AST) -> set[str]:
        """The plain names `func`'s own body assigns (a nested function's are its own), tabled once per function:
        a parameter in it is not (only) what the callers passed."""
        held = self.__dict__.setdefault("_stores", {})
        if func not in held:
            held[func] = {
                n.id for n in walk_same_function(func.body) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
        return held[func]

    def holds_ddp(self, owner: str, node: ast.AST) -> bool:
        """`owner` names the DDP wrapper where `node` is: a local assigned the wrapper in this function (the same
        name in another function, `model = main(...)` returning `model.module`, is another variable)."""
        scopes = self.ddp_scopes.get(owner)
        return bool(scopes) and (None in scopes or "." in owner or self.enclosing_function(node) in scopes)

    def wrapped_at(self, name: str, node: ast.AST) -> bool:
        """`name` holds the DDP wrapper at `node`: assigned it in this scope (holds_ddp), on a line before."""
        return self.holds_ddp(name, node) and self.ddp_names.get(name, 0) <= node.lineno

    def sets_device_here(self) -> bool:
        """torch.cuda.set_device / torch.accelerator.set_device_index, or CUDA_VISIBLE_DEVICES chosen per process.
        (`torch.accelerator.device_index(i)` is a context manager: called alone it sets nothing.)"""
        return any(self.callee_last(c) in ("set_device", "set_device_index") for c in self.calls) or any(
            self._visible_stores()
        )

    def _visible_stores(self):
        """`os.environ["CUDA_VISIBLE_DEVICES"] = ...`"""
        return (
            n
            for n in self.nodes
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Subscript) and const_str(t.slice) == "CUDA_VISIBLE_DEVICES" for t in n.targets)
        )

    def visible_per_process_here(self) -> bool:
        """`os.environ["CUDA_VISIBLE_DEVICES"] = str(devices[rank])`: each process sees its own GPU, as cuda:0."""
        return any(
            isinstance(v, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and self.rank_kind(v)
            for n in self._visible_stores()
            for v in ast.walk(n.value)
        )

    def replaces_print_here(self, spawn_flags: set[str] | None = None) -> bool:
        """`builtins.print = ...` (setup_for_distributed): every print goes through the project's filter. Not when
        it is installed only on the path a flag chooses that also chooses mp.spawn (`if args.multiprocessing_
        distributed and gpu != 0:` in the pytorch/examples imagenet template): under torchrun every rank prints."""
        spawn_flags = self.spawn_flags() if spawn_flags is None else spawn_flags
        return any(self.sets_print(node) and not self._conditions(node) & spawn_flags for node in self.nodes)

    def _conditions(self, node: ast.AST) -> set[str]:
        """The flags (names, attributes, calls of no argument: `is_distributed()`) the enclosing `if` tests require for
        `node` to run."""
        found, child, parent = set(), node, self.parent.get(node)
        while parent is not None:
            if isinstance(parent, ast.If) and child in parent.body:
                tests = (
                    parent.test.values
                    if isinstance(parent.test, ast.BoolOp) and isinstance(parent.test.op, ast.And)
                    else [parent.test]
                )
                tests = [said_plainly(t) for t in tests]
                found |= {dotted(t) for t in tests if isinstance(_flag_call(t) or t, (ast.Name, ast.Attribute))}
            child, parent = parent, self.parent.get(parent)
        return found

    def spawn_flags(self) -> set[str]:
        """Flags whose `if` starts the workers with mp.spawn: the path they choose is one launcher among others."""
        if not self.spawns:
            return set()
        return {
            dotted(n.test)
            for n in self.nodes
            if isinstance(n, ast.If)
            and isinstance(n.test, (ast.Name, ast.Attribute))
            and any(isinstance(c, ast.Call) and self.callee(c) in SPAWN_CALLS for s in n.body for c in ast.walk(s))
        }

    def helper_results(self) -> tuple[dict, dict, set]:
        """This file's functions that return a rank test, a rank, or a DDP wrapper (for the rest of the project)."""
        returns: dict[ast.AST, list[ast.AST]] = {}
        for node in self.nodes:
            if isinstance(node, ast.Return) and node.value is not None and (func := self.enclosing_function(node)):
                returns.setdefault(func, []).append(node.value)
        tests, values, factories = {}, {}, set()
        # a factory wraps the model itself: only the functions that call DDP are read for one
        wrapping = {self.enclosing_function(c) for c in self.calls if self.callee_last(c) in DDP_NAMES}
        for func, values_returned in returns.items():
            first = values_returned[0]
            test = self._returned_test(first, func)
            if test and all(
                self._returned_test(r, func) == test for r in values_returned if not isinstance(r, ast.Constant)
            ):
                tests[func.name] = test
            elif (kind := self.rank_kind(first)) and func.name != "__init__":
                values[func.name] = kind
            if func in wrapping and (
                any(isinstance(r, ast.Call) and self.callee_last(r) in DDP_NAMES for r in values_returned)
                or any(
                    isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Call)
                    and self.callee_last(n.value) in DDP_NAMES
                    and any(dotted(t) == dotted(r) for t in n.targets for r in values_returned)
                    for n in walk_same_function(func.body)
                )
            ):
                factories.add(func.name)
        return tests, values, factories

    def _returned_test(self, value: ast.AST, func: ast.AST) -> tuple[str, bool] | None:
        """The rank test `func` returns: a comparison or its logic, a call of another rank test (`return
        is_global_primary(args)`), or a choice between two: the one its flag's default picks (`def is_primary(args,
        local=False): return is_local_primary(args) if local else is_global_primary(args)`: the global one, as
        called with no flag), else both when they hold on rank 0 alike. Not any call: `return dist.get_rank()`
        returns a rank, not a test."""
        if isinstance(value, (ast.Compare, ast.BoolOp, ast.UnaryOp)):
            return self.rank_test(value)
        if isinstance(value, ast.Call) and last(self.callee(value)) in MAIN_CALLS | set(self.facts.rank_tests):
            return self.rank_test(value)
        if isinstance(value, ast.IfExp):
            if (default := _default_of(func, value.test)) is not None:
                return self._returned_test(value.body if default else value.orelse, func)
            body, orelse = self._returned_test(value.body, func), self._returned_test(value.orelse, func)
            if body and orelse and body[1] == orelse[1]:
                return self.rank_test(value)
        return None

    # --------------------------------------------------------------------------------------- names

    def _imports(self) -> dict[str, str]:
        aliases = {}
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        return aliases

    def resolve(self, name: str) -> str:
        """`dist.all_reduce` -> `torch.distributed.all_reduce`, through the script's imports."""
        return _resolved(self.aliases, name)

    def sets_print(self, n: ast.AST) -> bool:
        """`builtins.print = ...` (a print filter being installed), or stdout sent to a file the script opens
        (`if local_rank != 0: sys.stdout = open(os.devnull, "w")`: every print that follows, in any function, is
        that file's; not a stream put back, `sys.stdout = self.terminal`)."""
        return isinstance(n, ast.Assign) and any(
            isinstance(t, ast.Attribute)
            and t.attr == "print"
            and self.resolve(dotted(t.value)) in ("builtins", "__builtin__")
            or self.resolve(dotted(t)) == "sys.stdout"
            and self._opened_here(n.value)
            for t in n.targets
        )

    def _opened_here(self, value: ast.AST) -> bool:
        """`open(...)`, or a name assigned one just before (`f = open(os.devnull, "w")`)."""
        if isinstance(value, ast.Name):
            value = self._reaching_value(value)
        return isinstance(value, ast.Call) and self.callee(value) in ("open", "io.open")

    def _reaching_value(self, name: ast.Name) -> ast.AST | None:
        """The value of the nearest `name = ...` on the straight path before this use (same block or enclosing
        ones), as a reader finds it scrolling up."""
        child, parent = name, self.parent.get(name)
        while parent is not None and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            block = block_of(parent, child)
            for stmt in reversed(block[: block.index(child)] if block else []):
                if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name.id for t in stmt.targets
                ):
                    return stmt.value
                if not isinstance(stmt, ast.Assign) and any(  # `if distributed: sampler = ...`
                    isinstance(n, ast.Name) and n.id == name.id and isinstance(n.ctx, ast.Store)
                    for n in walk_same_function([stmt])
                ):
                    return None  # set on some path only: not one value
            child, parent = parent, self.parent.get(parent)
        return None

    def callee(self, call: ast.Call) -> str:
        if call not in self._callees:
            self._callees[call] = self.resolve(dotted(call.func))
        return self._callees[call]

    def function_called(self, call: ast.Call) -> str | None:
        """The name of the function a call runs when it is one by name (`train(...)`) or through an imported module
        (`utils.init_distributed_mode(args)`); None for a method of an object (`model.train()`), which a
        function of the same name is not."""
        head = dotted(call.func).split(".")[0]
        if isinstance(call.func, ast.Name) or (isinstance(call.func, ast.Attribute) and head in self.aliases):
            return self.callee_last(call)
        return None

    def callee_last(self, call: ast.Call) -> str:
        return last(self.callee(call))

    def is_torch_ddp(self, call: ast.Call) -> bool:
        """torch's DistributedDataParallel (through any import), not a namesake of another library (apex.parallel,
        fairscale) with another signature."""
        full = self.callee(call)
        return "." not in full or full.split(".")[0] in ("torch", "nn")

    def is_collective(self, call: ast.Call) -> bool:
        full = self.callee(call)
        return last(full) in COLLECTIVES and (
            full.startswith("torch.distributed.") or ".dist." in f".{full}" or full.startswith("dist.")
        )

    # --------------------------------------------------------------------------------------- rank guards

    def _scope_key(self, node: ast.AST) -> tuple[ast.AST | None, str] | None:
        """Where a name's value is recorded: (function, name) for a plain name, (None, attr) for `self.attr`."""
        if isinstance(node, ast.Name):
            return self.enclosing_function(node), node.id
        if isinstance(node, ast.Attribute):
            return None, node.attr
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, (ast.Name, ast.Attribute))
            and (slot := const_str(node.slice)) is not None
        ):
            return None, f"{last(dotted(node.value))}[{slot!r}]"  # self.metric["path"]: a slot of a dict
        return None

    def learn_assignments(self) -> None:
        """What each name holds, read from its assignments: a rank of some kind (`gpu_id = int(os.environ[
        'LOCAL_RANK'])`) or a stored rank test (`is_main = rank == 0`). Names assigned two different things are
        left to what their name says."""
        self.held_kind: dict = {}  # (scope, name) -> kind
        self.held_test: dict = {}  # (scope, name) -> (kind, rank0)
        self.rank_derived: dict = {}  # (scope, name) -> True: a value computed from the rank
        self.rank_labelled: dict = {}  # the same, for names also assigned something else elsewhere
        assigns = [n for n in self.nodes if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
        # what init_process_group(rank=...) is given is the global rank, whatever its name (`rank=local_rank` in a
        # one-node mp.spawn script: there the local index is the rank)
        given = {}
        for call in (c for c in self.nodes if isinstance(c, ast.Call) and last(dotted(c.func)) == "init_process_group"):
            value = keyword(call, "rank")
            if isinstance(value, (ast.Name, ast.Attribute)) and (key := self._scope_key(value)) is not None:
                given[key] = "global"
        self.held_kind = dict(given)
        fresh = (
            {id(n) for n in assigns if self._fresh_name(n.value)}
            if any(getattr(c.func, "attr", getattr(c.func, "id", None)) in UNIQUE_NAMES for c in self.calls)
            else set()
        )
        learnt = None
        for _ in range(3):  # `rank = ...; is_main = rank == 0`: the next pass sees what the last learnt (up to three:
            #                 path = join(d, f"rank{rank}"); self.meta["path"] = path; p = join(self.meta["path"], f))
            kinds: dict = {}
            tests: dict = {}
            derived: set = set()
            plain: set = set()  # assigned something else too: not always different per process
            only_under: dict = {}  # key -> the rank-0 tests its values other than None are assigned under
            cleared: dict = {}  # key -> (line, the test "every rank but 0" or None) of each None it is assigned
            for node in assigns:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if len(targets) != 1 or (key := self._scope_key(targets[0])) is None:
                    continue
                if learnt is not None:  # `writer = None`, then `if rank == 0: writer = SummaryWriter()`
                    guards = self.guards(node)
                    zero = [(g.kind, True) for g in guards if g.rank0]
                    only_under.setdefault(key, []).append(None if _is_none(node.value) else (zero or [False])[0])
                    # `self.ckpt_dir = ckpt_dir`, then `if rank != 0: self.ckpt_dir = None`: something on rank 0 only
                    others = [(g.kind, True) for g in guards if not g.rank0 and g.kind != "single"]
                    cleared.setdefault(key, []).append((node.lineno, _is_none(node.value), (others or [None])[0]))
                is_test = isinstance(
                    node.value, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Name, ast.Attribute, ast.Call, ast.IfExp)
                ) and not self.rank_kind(node.value)
                if is_test and (test := self.rank_test(node.value)) is not None:
                    tests.setdefault(key, set()).add(test)
                elif (kind := self.rank_kind(node.value)) is not None:
                    kinds.setdefault(key, set()).add(kind)
                elif self._labels_rank(node.value) or id(node) in fresh:
                    derived.add(key)  # computed from the rank: different on every process
                else:
                    plain.add(key)
            self.held_kind = {**given, **{k: v.pop() for k, v in kinds.items() if len(v) == 1 and k not in given}}
            self.rank_derived = {k: True for k in derived - plain}
            self.rank_labelled = {k: True for k in derived}  # on some path at least
            self.held_test = {k: v.pop() for k, v in tests.items() if len(v) == 1}
            for key, values in only_under.items():  # so `if writer:` (or `is not None`) holds on rank 0 only
                given_values = {v for v in values if v is not None}
                if key not in self.held_test and None in values and len(given_values) == 1 and all(given_values):
                    self.held_test[key] = given_values.pop()
                elif key not in self.held_test and given_values == {False} and (test := _reset_off_zero(cleared[key])):
                    self.held_test[key] = test
            now = (self.held_kind, self.rank_derived, self.rank_labelled, self.held_test)
            if now == learnt:
                break  # nothing new: another pass would learn nothing either
            learnt = now

    def _labels_rank(self, value: ast.AST) -> bool:
        """A label made from the rank: f"cuda:{local_rank}", torch.device("cuda", rank), "gpu{}".format(rank)
        (a loss computed on this rank's device is not one: only names, strings and devices count). A name drawn
        fresh in each process (uuid4, the process id, mkstemp) is as per-process as the rank: _fresh_name."""
        if isinstance(value, ast.JoinedStr):  # the process id is as good as the rank for a per-process name
            return any(
                isinstance(v, ast.FormattedValue)
                and (
                    self.rank_kind(v.value) or isinstance(v.value, ast.Call) and last(self.callee(v.value)) == "getpid"
                )
                for v in value.values
            )
        if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)) and self._held(self.rank_derived, value):
            return True  # a name (or dict slot) an earlier pass saw assigned a per-process label
        if isinstance(value, ast.Subscript):  # devices[rank]
            return bool(self.rank_kind(value.slice))
        if isinstance(value, ast.Call) and last(self.callee(value)) in ("device", "format", "str", "join"):
            return any(self.rank_kind(a) or self._labels_rank(a) for a in value.args)
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod) and const_str(value.left) is not None:
            parts = value.right.elts if isinstance(value.right, ast.Tuple) else [value.right]
            return any(self.rank_kind(a) or self._labels_rank(a) for a in parts)  # "%s_rank%d.json" % (f, rank)
        if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Div)):
            return any(self._labels_rank(a) for a in (value.left, value.right))  # "ckpt_" + str(rank), dir / f"{rank}"
        return False

    @staticmethod
    def _fresh_name(value: ast.AST) -> bool:
        """A call in `value` gives each process its own name (uuid4(), os.getpid(), tempfile.mkstemp())."""
        return any(
            isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) in UNIQUE_NAMES
            for n in ast.walk(value)
        )

    def _held(self, table: dict, node: ast.AST):
        key = self._scope_key(node)
        if key is None:
            return None
        if key in table:
            return table[key]
        return table.get((None, key[1])) if key[0] is not None else None

    def rank_kind(self, expr: ast.AST) -> str | None:
        """'global' / 'local' / 'device' when `expr` is a rank: rank, args.local_rank, dist.get_rank(),
        os.environ['RANK'], or a device index (`gpu_id`: the local rank, or the rank of a one-node job)."""
        if isinstance(expr, ast.Call):
            name = last(self.callee(expr))
            if name in ("get_rank", "rank", "Get_rank"):  # Get_rank: mpi4py's MPI.COMM_WORLD.Get_rank()
                return "global"
            if name in self.facts.rank_values:
                return self.facts.rank_values[name]
            if name in ("get_local_rank", "local_rank", "get_node_local_rank"):
                return "local"
            if name == "int" and expr.args:
                return self.rank_kind(expr.args[0])
            if name in ("get", "getenv") and expr.args:
                return RANK_ENV.get(const_str(expr.args[0]) or "")
            return None
        if isinstance(expr, ast.Subscript):
            key = const_str(expr.slice) or ""
            if key in RANK_ENV or "environ" in dotted(expr.value):
                return RANK_ENV.get(key)
            # a config dict read like an options object: `config['local_rank']` is what `args.local_rank` is
            return self._held(self.held_kind, expr) or (_kind_by_name(key.lower()) if key else None)
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and self.rank_kind(expr.left):
            return "local"  # rank % gpus_per_node: the index on this machine
        if isinstance(expr, ast.IfExp):
            # `dist.get_rank() if dist.is_initialized() else 0`, read as the if/else statement is: the rank (the
            # constant is the one process's value)
            kinds = {self.rank_kind(b) for b in (expr.body, expr.orelse) if not isinstance(b, ast.Constant)}
            return kinds.pop() if len(kinds) == 1 else None
        if not isinstance(expr, (ast.Name, ast.Attribute)):
            return None
        held = self._held(self.held_kind, expr)
        if held:
            return held
        if isinstance(expr, ast.Name) and (given := self._param_fact(self.facts.param_ranks, expr)):
            return given
        if isinstance(expr, ast.Attribute) and (stored := self.facts.attr_ranks.get(expr.attr)):
            return stored  # `self.device = self._acquire_device()` (LOCAL_RANK) in a base class's module
        return _kind_by_name(last(dotted(expr)).lower())

    def _param_fact(self, table: dict, name: ast.Name):
        """What every caller passes for this parameter (`table`: Facts.param_ranks or param_tests), when `name` is
        a parameter of its function that the function does not reassign."""
        if not table:
            return None
        params = self.__dict__.setdefault("_param_names", {})  # id(table) -> the parameter names it holds
        if id(table) not in params:
            params[id(table)] = (table, {param for _, param in table})
        if name.id not in params[id(table)][1]:
            return None
        func = self.enclosing_function(name)
        if func is None or name.id not in {a.arg for a in func.args.args}:
            return None
        owner = self.parent.get(func)
        key = (
            f"{owner.name}.__init__" if func.name == "__init__" and isinstance(owner, ast.ClassDef) else func.name,
            name.id,
        )
        if key not in table:
            return None
        return None if name.id in self.stores(func) else table[key]

    def _in_dead_function(self, node: ast.AST) -> bool:
        """In a function of this file's top level that nothing here names, in a file whose `__main__` block says
        how it runs (round 36's GraphaRNA: an mp.spawn helper kept beside the torchrun path, never called)."""
        func = self.enclosing_function(node)
        if func is None or func not in self.tree.body or not any(is_main_block(n) for n in self.tree.body):
            return False
        shadowed = function_locals(self.nodes)
        return not any(
            isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id == func.name and id(n) not in shadowed
            for n in self.nodes
        )

    def rank_test(self, expr: ast.AST, follow_names: bool = True) -> tuple[str, bool] | None:
        """(kind, rank0) when `expr` tests the rank: rank0 is True when the test holds on rank 0 only."""
        if (
            isinstance(expr, ast.Compare)
            and len(expr.ops) == 1
            and isinstance(expr.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))
            and any(_is_bool(expr.comparators[0], b) for b in (True, False))
        ):
            # `is_main_process() == True`, `(rank == 0) is True`, `is_master != False`: the test itself, said the long way
            inner = self.rank_test(expr.left, follow_names)
            same = _is_bool(expr.comparators[0], True) == isinstance(expr.ops[0], (ast.Eq, ast.Is))
            return (inner[0], inner[1] == same) if inner else None
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            inner = self.rank_test(expr.operand, follow_names)
            if inner is None and isinstance(expr.operand, ast.BoolOp):
                return self._rank_test_by_logic(expr)  # `not (use_ddp and rank != 0)`
            return (inner[0], not inner[1]) if inner else None
        if isinstance(expr, ast.IfExp):  # `is_master() if only_master else is_local_master()`: rank 0 either way
            body, orelse = self.rank_test(expr.body, follow_names), self.rank_test(expr.orelse, follow_names)
            if body and orelse and body[1] == orelse[1]:
                return ("local" if "local" in (body[0], orelse[0]) else body[0]), body[1]
            # `run = wandb.init() if rank == 0 else None`: the value is something only where the test holds, so a
            # later `if run:` is that rank test under another name
            test = self.rank_test(expr.test, follow_names)
            if test and (_is_none(expr.orelse) or _is_bool(expr.body, True) and _is_bool(expr.orelse, False)):
                return test  # (`is_main = True if local_rank == 0 else False`: the test, said the long way)
            if test and (_is_none(expr.body) or _is_bool(expr.body, False) and _is_bool(expr.orelse, True)):
                return test[0], not test[1]
            return None
        if isinstance(expr, ast.BoolOp):
            for value in expr.values:
                inner = self.rank_test(value, follow_names)
                # `rank == 0 and x` runs on rank 0 only; `rank != 0 or x` may run anywhere but rank 0.
                if inner and inner[1] == isinstance(expr.op, ast.And):
                    if inner[0] == "local" and any(self._unknown_zero(v) for v in expr.values if v is not value):
                        return "device", True  # `node_id == 0 and local_rank == 0`: maybe the global rank 0
                    return inner
            # `not is_distributed or local_rank == 0`, `rank is None or rank == 0`: read by value (the weakest kind of
            # the parts: `local_rank == 0 or rank == 0` holds on every node's first process)
            return self._rank_test_by_logic(expr)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and (single := self._no_rank(expr)) is not None:
            return "single", single  # `rank is None`, `local_rank == -1`: no launcher gave a rank, one process
        if (
            isinstance(expr, ast.Compare)
            and len(expr.ops) == 1
            and isinstance(expr.ops[0], (ast.Is, ast.IsNot))
            and _is_none(expr.comparators[0])
            and follow_names
            and (held := self._held(self.held_test, expr.left)) is not None
        ):
            return held if isinstance(expr.ops[0], ast.IsNot) else (held[0], not held[1])  # `if run is not None:`
        if (
            isinstance(expr, ast.Compare)
            and len(expr.ops) == 1
            and isinstance(expr.ops[0], (ast.In, ast.NotIn))
            and isinstance(expr.comparators[0], (ast.List, ast.Tuple, ast.Set))
        ):
            # `local_rank in [-1, 0]`: rank 0 (or no launcher); `rank not in (0,)`: every rank but 0
            kind = self.rank_kind(expr.left)
            if kind and any(_is_zero(e) for e in expr.comparators[0].elts):
                return kind, isinstance(expr.ops[0], ast.In)
            return None
        if (
            isinstance(expr, ast.Compare)
            and len(expr.ops) == 1
            and isinstance(expr.ops[0], (ast.Eq, ast.NotEq))
            and not _is_zero(expr.comparators[0])
            and not _is_zero(expr.left)
            and self._other_rank(expr.comparators[0])
            and (kind := self.rank_kind(expr.left))
        ):
            # `rank == world_size - 1` runs on one rank (a single voice, like rank 0); `rank != 1` on the others
            return kind, isinstance(expr.ops[0], ast.Eq)
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            left, op, right = expr.left, expr.ops[0], expr.comparators[0]
            if _is_one(left) and isinstance(op, (ast.Gt, ast.LtE)):  # `1 > rank`, `1 <= rank`
                left, right, op = right, left, ast.Lt() if isinstance(op, ast.Gt) else ast.GtE()
            if _is_one(right) and isinstance(op, (ast.Lt, ast.GtE)):  # `rank < 1` (0, or -1 without a launcher)
                right, op = ast.Constant(0), ast.LtE() if isinstance(op, ast.Lt) else ast.Gt()
            if _is_zero(left):
                left, right = right, left
                op = {ast.Gt: ast.Lt(), ast.Lt: ast.Gt(), ast.GtE: ast.LtE(), ast.LtE: ast.GtE()}.get(type(op), op)
            if not _is_zero(right):
                return None
            kind = self.rank_kind(left)
            if kind is None:
                return None
            if isinstance(op, (ast.Eq, ast.Is, ast.LtE)):
                return kind, True
            if isinstance(op, (ast.NotEq, ast.IsNot, ast.Gt)):
                return kind, False
            return None
        if isinstance(expr, (ast.Name, ast.Attribute)):
            held = self._held(self.held_test, expr) if follow_names else None
            if held:
                return held
            if isinstance(expr, ast.Name) and (given := self._param_fact(self.facts.param_tests, expr)):
                return given  # `def parse_args(verbose): if verbose: print(...)`, called `parse_args(rank == 0)`
            if isinstance(expr, ast.Attribute) and follow_names and (stored := self.facts.attr_tests.get(expr.attr)):
                return stored  # `args.should_save = ... and is_master(args)` in main.py, read in train.py
            name = last(dotted(expr)).lower()
            if name in MAIN_NAMES or name.replace("local_", "") in MAIN_NAMES:
                return ("local" if "local" in name else "global"), True
        if isinstance(expr, ast.Call) and last(self.callee(expr)) in MAIN_CALLS:
            return "global", True
        if isinstance(expr, ast.Call) and last(self.callee(expr)) in self.facts.rank_tests:
            return self.facts.rank_tests[last(self.callee(expr))]
        kind = self.rank_kind(expr)
        if kind == "device" and isinstance(expr, (ast.Name, ast.Attribute)) and not self._held(self.held_kind, expr):
            return None  # `if cfg.mode.gpu:` is an on/off option far more often than `gpu != 0`
        return (kind, False) if kind else None  # `if rank:` holds on every rank but 0

    def _unknown_zero(self, expr: ast.AST) -> bool:
        """`node_id == 0`: a value lint cannot name tested against 0 (beside `local_rank == 0`, a node index)."""
        return (
            isinstance(expr, ast.Compare)
            and len(expr.ops) == 1
            and isinstance(expr.ops[0], ast.Eq)
            and _is_zero(expr.comparators[0])
            and isinstance(expr.left, (ast.Name, ast.Attribute))
            and self.rank_test(expr, follow_names=False) is None
        )

    def _parameter(self, expr: ast.AST) -> bool:
        """`expr` is a bare name its enclosing function takes as a parameter."""
        func = self.enclosing_function(expr)
        return (
            isinstance(expr, ast.Name)
            and func is not None
            and any(a.arg == expr.id for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs])
        )

    def _group_switch(self, expr: ast.AST) -> bool:
        """A switch that holds when a process group runs: named for it (`use_ddp`, `args.distributed`,
        `is_distributed()`; DIST_FLAG_NAMES, a project's own in pyproject's distributed-flags), or the one test every
        init_process_group of the file sits under (`if opt.multiprocessing_distributed: dist.init_process_group()`:
        not `args.multiprocessing_distributed` where `if args.distributed:` is the one that makes the group)."""
        expr = said_plainly(expr)
        named = expr.func if isinstance(expr, ast.Call) and not expr.args else expr
        keys = []
        while isinstance(named, ast.Subscript) and (key := const_str(named.slice)) is not None:
            keys.append(key.lower())  # `config["DDP"]["flag"]`: a section of a config file named for it
            named = named.value
        if keys:
            return any(key in DIST_FLAG_NAMES for key in keys)
        if not isinstance(named, (ast.Name, ast.Attribute)):
            return False
        if isinstance(named, ast.Name) and named.id == "dist" and "dist" not in self.aliases:
            return True  # `def get_loaders(..., dist): if dist:`, a flag where torch.distributed is not imported so
        return self._named_switch(named) or dotted(named) in self._switch_copies

    def _named_switch(self, named: ast.AST) -> bool:
        return last(dotted(named)).lower() in DIST_FLAG_NAMES or dotted(named) in self._group_making_tests

    @functools.cached_property
    def _switch_copies(self) -> set[str]:
        """Names every assignment of this file gives a switch's value (pytorch/examples' `args.multiprocessing_
        distributed = args.distributed`): the same switch under another name."""
        values: dict[str, list[ast.AST]] = {}
        for node in self.nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                values.setdefault(dotted(node.targets[0]), []).append(node.value)
        return {
            name
            for name, given in values.items()
            if name and all(isinstance(v, (ast.Name, ast.Attribute)) and self._named_switch(v) for v in given)
        }

    @functools.cached_property
    def _single_process_flags(self) -> set[str]:
        """Options a distributed run refuses: `assert not NAME` in the block that makes the process group (YOLOv5's
        `if LOCAL_RANK != -1: assert not opt.evolve, "... not compatible with DDP"; dist.init_process_group(...)`).
        Where NAME holds, no group runs."""
        found = set()
        for node in self.nodes:  # the asserts first: few files have one, and each block is then read once
            if not (
                isinstance(node, ast.Assert)
                and isinstance(node.test, ast.UnaryOp)
                and isinstance(node.test.op, ast.Not)
                and isinstance(node.test.operand, (ast.Name, ast.Attribute))
            ):
                continue
            block = block_of(self.parent.get(node), node, ("body", "orelse"))
            if block and self._makes_group(block, spawning=False):
                found.add(dotted(node.test.operand))
        return found

    @functools.cached_property
    def _group_making_tests(self) -> set[str]:
        """The names `if NAME:` tests around every init_process_group call of this file (in the body, not the else;
        a call inside a function also under the tests around every call of that function here); in a file with
        none, around every call of a project function that makes the group (`if args.dist: init_dist(...)`,
        init_dist in another module)."""
        inits = [c for c in self.calls if self.callee_last(c) == "init_process_group"] or [
            c for c in self.calls if self.callee_last(c) in self.facts.group_makers
        ]
        found: set[str] | None = None
        for init in inits:
            found = self._switches_around(init) if found is None else found & self._switches_around(init)
        return found or set()

    def _switches_around(self, node: ast.AST, depth: int = 0) -> set[str]:
        """The names `if NAME:` tests around `node` (in the body), and, inside a function this file calls, around
        every one of its calls."""
        tests, child = set(), node
        for parent in self.ancestors(node):
            if (
                isinstance(parent, ast.If)
                and child in parent.body
                and isinstance(said_plainly(parent.test), (ast.Name, ast.Attribute))
            ):
                tests.add(dotted(said_plainly(parent.test)))
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                sites = self.call_sites(parent) if depth < 3 else []
                if sites:
                    tests |= set.intersection(*(self._switches_around(s, depth + 1) for s in sites))
                break
            child = parent
        return tests

    def _rank_test_by_logic(self, expr: ast.AST) -> tuple[str, bool] | None:
        """A test of rank tests and process-group switches joined in any boolean form, read by its value: on rank 0
        and on another rank of a process group. False on every other rank: it holds on rank 0 only (or in the one
        process no launcher started); False on rank 0 and True on the others: every rank but 0."""
        kinds: set[str] = set()
        on_zero, on_other = self._truth(expr, True, kinds), self._truth(expr, False, kinds)
        kind = next((k for k in ("local", "device", "global") if k in kinds), "single")
        if on_other is False:
            return kind, True
        if on_zero is False and on_other is True:
            return kind, False
        return None

    def _truth(self, expr: ast.AST, zero: bool, kinds: set[str]) -> bool | None:
        """`expr`'s value on rank 0 (zero) or on another rank, in a process group: True, False, or None (not known:
        a value the rank does not decide). Rank tests and group switches are the atoms (Kleene's three values)."""
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            value = self._truth(expr.operand, zero, kinds)
            return None if value is None else not value
        if isinstance(expr, ast.BoolOp):
            values = [self._truth(v, zero, kinds) for v in expr.values]
            decisive = isinstance(expr.op, ast.Or)  # True decides an `or`, False an `and`
            if decisive in values:
                return decisive
            return (not decisive) if all(v is (not decisive) for v in values) else None
        if self._group_switch(expr) or self._launcher_test(expr):
            return True  # a process group runs (`use_ddp`, `"RANK" in os.environ`)
        if self._launcher_test(expr) is False:
            return False
        test = self.rank_test(expr)
        if test is None:
            return None
        kinds.add(test[0])
        return zero if test[1] else not zero

    def _no_rank(self, expr: ast.Compare) -> bool | None:
        """True for `rank is None`, `local_rank == -1`, `rank < 0` (no launcher: one process), False for their
        negations; None when `expr` is no such test. A device index is not a rank here."""
        op, right = expr.ops[0], expr.comparators[0]
        missing = (
            _is_none(right)
            or isinstance(right, ast.UnaryOp)
            and isinstance(right.op, ast.USub)
            and isinstance(right.operand, ast.Constant)
            and right.operand.value == 1
        )
        if not (missing or _is_zero(right) and isinstance(op, (ast.Lt, ast.GtE))) or self.rank_kind(expr.left) not in (
            "global",
            "local",
        ):
            return None  # (`gpu is None` is no chosen device, every GPU of the machine, not no launcher)
        if missing and isinstance(op, (ast.Is, ast.Eq)):
            return True
        if missing and isinstance(op, (ast.IsNot, ast.NotEq)):
            return False
        if _is_zero(right) and isinstance(op, (ast.Lt, ast.GtE)):
            return isinstance(op, ast.Lt)
        return None

    def module_constant(self, name: str) -> ast.AST | None:
        """The value of a module-level name assigned once and never rebound (no `global`, no exec() rewriting the
        module's names, as nanoGPT's configurator does)."""
        if self.calls_by_name.get("exec") or self.calls_by_name.get("globals"):
            return None
        stores, declared = self._name_stores
        values = stores.get(name, [])
        if name in declared:
            return None
        if len(values) == 1 and isinstance(values[0], ast.Assign) and self.parent.get(values[0]) is self.tree:
            return values[0].value
        return None

    @functools.cached_property
    def _name_stores(self) -> tuple[dict[str, list[ast.stmt]], set[str]]:
        """Each plain name -> the assignments (=, :, +=) anywhere in the file that store it; the names declared
        `global` somewhere."""
        stores: dict[str, list[ast.stmt]] = {}
        declared: set[str] = set()
        for n in self.nodes:
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Name) and n not in stores.setdefault(t.id, []):
                        stores[t.id].append(n)
            elif isinstance(n, ast.Global):
                declared.update(n.names)
        return stores, declared

    def _const_int(self, node: ast.AST, depth: int = 0) -> int | None:
        """An int the code fixes: a literal, a module constant (`OFFSET = 1`), or a sum or product of those."""
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, int) and not isinstance(node.value, bool) else None
        if isinstance(node, ast.Name) and depth < 3:
            value = self.module_constant(node.id)
            return self._const_int(value, depth + 1) if value is not None else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            left, right = self._const_int(node.left, depth + 1), self._const_int(node.right, depth + 1)
            if left is not None and right is not None:
                return (
                    left + right
                    if isinstance(node.op, ast.Add)
                    else left - right
                    if isinstance(node.op, ast.Sub)
                    else left * right
                )
        return None

    def _other_rank(self, node: ast.AST) -> bool:
        """A rank other than 0: a positive int (a literal or a module constant, `OFFSET + 1`), or an expression of
        the world size (`world - 1`)."""
        if (value := self._const_int(node)) is not None:
            return value > 0
        return any(
            isinstance(n, (ast.Name, ast.Attribute))
            and "world" in last(dotted(n)).lower()
            or isinstance(n, ast.Call)
            and last(self.callee(n)) == "get_world_size"
            for n in ast.walk(node)
        )

    def _starts_workers(self, block: ast.If) -> bool:
        """The main block calls a project function that starts the workers (utils.run(worker, n) whose body is
        mp.spawn(run_fn, ...), or `main()` that calls it): the block is their parent, one process."""
        return any(self.callee_last(c) in self.facts.spawners for c in calls_in(block.body))

    def guards(self, node: ast.AST) -> list[Guard]:
        """Every rank test that decides whether `node` runs: enclosing ifs and earlier `if not main: return`;
        in a script that starts its own workers (mp.spawn), its `if __name__ == "__main__":` block runs once."""
        found = []
        child, parent = node, self.parent.get(node)
        while parent is not None:
            if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                test = self.rank_test(parent.test)
                body = parent.body if isinstance(parent.body, list) else [parent.body]
                orelse = parent.orelse if isinstance(parent.orelse, list) else [parent.orelse]
                if test:
                    in_body = child in body
                    found.append(
                        Guard(test[0], test[1] if in_body else not test[1], parent, orelse if in_body else body)
                    )
                elif is_main_block(parent) and child in body and (self.spawns or self._starts_workers(parent)):
                    found.append(Guard("single", True, parent))
                elif child in (body if _negated(parent.test) else orelse) and self._group_switch(
                    _unnegated(parent.test)
                ):
                    # the switch that makes the process group, off: `if use_ddp: ... else: <here>` (`if not
                    # args.distributed: <here>`), or a helper told by its caller (`def get_loader(ds, distributed):`)
                    # is the one process that runs without a group
                    found.append(Guard("single", True, parent))
                elif (launched := self._launcher_test(parent.test)) is not None and child in (
                    orelse if launched else body
                ):
                    found.append(Guard("single", True, parent))  # no launcher: one process
                elif (
                    isinstance(parent, ast.If)
                    and parent.orelse
                    and self._ddp_path(orelse if child in body else body)
                    and not self._ddp_path(body if child in body else orelse)
                ):
                    # the other branch makes the group or wraps the model in DDP: this one is the one-process path
                    # (`if single_gpu: ... else: main()`, `if not torch.cuda.is_available(): print(...) elif
                    # args.distributed: model = DDP(model)`)
                    found.append(Guard("single", True, parent))
            block = block_of(parent, child)
            for stmt in block[: block.index(child)] if block else []:
                if isinstance(stmt, ast.If) and not stmt.orelse and body_exits(stmt.body):
                    test = self.rank_test(stmt.test)
                    if test:
                        found.append(Guard(test[0], not test[1], stmt))
                elif isinstance(stmt, ast.Assert) and self._launcher_test(stmt.test) is False:
                    # `assert opt.local_rank == -1, "DDP mode not implemented for --evolve"`: one process
                    found.append(Guard("single", True, stmt))
            child, parent = parent, self.parent.get(parent)
        return found

    def after_rank0_barrier(self, node: ast.AST) -> bool:
        """Between `if rank not in [-1, 0]: dist.barrier()` and a later `if rank == 0: dist.barrier()` of one block
        (the older transformers examples' way of letting rank 0 download and cache first): rank 0 runs it, and the
        others only once rank 0 has finished and released them, not every rank at once."""
        child = node
        for parent in self.ancestors(node):
            block = block_of(parent, child)
            if block:
                at = block.index(child)
                if any(self._barrier_under(s, False) for s in block[:at]) and any(
                    self._barrier_under(s, True) for s in block[at + 1 :]
                ):
                    return True
            child = parent
        return False

    def _barrier_under(self, stmt: ast.stmt, rank0: bool) -> bool:
        """`if <rank test holding on rank 0 (rank0) or on the others>: ... dist.barrier()`."""
        test = self.rank_test(stmt.test) if isinstance(stmt, ast.If) and not stmt.orelse else None
        return bool(test) and test[1] == rank0 and any(self.callee_last(c) == "barrier" for c in calls_in(stmt.body))

    def _ddp_path(self, block: list[ast.AST]) -> bool:
        return self._makes_group(block) or any(
            isinstance(c, ast.Call) and self.callee_last(c) in DDP_NAMES for c in calls_in(block)
        )

    def _makes_group(self, block: list[ast.AST], spawning: bool = True) -> bool:
        """The statements call init_process_group (or a project function that does), or (spawning) start workers
        that may."""
        key = (id(block[0]) if block else 0, spawning)
        cache = self.__dict__.setdefault("_group_blocks", {})
        if key not in cache:
            makers = {"init_process_group", *self.facts.group_makers}
            cache[key] = any(
                isinstance(c, ast.Call)
                and (last(self.callee(c)) in makers or spawning and self.callee(c) in SPAWN_CALLS)
                for c in calls_in(block)
            )
        return cache[key]

    def _launcher_test(self, test: ast.AST, depth: int = 0) -> bool | None:
        """True for `"RANK" in os.environ` (and `... and ...` of it): the test holds under a launcher; False for
        `"RANK" not in os.environ`; None for anything else."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            found = [self._launcher_test(v, depth) for v in test.values]
            return True if True in found else None
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and const_str(test.left) in RANK_VARS
            and self.resolve(dotted(test.comparators[0])) == "os.environ"
        ):
            return {ast.In: True, ast.NotIn: False}.get(type(test.ops[0]))
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._launcher_test(test.operand, depth)
            return None if inner is None else not inner
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
            and isinstance(test.comparators[0], ast.Constant)
            and isinstance(test.comparators[0].value, bool)
        ):
            # `args.distributed is not True`, `ddp == False`: the flag's test, said the long way
            inner = self._launcher_test(test.left, depth)
            same = isinstance(test.ops[0], (ast.Is, ast.Eq)) == test.comparators[0].value
            return None if inner is None else inner == same
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
            and _is_minus_one(test.comparators[0])
            and self.rank_kind(test.left) is not None
        ):
            return isinstance(test.ops[0], ast.NotEq)  # `opt.local_rank == -1`: the rank's value without a launcher
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and self._env_read(test.left):
            # int(os.environ.get("RANK", -1)) != -1, os.environ.get("RANK") is not None, WORLD_SIZE > 1
            op, right = test.ops[0], test.comparators[0]
            missing = (
                isinstance(right, ast.Constant)
                and (right.value is None or right.value == -1)
                or (isinstance(right, ast.UnaryOp) and isinstance(right.op, ast.USub))
            )
            if missing and isinstance(op, (ast.NotEq, ast.IsNot)):
                return True
            if missing and isinstance(op, (ast.Eq, ast.Is)):
                return False
            if isinstance(op, ast.Gt) and isinstance(right, ast.Constant) and right.value == 1:
                return True
            return None
        if isinstance(test, (ast.Name, ast.Attribute)) and dotted(test) in self._single_process_flags:
            return False  # `assert not opt.evolve` where the group is made: `if opt.evolve:` is a one-process path
        if isinstance(test, ast.Name) and depth < 2:  # ddp = int(os.environ.get("RANK", -1)) != -1; if ddp: ...
            values = self._built(test, self.enclosing_function(test))
            if len(values) == 1 and (by_value := self._launcher_test(values[0], depth + 1)) is not None:
                return by_value
        if isinstance(test, (ast.Name, ast.Attribute)) and depth < 2 and self._group_flag(test):
            return True
        if (
            isinstance(test, ast.Call)
            and last(self.callee(test)) == "is_initialized"
            and "distributed" in self.callee(test)
        ):
            return True  # dist.is_initialized(): a process group exists
        if depth < 2 and (flag := _flag_call(test)) is not None:
            # `def is_distributed(): return dist.is_initialized()`, then `if is_distributed():` - read what it returns
            returned = _only_return(self.functions.get(dotted(flag)))
            if returned is not None:
                return self._launcher_test(returned, depth + 1)
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Gt)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == 1
            and self._world_count(test.left)
        ):
            return True  # `get_world_size() > 1`, `world_size > 1`: several processes (its else: one)
        if (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
            and (chosen := self._group_option(test)) is not None
        ):
            return chosen == isinstance(test.ops[0], ast.Eq)
        return None

    def _world_count(self, expr: ast.AST, depth: int = 0) -> bool:
        """The number of processes: get_world_size(), a `world_size` name, WORLD_SIZE from the environment, or a
        name assigned once from one of those (`num_gpus = int(os.environ["WORLD_SIZE"]) if ... else 1`)."""
        if isinstance(expr, ast.Call) and last(self.callee(expr)) == "get_world_size":
            return True
        if isinstance(expr, (ast.Name, ast.Attribute)) and last(dotted(expr)).lower() in WORLD_NAMES:
            return True
        if any(isinstance(n, ast.Constant) and n.value == "WORLD_SIZE" for n in ast.walk(expr)):
            return True
        if isinstance(expr, ast.Name) and depth < 2:
            values = self._built(expr, self.enclosing_function(expr) or self.tree)
            return len(values) == 1 and self._world_count(values[0], depth + 1)
        return False

    def _group_option(self, test: ast.Compare) -> bool | None:
        """`args.dist == "OFF"` where another `if args.dist == "ON":` makes the process group: whether the value
        compared with is the one that makes it (True), another one (False), or neither is known (None)."""
        option, value = dotted(test.left), test.comparators[0]
        if not option or not isinstance(value, ast.Constant):
            return None
        makers = self._option_makers.get(option, set())
        if len(makers) != 1:
            return None
        return value.value in makers

    @functools.cached_property
    def _option_makers(self) -> dict[str, set]:
        """option -> the values whose `if option == value:` makes the process group."""
        found: dict[str, set] = {}
        for n in self.nodes:
            if (
                isinstance(n, ast.If)
                and isinstance(n.test, ast.Compare)
                and len(n.test.ops) == 1
                and isinstance(n.test.ops[0], ast.Eq)
                and isinstance(n.test.comparators[0], ast.Constant)
                and self._makes_group(n.body, spawning=False)
            ):
                found.setdefault(dotted(n.test.left), set()).add(n.test.comparators[0].value)
        return found

    def _group_flag(self, flag: ast.Name | ast.Attribute) -> bool:
        """A switch that says whether this process is in a process group: set False only as a constant, and True
        either from a launcher test (`self.dist = int(os.environ["WORLD_SIZE"]) > 1`) or as a constant in a function
        that calls init_process_group (`args.distributed = True; dist.init_process_group(...)`, the other branch
        `args.distributed = False; return`). Its `else` runs without a group: one process."""
        key = self._scope_key(flag)
        if key is None:
            return False
        cache = self.__dict__.setdefault("_group_flags", {})
        if key not in cache:
            cache[key] = self._group_flag_uncached(key)
        return cache[key]

    def _group_flag_uncached(self, key: tuple) -> bool:
        ons = offs = 0
        for node in self.nodes:
            if (
                not isinstance(node, ast.Assign)
                or len(node.targets) != 1
                or (k := self._scope_key(node.targets[0])) is None
                or not (k == key or None in (k[0], key[0]) and k[1] == key[1])
            ):
                continue
            value = node.value
            if isinstance(value, ast.Constant) and value.value in (False, None):
                offs += 1
            elif (
                isinstance(value, ast.Constant)
                and value.value is True
                and (func := self.enclosing_function(node))
                and self._makes_group(func.body, spawning=False)
            ):
                ons += 1
            elif self._launcher_test(value, 2):
                ons += 1
            else:
                return False  # set from something else too (an option): not decided by the launcher
        return ons > 0 and offs > 0

    def _env_read(self, node: ast.AST) -> bool:
        """os.environ.get("RANK", ...) / os.getenv("WORLD_SIZE") / int(...) of it: a launcher's variable."""
        if isinstance(node, ast.Call) and last(self.callee(node)) == "int" and node.args:
            return self._env_read(node.args[0])
        return (
            isinstance(node, ast.Call)
            and self.callee(node) in ("os.environ.get", "os.getenv")
            and bool(node.args)
            and const_str(node.args[0]) in RANK_VARS
        )

    def ancestors(self, node: ast.AST, stop: ast.AST | None = None):
        """The nodes that hold `node`, innermost first, up to (not including) `stop`."""
        parent = self.parent.get(node)
        while parent is not None and parent is not stop:
            yield parent
            parent = self.parent.get(parent)

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | None:
        parent = self.parent.get(node)
        while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parent = self.parent.get(parent)
        return parent

    def _built(self, name: ast.AST, scope: ast.AST | None = None) -> list[ast.AST]:
        """What `name` is assigned, in `scope` (else anywhere in the file): `loader = DataLoader(...)`, `a = b = x`,
        `train_loader, val_loader = DataLoader(...), DataLoader(...)`; for `loaders[i]`, what the list is made of
        (`loaders = [a, b]`, `loaders.append(a)`), each name followed once more."""
        if isinstance(name, ast.Subscript) and (key := dotted(name.value)):
            held = [e for v in self._built(name.value, scope) for e in (v.elts if isinstance(v, ast.List) else [v])]
            held += [
                a for c in self.calls_by_name.get("append", []) if dotted(c.func) == f"{key}.append" for a in c.args[:1]
            ]
            return [b for e in held for b in (isinstance(e, ast.Name) and self._built(e, scope) or [e])]
        key = dotted(name) if isinstance(name, (ast.Name, ast.Attribute)) else ""
        return list(self._assigned(scope).get(key, ())) if key else []

    def _assigned(self, scope: ast.AST | None) -> dict[str, list[ast.AST]]:
        """Each name (or dotted attribute) assigned in `scope` (else anywhere in the file) -> its values, in the
        order a walk meets them: read once per scope (a lint asks it thousands of times)."""
        held = self.__dict__.setdefault("_assigned_by_scope", {})
        if scope not in held:
            table: dict[str, list[ast.AST]] = {}
            for n in walk_same_function(scope.body) if scope else self.nodes:
                if isinstance(n, ast.Assign):
                    for target in n.targets:
                        pairs = (
                            zip(target.elts, n.value.elts)
                            if isinstance(target, ast.Tuple) and isinstance(n.value, ast.Tuple)
                            else [(target, n.value)]
                        )
                        for t, v in pairs:
                            table.setdefault(dotted(t), []).append(v)
            held[scope] = table
        return held[scope]

    def call_sites(self, func: ast.AST) -> list[ast.Call]:
        """Calls of this file's function or method `func` from outside it (by name: `f(...)`, `self.f(...)`, or a
        command-line runner's `fire.Fire(f)`); a function of the module is called by its bare name (`model.train()`
        is no call of a script's `def train()`)."""
        owner = self.parent.get(func)
        method = isinstance(owner, ast.ClassDef)
        # a class's __init__ is called by the class's name, and by a subclass's super().__init__()
        named = [*self.calls_by_name.get(owner.name, [])] if method and func.name == "__init__" else []
        return [
            c
            for c in named + self.calls_by_name.get(func.name, [])
            if self.enclosing_function(c) is not func
            and (method or isinstance(c.func, ast.Name) or _hands_a_name(c) and c.args[0].id == func.name)
            and (not method or method_reached(self, c, owner, self.classes, self.built))
        ]

    @functools.cached_property
    def built(self) -> set[str]:
        """The names of this file's classes it constructs (`Trainer(...)`, `trainers.Trainer(...)`)."""
        return {self.callee_last(c) for c in self.calls} & set(self.classes)

    @functools.cached_property
    def classes(self) -> dict[str, ast.ClassDef]:
        """This file's classes by name (a name defined twice: neither)."""
        found: dict = {}
        for node in self.nodes:
            if isinstance(node, ast.ClassDef):
                found[node.name] = None if node.name in found else node
        return {name: cls for name, cls in found.items() if cls is not None}

    def runs_on_rank0_only(self, node: ast.AST, kinds: frozenset = frozenset({"global"}), depth: int = 0) -> bool:
        """Guarded by a rank-0 test of one of these kinds, directly or because every call of its function is (or
        in a branch that never runs), or its function is decorated to run on rank 0 only (`@master_only`)."""
        if any(g.kind in kinds and g.rank0 for g in self.guards(node)) or self.never_runs(node):
            return True
        func = self.enclosing_function(node)
        if func is not None and "global" in kinds and self.rank0_decorated(func):
            return True
        if func is None or depth > 4 or func.name in self.passed:
            return False
        every = self.call_sites(func)
        sites = [c for c in every if self.branch_open(node, func, c)]
        if every and not sites:
            return True  # no call takes this branch: it runs nowhere
        return bool(sites) and all(self.runs_on_rank0_only(c, kinds, depth + 1) for c in sites)

    def rank0_decorated(self, func: ast.AST) -> bool:
        return any(
            last(dotted(d.func if isinstance(d, ast.Call) else d)) in RANK0_DECORATORS | self.facts.rank0_decorators
            for d in getattr(func, "decorator_list", ())
        )

    def rank0_decorators(self) -> set[str]:
        """This file's decorators that call the function they wrap on rank 0 only (`def master_only(func): def
        wrapper(*a, **k): if dist.get_rank() == 0: return func(*a, **k)`)."""
        found = set()
        for deco in (n for n in self.nodes if isinstance(n, ast.FunctionDef) and len(n.args.args) == 1):
            wrapped = deco.args.args[0].arg
            calls = [
                c
                for inner in deco.body
                if isinstance(inner, ast.FunctionDef)
                for c in ast.walk(inner)
                if isinstance(c, ast.Call) and dotted(c.func) == wrapped
            ]
            if calls and all(any(g.kind == "global" and g.rank0 for g in self.guards(c)) for c in calls):
                found.add(deco.name)
        return found

    def never_runs(self, node: ast.AST, stop: ast.AST | None = None) -> bool:
        """`node` sits (below `stop`) in a branch of an attribute whose truth the project fixes (Facts.attr_truths)
        that never opens: under `if not self.multi_gpus:` where every Trainer is built with multi_gpus=True, or under
        `if x and self.stop_training:` where nothing sets it True; or, in a project that trains on GPUs only, a branch
        taken without one (`else:` of `if torch.cuda.is_available():`)."""
        truths, gpus = self.facts.attr_truths, self.facts.gpu_training
        if not truths and not gpus:
            return False

        def truth(test: ast.AST) -> bool | None:
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                inner = truth(test.operand)
                return None if inner is None else not inner
            if (
                isinstance(test, ast.BoolOp)
                and isinstance(test.op, ast.And)
                and any(truth(v) is False for v in test.values)
            ):
                return False
            if gpus and (on_gpus := self._on_gpus(test)) is not None:
                return on_gpus
            return truths.get(test.attr) if isinstance(test, ast.Attribute) else None

        child = node
        for parent in self.ancestors(node, stop=stop):
            if isinstance(parent, ast.If) and child is not parent.test:
                known = truth(parent.test)
                if known is not None and known != (child in parent.body):
                    return True
            child = parent
        return False

    def _on_gpus(self, test: ast.AST) -> bool | None:
        """`test`'s value where CUDA is available: `torch.cuda.is_available()` (True), or a backend chosen by it
        compared with a name (`backend = "nccl" if torch.cuda.is_available() else "gloo"`, `if backend == "nccl":`);
        None for any other test."""
        if isinstance(test, ast.Call) and self.callee(test) == "torch.cuda.is_available":
            return True
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
            return None
        named, chosen = test.left, const_str(test.comparators[0])
        value = self._reaching_value(named) if isinstance(named, ast.Name) else None
        if chosen is None or not isinstance(value, ast.IfExp) or self._on_gpus(value.test) is not True:
            return None
        backend = const_str(value.body)
        return None if backend is None else (backend == chosen) == isinstance(test.ops[0], ast.Eq)

    def branch_open(self, node: ast.AST, func: ast.AST, site: ast.Call) -> bool:
        """`node` can run when `site` calls `func`: no enclosing `if flag:` or `if mode == "dev":` (or its else) on a
        parameter that this call fixes to a constant of the other truth (`save(..., save_cur=True)` never reaches
        the `else:` of `if save_cur:`, `evaluate(..., mode="test")` the `if mode == "dev":`, `checkpoint(cfg)` with
        `model=None` the `if model is not None:`; a call passing nothing takes the default)."""
        names = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
        child, parent = node, self.parent.get(node)
        while parent is not None and parent is not func:
            if isinstance(parent, ast.If) and child is not parent.test:
                test, wanted = parent.test, child in parent.body
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                    test, wanted = test.operand, not wanted
                expected, by_identity = None, False
                if (
                    isinstance(test, ast.Compare)
                    and len(test.ops) == 1
                    and isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot))
                    and isinstance(test.comparators[0], ast.Constant)
                ):
                    # `if mode != "dev":` holds off "dev"; `if model is not None:` off a call passing no model
                    wanted = wanted == isinstance(test.ops[0], (ast.Eq, ast.Is))
                    test, expected = test.left, test.comparators[0].value
                    by_identity = expected is None
                if isinstance(test, ast.Name) and test.id in names:
                    value = passed(site, func, test.id)
                    if isinstance(value, ast.Constant):
                        if by_identity:
                            truth = value.value is None
                        else:
                            truth = bool(value.value) if expected is None else value.value == expected
                        if truth != wanted:
                            return False
            child, parent = parent, self.parent.get(parent)
        return True


def _default_of(func: ast.AST, test: ast.AST) -> bool | None:
    """The truth of `test` when it is a parameter of `func` left at its constant default; None otherwise."""
    if not isinstance(test, ast.Name) or not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    default = default_of(func, test.id)
    return bool(default.value) if isinstance(default, ast.Constant) else None


def _reset_off_zero(stores: list[tuple[int, bool, tuple | None]]) -> tuple | None:
    """The rank-0 test a name stands for when every rank gives it a value and every rank but 0 then sets it to None
    (`stores`: line, None stored, the "every rank but 0" test it is stored under)."""
    resets = [(line, test) for line, none, test in stores if none]
    tests = {test for _, test in resets}
    if not resets or len(tests) != 1 or None in tests:
        return None
    first = min(line for line, _ in resets)
    return tests.pop() if all(line < first for line, none, _ in stores if not none) else None


# torch.nn.Module's own methods: `self.model.train()` on a model is no call of a trainer class's `def train(self)`
MODULE_METHODS = {"train", "eval", "forward", "to", "cuda", "cpu", "state_dict", "load_state_dict", "parameters"}


def method_reached(reader: ScriptReader, call: ast.Call, owner: ast.ClassDef, classes: dict, built: set) -> bool:
    """Whether `call` (`x.m(...)`) can run `owner`'s method m, as Python dispatches it, where what `x` is can be
    seen (`classes`: the project's classes by name, `built`: the names of those it constructs): on `self`, the m
    of each class built that is the calling class or a subclass of it (or, none built, what the calling class and
    its subclasses may run); on an instance built from a class (`Trainer(cfg).m()`, `t = Trainer(cfg)`), that
    class's; on a torch module (called on data in that file, or the DDP wrapper), nn.Module's own train()/eval().
    Any other receiver may be anything: it may run it."""
    if not isinstance(call.func, ast.Attribute):
        return True
    name, receiver = call.func.attr, call.func.value
    if name in MODULE_METHODS and not any("Module" in dotted(b) for b in owner.bases):
        held = dotted(receiver)
        if held and (held in reader.ddp_names or any(dotted(c.func) == held for c in reader.calls)):
            return False
    if isinstance(receiver, ast.Name) and receiver.id == "self":
        caller = next((p for p in reader.ancestors(call) if isinstance(p, ast.ClassDef)), None)
        if caller is None or owner.name not in classes or caller.name not in classes:
            return True
        family = [c for c in classes.values() if c is caller or subclass_of(c, caller.name, classes)]
        if made := [c for c in family if c.name in built]:
            return any(_defines(c, name, classes) is owner for c in made)
        # self is the calling class or a subclass of it: owner's m runs when owner is below the caller (its
        # override, dispatched to) or when it is what the caller inherits for m
        return caller is owner or subclass_of(owner, caller.name, classes) or _defines(caller, name, classes) is owner
    built = receiver.func if isinstance(receiver, ast.Call) else None
    if isinstance(receiver, ast.Name):
        made = [
            n.value.func
            for n in reader.nodes
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and any(isinstance(t, ast.Name) and t.id == receiver.id for t in n.targets)
        ]
        built = made[0] if len(made) == 1 else None
    cls = classes.get(last(dotted(built))) if built is not None else None
    return cls is None or _defines(cls, name, classes) is owner


def subclass_of(cls: ast.ClassDef, base: str, classes: dict, depth: int = 0) -> bool:
    parents = [last(dotted(b)) for b in cls.bases]
    return depth < 8 and (
        base in parents or any(subclass_of(classes[p], base, classes, depth + 1) for p in parents if p in classes)
    )


def _defines(cls: ast.ClassDef, method: str, classes: dict, depth: int = 0) -> ast.ClassDef | None:
    """The class whose `method` an instance of `cls` runs (the first along its bases, depth first); None when
    none of the project's does."""
    if any(isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == method for f in cls.body):
        return cls
    for base in cls.bases:
        if depth < 8 and (parent := classes.get(last(dotted(base)))) is not None:
            if (found := _defines(parent, method, classes, depth + 1)) is not None:
                return found
    return None


def _negated(test: ast.AST) -> bool:
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)


def _unnegated(test: ast.AST) -> ast.AST:
    return test.operand if _negated(test) else test


def _is_minus_one(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 1
    ) or (isinstance(node, ast.Constant) and node.value == -1)


def _is_bool(node: ast.AST, value: bool) -> bool:
    return isinstance(node, ast.Constant) and node.value is value


def _only_return(func: ast.AST | None) -> ast.AST | None:
    """The value a function of no parameters returns when its body is that one `return` (after a docstring)."""
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) or func.args.args or func.args.posonlyargs:
        return None
    body = func.body[1:] if func.body and isinstance(func.body[0], ast.Expr) else func.body
    return body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None


def _flag_call(test: ast.AST) -> ast.AST | None:
    """The callee of a call of no argument (`is_distributed()`): a flag computed, tested as a flag is."""
    return test.func if isinstance(test, ast.Call) and not test.args and not test.keywords else None


def leading_text(node: ast.AST | None) -> str | None:
    """The constant text a string expression starts with, however it is formatted: a literal, an f-string,
    `"tcp://{}:{}".format(...)`, `"tcp://%s" % addr`, `"tcp://" + addr`."""
    if isinstance(node, ast.JoinedStr):
        return const_str(node.values[0]) if node.values else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return leading_text(node.func.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return leading_text(node.left)
    return const_str(node) if node is not None else None
