"""Static checks of a DDP training script (Python ast): the mistakes that make multi-GPU runs hang, crash, or train
on the wrong data without saying so. Each finding has a line, a rule id, a level, a message and a fix.

Errors break or hang a distributed run for certain; warnings are mistakes with a cost (wrong data, lost or
unloadable checkpoints, a script that runs on GPUs only). Checks are heuristics over names: a rank test is
`rank == 0`, `dist.get_rank() == 0`, `is_main`, `master_process`, ...; `local_rank == 0` is a different test.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from ddplab.errors import DdplabError

ERROR, WARNING = "error", "warning"

LAUNCHER_VARS = {"MASTER_ADDR", "MASTER_PORT"}
RANK_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}
SCHEDULER_PREFIXES = ("SLURM_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_", "MV2_COMM_WORLD_")  # ranks a scheduler sets
COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast", "broadcast_object_list",
    "barrier", "monitored_barrier", "reduce", "reduce_scatter", "reduce_scatter_tensor", "gather", "gather_object",
    "scatter", "scatter_object_list", "all_to_all", "all_to_all_single", "new_group",
}
GLOBAL_RANK_NAMES = {"rank", "global_rank", "world_rank", "ddp_rank", "my_rank", "process_rank", "rank_id"}
# a device index: the local rank, or the rank of a one-node job: a fine guard for printing, unclear for saving
DEVICE_INDEX_NAMES = {"gpu", "gpu_id", "gpu_idx", "device_id", "cuda_id", "local_gpu"}
MAIN_CALLS = {"is_main_process", "is_master", "is_rank_zero", "is_main"}  # `if is_main_process():` helpers
MAIN_NAMES = {"is_main", "is_master", "master_process", "is_main_process", "is_rank_zero", "is_global_zero",
              "main_process", "is_rank0", "is_chief"}
SEED_CALLS = {"manual_seed", "seed", "set_seed", "seed_everything", "manual_seed_all"}
RANDOM_TORCH = {"rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like", "randint_like"}
ANY_RANK0 = frozenset({"global", "local", "device", "single"})
SPAWN_CALLS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes", "multiprocessing.Process",
               "torch.multiprocessing.Process"}
BUFFER_LAYERS = re.compile(r"(Lazy)?BatchNorm[123]d|SyncBatchNorm|register_buffer")  # modules with buffers
DDP_NAMES = {"DistributedDataParallel", "DDP"}


@dataclass
class Finding:
    line: int
    rule: str
    level: str  # error | warning
    message: str
    fix: str
    also: list[int] = field(default_factory=list)  # further lines with the same mistake (unguarded-print)


@dataclass
class LintResult:
    script: str
    findings: list[Finding]
    errors: int = 0
    warnings: int = 0
    backend: str | None = None  # the backend init_process_group is given as a literal, if any
    backend_line: int | None = None
    ok: bool = True  # no error-level finding


def lint_file(path: str | Path) -> LintResult:
    path = Path(path)
    if not path.is_file():
        raise DdplabError(f"{path}: no such file: pass the path of a Python training script")
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise DdplabError(f"{path}: cannot read it ({e.strerror}): check its permissions") from None
    return lint_source(source, str(path))


def lint_source(source: str, script: str = "<script>") -> LintResult:
    try:
        tree = ast.parse(source, filename=script)
    except SyntaxError as e:
        raise DdplabError(f"{script}:{e.lineno}: not valid Python ({e.msg}): fix the syntax, then lint again") from None
    linter = _Linter(tree)
    linter.run()
    findings = sorted(linter.findings, key=lambda f: (f.line, f.rule))
    errors = sum(f.level == ERROR for f in findings)
    return LintResult(script=script, findings=findings, errors=errors, warnings=len(findings) - errors,
                      backend=linter.backend, backend_line=linter.backend_line, ok=errors == 0)


# ----------------------------------------------------------------------------------------------- ast helpers


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


def const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_zero(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in (0, "0") and not isinstance(node.value, bool)


def _is_main_block(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`"""
    test = getattr(node, "test", None)
    return isinstance(test, ast.Compare) and dotted(test.left) == "__name__" and \
        any(const_str(c) == "__main__" for c in test.comparators)


def _exits(body: list[ast.stmt]) -> bool:
    """The block always leaves: return / continue / break / raise / sys.exit()."""
    if not body:
        return False
    tail = body[-1]
    if isinstance(tail, (ast.Return, ast.Continue, ast.Break, ast.Raise)):
        return True
    return isinstance(tail, ast.Expr) and isinstance(tail.value, ast.Call) and last(dotted(tail.value.func)) in (
        "exit", "_exit")


# ----------------------------------------------------------------------------------------------- the checks


@dataclass
class _Guard:
    kind: str  # global | local | device | single (the parent of mp.spawn workers: one process)
    rank0: bool  # the guarded code runs on rank 0 only (True) or on every rank but 0 (False)
    node: ast.If | ast.IfExp
    other: list[ast.AST] = field(default_factory=list)  # the other branch: a collective there pairs with ours


class _Linter:
    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.findings: list[Finding] = []
        self.backend: str | None = None
        self.backend_line: int | None = None
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        self.aliases = self._imports()
        self.calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        self.functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        self.distributed = any(self.is_(c, "init_process_group") or self.callee_last(c) in DDP_NAMES
                               or self.resolve(dotted(c.func)).startswith("ddplab.dist.") for c in self.calls)
        self.sets_device = any(self.callee_last(c) == "set_device" for c in self.calls)
        # mp.spawn / start_processes: the script is its own launcher (sets MASTER_ADDR, runs the parent once)
        self.spawns = any(self.callee(c) in SPAWN_CALLS for c in self.calls)
        self._learn_assignments()
        self.ddp_names: dict[str, int] = {}  # `model = DDP(...)`: the wrapper's name -> line
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    self.callee_last(node.value) in DDP_NAMES:
                for target in node.targets:
                    self.ddp_names.setdefault(dotted(target), node.lineno)
        # `ddp_model.load_state_dict(...)`: the wrapper's own checkpoints (with 'module.') load back into it
        self.loaded_into = {dotted(c.func.value) for c in self.calls
                            if isinstance(c.func, ast.Attribute) and c.func.attr == "load_state_dict"}

    # --------------------------------------------------------------------------------------- names

    def _imports(self) -> dict[str, str]:
        aliases = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        return aliases

    def resolve(self, name: str) -> str:
        """`dist.all_reduce` -> `torch.distributed.all_reduce`, through the script's imports."""
        head, _, rest = name.partition(".")
        full = self.aliases.get(head.rstrip("()"))
        return f"{full}.{rest}" if full and rest else (full or name)

    def callee(self, call: ast.Call) -> str:
        return self.resolve(dotted(call.func))

    def callee_last(self, call: ast.Call) -> str:
        return last(self.callee(call))

    def is_(self, call: ast.Call, name: str) -> bool:
        return self.callee_last(call) == name

    def is_collective(self, call: ast.Call) -> bool:
        full = self.callee(call)
        return last(full) in COLLECTIVES and (full.startswith("torch.distributed.") or ".dist." in f".{full}"
                                              or full.startswith("dist."))

    def add(self, node: ast.AST, rule: str, level: str, message: str, fix: str, also: list[int] | None = None) -> None:
        line = getattr(node, "lineno", 0)
        if not any(f.line == line and f.rule == rule for f in self.findings):
            self.findings.append(Finding(line, rule, level, message, fix, also or []))

    # --------------------------------------------------------------------------------------- rank guards

    def _scope_key(self, node: ast.AST) -> tuple[ast.AST | None, str] | None:
        """Where a name's value is recorded: (function, name) for a plain name, (None, attr) for `self.attr`."""
        if isinstance(node, ast.Name):
            return self.enclosing_function(node), node.id
        if isinstance(node, ast.Attribute):
            return None, node.attr
        return None

    def _learn_assignments(self) -> None:
        """What each name holds, read from its assignments: a rank of some kind (`gpu_id = int(os.environ[
        'LOCAL_RANK'])`) or a stored rank test (`is_main = rank == 0`). Names assigned two different things are
        left to what their name says."""
        self.held_kind: dict = {}  # (scope, name) -> kind
        self.held_test: dict = {}  # (scope, name) -> (kind, rank0)
        self.rank_derived: dict = {}  # (scope, name) -> True: a value computed from the rank
        assigns = [n for n in ast.walk(self.tree) if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None]
        for _ in range(2):  # `rank = ...; is_main = rank == 0`: the second pass sees what the first learnt
            kinds: dict = {}
            tests: dict = {}
            derived: set = set()
            plain: set = set()  # assigned something else too: not always different per process
            for node in assigns:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if len(targets) != 1 or (key := self._scope_key(targets[0])) is None:
                    continue
                is_test = isinstance(node.value, (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Name, ast.Attribute)) \
                    and not self.rank_kind(node.value)
                if is_test and (test := self.rank_test(node.value)) is not None:
                    tests.setdefault(key, set()).add(test)
                elif (kind := self.rank_kind(node.value)) is not None:
                    kinds.setdefault(key, set()).add(kind)
                elif self._labels_rank(node.value):
                    derived.add(key)  # computed from the rank: different on every process
                else:
                    plain.add(key)
            self.held_kind = {k: v.pop() for k, v in kinds.items() if len(v) == 1}
            self.rank_derived = {k: True for k in derived - plain}
            self.held_test = {k: v.pop() for k, v in tests.items() if len(v) == 1}

    def _labels_rank(self, value: ast.AST) -> bool:
        """A label made from the rank: f"cuda:{local_rank}", torch.device("cuda", rank), "gpu{}".format(rank)
        (a loss computed on this rank's device is not one: only names, strings and devices count)."""
        if isinstance(value, ast.JoinedStr):
            return any(isinstance(v, ast.FormattedValue) and self.rank_kind(v.value) for v in value.values)
        if isinstance(value, ast.Subscript):  # devices[rank]
            return bool(self.rank_kind(value.slice))
        if isinstance(value, ast.Call) and last(self.callee(value)) in ("device", "format", "str"):
            return any(self.rank_kind(a) or self._labels_rank(a) for a in value.args)
        return False

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
            if name in ("get_rank", "rank"):
                return "global"
            if name in ("get_local_rank", "local_rank", "get_node_local_rank"):
                return "local"
            if name == "int" and expr.args:
                return self.rank_kind(expr.args[0])
            if name in ("get", "getenv") and expr.args:
                return {"RANK": "global", "LOCAL_RANK": "local"}.get(const_str(expr.args[0]) or "")
            return None
        if isinstance(expr, ast.Subscript):
            return {"RANK": "global", "LOCAL_RANK": "local"}.get(const_str(expr.slice) or "")
        if not isinstance(expr, (ast.Name, ast.Attribute)):
            return None
        held = self._held(self.held_kind, expr)
        if held:
            return held
        name = last(dotted(expr)).lower()
        if "local" in name and "rank" in name:
            return "local"
        if name in GLOBAL_RANK_NAMES:
            return "global"
        return "device" if name in DEVICE_INDEX_NAMES else None

    def rank_test(self, expr: ast.AST, follow_names: bool = True) -> tuple[str, bool] | None:
        """(kind, rank0) when `expr` tests the rank: rank0 is True when the test holds on rank 0 only."""
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            inner = self.rank_test(expr.operand, follow_names)
            return (inner[0], not inner[1]) if inner else None
        if isinstance(expr, ast.BoolOp):
            for value in expr.values:
                inner = self.rank_test(value, follow_names)
                # `rank == 0 and x` runs on rank 0 only; `rank != 0 or x` may run anywhere but rank 0.
                if inner and inner[1] == isinstance(expr.op, ast.And):
                    return inner
            return None
        if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
            left, op, right = expr.left, expr.ops[0], expr.comparators[0]
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
            name = last(dotted(expr)).lower()
            if name in MAIN_NAMES or name.replace("local_", "") in MAIN_NAMES:
                return ("local" if "local" in name else "global"), True
        if isinstance(expr, ast.Call) and last(self.callee(expr)) in MAIN_CALLS:
            return "global", True
        kind = self.rank_kind(expr)
        return (kind, False) if kind else None  # `if rank:` holds on every rank but 0

    def guards(self, node: ast.AST) -> list[_Guard]:
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
                    found.append(_Guard(test[0], test[1] if in_body else not test[1], parent,
                                        orelse if in_body else body))
                elif self.spawns and _is_main_block(parent) and child in body:
                    found.append(_Guard("single", True, parent))
                elif (launched := self._launcher_test(parent.test)) is not None and \
                        child in (orelse if launched else body):
                    found.append(_Guard("single", True, parent))  # no launcher: one process
            for name in ("body", "orelse", "finalbody"):
                block = getattr(parent, name, None)
                if isinstance(block, list) and child in block:
                    for stmt in block[: block.index(child)]:
                        if isinstance(stmt, ast.If) and not stmt.orelse and _exits(stmt.body):
                            test = self.rank_test(stmt.test)
                            if test:
                                found.append(_Guard(test[0], not test[1], stmt))
            child, parent = parent, self.parent.get(parent)
        return found

    def _launcher_test(self, test: ast.AST) -> bool | None:
        """True for `"RANK" in os.environ` (and `... and ...` of it): the test holds under a launcher; False for
        `"RANK" not in os.environ`; None for anything else."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            found = [self._launcher_test(v) for v in test.values]
            return True if True in found else None
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and const_str(test.left) in RANK_VARS and \
                self.resolve(dotted(test.comparators[0])) == "os.environ":
            return {ast.In: True, ast.NotIn: False}.get(type(test.ops[0]))
        return None

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | None:
        parent = self.parent.get(node)
        while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            parent = self.parent.get(parent)
        return parent

    def call_sites(self, func: ast.AST) -> list[ast.Call]:
        """Calls of this file's function or method `func` from outside it (by name: `f(...)`, `self.f(...)`)."""
        return [c for c in self.calls if last(dotted(c.func)) == func.name and self.enclosing_function(c) is not func]

    def runs_on_rank0_only(self, node: ast.AST, kinds: frozenset = frozenset({"global"}), depth: int = 0) -> bool:
        """Guarded by a rank-0 test of one of these kinds, directly or because every call of its function is."""
        if any(g.kind in kinds and g.rank0 for g in self.guards(node)):
            return True
        func = self.enclosing_function(node)
        if func is None or depth > 4:
            return False
        sites = self.call_sites(func)
        return bool(sites) and all(self.runs_on_rank0_only(c, kinds, depth + 1) for c in sites)

    # --------------------------------------------------------------------------------------- rules

    def run(self) -> None:
        self.check_launcher_env()
        self.check_backend()
        self.check_cuda_devices()
        self.check_random_data()
        self.check_sampler()
        self.check_saving()
        self.check_loading()
        self.check_teardown()
        self.check_ddp_device_ids()
        self.check_collectives_in_rank_branches()
        self.check_rank0_ddp_forward()
        self.check_loader_without_sampler()
        self.check_grad_accumulation()

    def _skipped_when_launched(self, node: ast.AST) -> bool:
        """Inside `if "RANK" not in os.environ:` (or its kin): only runs when no launcher set the variables."""
        child, parent = node, self.parent.get(node)
        while parent is not None:
            if isinstance(parent, ast.If):
                for sub in ast.walk(parent.test):
                    if isinstance(sub, ast.Compare) and any(self.resolve(dotted(c)) == "os.environ"
                                                            for c in sub.comparators):
                        # `if V not in os.environ: <here>`, or `if V in os.environ: ... else: <here>`
                        if any(isinstance(op, ast.NotIn) for op in sub.ops) and child in parent.body or \
                                any(isinstance(op, ast.In) for op in sub.ops) and child in parent.orelse:
                            return True
            child, parent = parent, self.parent.get(parent)
        return False

    def _from_scheduler(self, value: ast.AST) -> bool:
        """`os.environ["RANK"] = str(int(os.environ["SLURM_PROCID"]))`: the script translates its scheduler's ranks
        (Slurm, Open MPI, PMI) into the env:// variables: it is the launcher there (directly or through one name)."""
        def reads_scheduler(expr: ast.AST) -> bool:
            return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and
                       n.value.startswith(SCHEDULER_PREFIXES) for n in ast.walk(expr))
        if reads_scheduler(value):
            return True
        for name in (n for n in ast.walk(value) if isinstance(n, ast.Name)):
            held = self._reaching_value(name)
            if held is not None and reads_scheduler(held):
                return True
        return False

    def check_launcher_env(self) -> None:
        def report(node: ast.AST, var: str) -> None:
            if self._skipped_when_launched(node) or self.spawns:
                return  # mp.spawn: the script is its own launcher, the rendezvous and ranks are its to set
            if var in LAUNCHER_VARS:
                self.add(node, "sets-master-env", ERROR,
                         f"sets {var} inside the script: it overrides the address the launcher gives every rank, so "
                         "the ranks look for the rendezvous where nobody serves it and hang in init_process_group",
                         "delete the line: torchrun / ddplab launch set MASTER_ADDR and MASTER_PORT (choose them with "
                         "--master-addr / --master-port)")
            else:
                self.add(node, "sets-rank-env", ERROR,
                         f"sets {var} inside the script: it overrides what the launcher gave this process, so ranks "
                         "disagree on who is who (init_process_group fails or waits forever)",
                         f"delete the line: the launcher sets {var} for every process")

        env_vars = LAUNCHER_VARS | RANK_VARS
        for node in ast.walk(self.tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and self.resolve(dotted(target.value)) == "os.environ":
                    var = const_str(target.slice)
                    if var in env_vars and not (var in RANK_VARS and self._from_scheduler(node.value)):
                        report(node, var)
        for call in self.calls:
            name = self.callee(call)
            if name == "os.environ.update":
                keys = [const_str(k) for a in call.args if isinstance(a, ast.Dict) for k in a.keys]
                keys += [k.arg for k in call.keywords]
                for var in keys:
                    if var in env_vars:
                        report(call, var)
            elif name == "os.putenv" and call.args and const_str(call.args[0]) in env_vars:
                report(call, const_str(call.args[0]))
            elif last(name) == "init_process_group":
                method = keyword(call, "init_method")
                text = const_str(method) or (const_str(method.values[0]) if isinstance(method, ast.JoinedStr)
                                             and method.values else None)
                if text and text.startswith("tcp://") and not self.spawns:
                    self.add(call, "sets-master-env", ERROR,
                             "init_process_group(init_method='tcp://...') hard-codes the rendezvous address: under a "
                             "launcher every rank then ignores the address it was given",
                             "drop init_method (env:// is the default: it reads what the launcher set)")
                for arg in ("rank", "world_size"):
                    value = keyword(call, arg)
                    if isinstance(value, ast.Constant):
                        self.add(call, "sets-rank-env", ERROR,
                                 f"init_process_group({arg}={value.value!r}) hard-codes the {arg}: every process "
                                 "claims the same one, so the group never forms",
                                 f"drop {arg}= (the launcher's environment gives each process its own)")

    def check_backend(self) -> None:
        for call in self.calls:
            if not self.is_(call, "init_process_group"):
                continue
            backend = keyword(call, "backend") or (call.args[0] if call.args else None)
            value = const_str(backend) or self._default_never_overridden(backend)
            if value is None:
                continue
            self.backend, self.backend_line = value.lower(), call.lineno
            if value.lower() == "nccl" and not self._cuda_checked(call):
                self.add(call, "nccl-hardcoded", WARNING,
                         "backend 'nccl' is hard-coded with no CUDA check: on a machine without GPUs (or a CPU build "
                         "of torch) init_process_group fails with \"Distributed package doesn't have NCCL built in\"",
                         "backend = 'nccl' if torch.cuda.is_available() else 'gloo'")

    def _default_never_overridden(self, name: ast.AST | None) -> str | None:
        """`def setup(backend="nccl"): init_process_group(backend=backend)` and no call of setup passes a backend:
        the default is the backend, as if written in the call."""
        func = self.enclosing_function(name) if isinstance(name, ast.Name) else None
        if func is None:
            return None
        params = [*func.args.posonlyargs, *func.args.args]
        defaults = dict(zip([a.arg for a in params][len(params) - len(func.args.defaults):], func.args.defaults))
        defaults.update({a.arg: d for a, d in zip(func.args.kwonlyargs, func.args.kw_defaults) if d is not None})
        value = const_str(defaults.get(name.id))
        targets = [t for n in ast.walk(func) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                   for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
        if value is None or any(isinstance(t, ast.Name) and t.id == name.id for x in targets for t in ast.walk(x)):
            return None
        index = next(i for i, a in enumerate(params) if a.arg == name.id) if name.id in [a.arg for a in params] else None
        for site in self.call_sites(func):
            offset = 1 if isinstance(site.func, ast.Attribute) and params and params[0].arg == "self" else 0
            if keyword(site, name.id) is not None or any(k.arg is None for k in site.keywords) or (
                    index is not None and len(site.args) + offset > index):
                return None
        return value

    def _mentions_cuda_check(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and last(dotted(n.func)) in ("is_available", "is_nccl_available",
                                                                         "device_count")
                   for n in ast.walk(node))

    def _cuda_checked(self, call: ast.Call) -> bool:
        parent = self.parent.get(call)
        while parent is not None:
            if isinstance(parent, (ast.If, ast.IfExp)) and self._mentions_cuda_check(parent.test):
                return True
            parent = self.parent.get(parent)
        for node in ast.walk(self.tree):  # `assert torch.cuda.is_available()` or `if not ...: raise/exit`
            if isinstance(node, ast.Assert) and self._mentions_cuda_check(node.test):
                return True
            if isinstance(node, ast.If) and self._mentions_cuda_check(node.test) and _exits(node.body):
                return True
        return False

    def check_cuda_devices(self) -> None:
        for call in self.calls:
            fixed = None
            if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda":
                arg = call.args[0] if call.args else keyword(call, "device")
                if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
                    fixed = f".cuda({arg.value})"
                elif arg is None and not call.args and not self.sets_device and self.distributed:
                    self.add(call, "hardcoded-cuda-device", WARNING,
                             ".cuda() without torch.cuda.set_device(local_rank): every rank puts its tensors on GPU 0",
                             "call torch.cuda.set_device(local_rank) before init_process_group, or use "
                             ".to(torch.device('cuda', local_rank))")
            if self.callee(call) == "torch.device" and len(call.args) == 2 and isinstance(call.args[1], ast.Constant):
                fixed = f"torch.device({call.args[0].value!r}, {call.args[1].value!r})" \
                    if isinstance(call.args[0], ast.Constant) else None
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                text = const_str(arg)
                if text and re.fullmatch(r"cuda:\d+", text):
                    fixed = repr(text)
            if fixed and self.distributed:
                self.add(call, "hardcoded-cuda-device", ERROR,
                         f"{fixed} is the same GPU on every rank: all processes share one GPU (NCCL then fails with "
                         "'Duplicate GPU detected', or the others sit idle)",
                         "use torch.device('cuda', local_rank) with local_rank = int(os.environ['LOCAL_RANK'])")

    def _random_call(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call) or keyword(node, "generator") is not None:
            return False
        full = self.callee(node)
        return (full.startswith("torch.") and last(full) in RANDOM_TORCH) or full.startswith("numpy.random.")

    def check_random_data(self) -> None:
        tainted: dict[str, int] = {}  # names holding unseeded random values -> line
        assigns = [n for n in ast.walk(self.tree) if isinstance(n, ast.Assign)]
        for _ in range(3):  # y = 2 * x + noise: follow a few assignments
            for node in assigns:
                uses = any(self._random_call(n) or (isinstance(n, ast.Name) and n.id in tainted)
                           for n in ast.walk(node.value))
                if uses:
                    for target in node.targets:
                        for n in ast.walk(target):
                            if isinstance(n, ast.Name):
                                tainted.setdefault(n.id, node.lineno)
        seeds = [c.lineno for c in self.calls if self.callee_last(c) in SEED_CALLS]
        fix = ("draw from a seeded generator: g = torch.Generator().manual_seed(0); torch.randn(..., generator=g) "
               "(or torch.manual_seed(0) first)")
        for call in self.calls:
            if self.callee_last(call) == "random_split" and keyword(call, "generator") is None and \
                    len(call.args) < 3 and self.distributed and not any(line <= call.lineno for line in seeds):
                self.add(call, "unseeded-random-split", WARNING,
                         "random_split without a seeded generator: every rank draws its own split, so the ranks "
                         "train on different subsets and one rank's test samples are in another's training set",
                         "random_split(dataset, lengths, generator=torch.Generator().manual_seed(0))")
        flagged = False
        for call in self.calls:
            name = self.callee_last(call)
            if not (name.endswith("Dataset") or name in ("TensorData",)):
                continue
            parts = [*call.args, *(k.value for k in call.keywords)]
            random_in = any(self._random_call(n) or (isinstance(n, ast.Name) and n.id in tainted)
                            for p in parts for n in ast.walk(p))
            if random_in and not any(line <= call.lineno for line in seeds) and self.distributed:
                flagged = True
                self.add(call, "unseeded-random-data", WARNING,
                         f"{name}(...) is built from random tensors drawn without a seed: every rank draws different "
                         "data, so the sampler's shards are not pieces of one dataset", fix)
        if flagged or not self.distributed:
            return
        # Without a Dataset: random tensors used directly by a training loop (one that calls .backward()).
        for loop in (n for n in ast.walk(self.tree) if isinstance(n, (ast.For, ast.While))):
            if not any(isinstance(n, ast.Attribute) and n.attr == "backward" for n in ast.walk(loop)):
                continue
            used = sorted({tainted[n.id] for n in ast.walk(loop) if isinstance(n, ast.Name) and n.id in tainted})
            # the data: drawn once before the loop, in its scope (draws in the loop or elsewhere are per-step noise)
            before = {a.lineno for a in assigns if a.lineno < loop.lineno and
                      self.enclosing_function(a) is self.enclosing_function(loop)}
            drawn = [line for line in used if not any(seed <= line for seed in seeds) and line in before]
            if drawn:
                node = next(a for a in assigns if a.lineno == drawn[0])
                self.add(node, "unseeded-random-data", WARNING,
                         "the training loop uses random tensors drawn without a seed: every rank trains on "
                         "different data", fix)
                return

    def check_sampler(self) -> None:
        samplers = [c for c in self.calls if self.callee_last(c) == "DistributedSampler"]
        for call in self.calls:
            if self.callee_last(call) != "DataLoader":
                continue
            shuffle, sampler = keyword(call, "shuffle"), keyword(call, "sampler")
            if isinstance(shuffle, ast.Constant) and shuffle.value is True and sampler is not None and not (
                    isinstance(sampler, ast.Constant) and sampler.value is None):
                self.add(call, "shuffle-with-sampler", ERROR,
                         "DataLoader gets shuffle=True and a sampler: it raises 'sampler option is mutually exclusive "
                         "with shuffle'",
                         "drop shuffle=True: DistributedSampler shuffles by itself (and set_epoch reshuffles each epoch)")
        if not samplers:
            return
        set_epoch_in_loop = any(
            isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch" and self._in_loop(c, across_calls=True)
            for c in self.calls)
        if set_epoch_in_loop:
            return
        loop = self._epoch_loop()
        if loop is not None:
            self.add(loop, "sampler-no-set-epoch", WARNING,
                     "this epoch loop never calls sampler.set_epoch(epoch): DistributedSampler then shuffles every "
                     "epoch the same way",
                     "call sampler.set_epoch(epoch) at the start of every epoch")

    def _in_loop(self, node: ast.AST, across_calls: bool = False, depth: int = 0) -> bool:
        parent = self.parent.get(node)
        while parent is not None:
            if isinstance(parent, (ast.For, ast.While, ast.AsyncFor)):
                return True
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if not across_calls or depth > 3:
                    return False
                sites = [c for c in self.calls if last(dotted(c.func)) == parent.name]
                return any(self._in_loop(c, True, depth + 1) for c in sites)
            parent = self.parent.get(parent)
        return False

    def _epoch_loop(self) -> ast.For | None:
        loops = [n for n in ast.walk(self.tree) if isinstance(n, ast.For)]
        for loop in loops:
            if "epoch" in dotted(loop.target).lower():
                return loop
        for loop in loops:
            if any(isinstance(n, ast.For) for n in ast.walk(loop) if n is not loop):
                return loop
        return None

    def check_saving(self) -> None:
        if any(self.callee(c) == "torch.save" for c in self.calls):
            for call in self.calls:
                if isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict":
                    owner = dotted(call.func.value)
                    if owner in self.ddp_names and self.ddp_names[owner] <= call.lineno and \
                            owner not in self.loaded_into:
                        self.add(call, "save-ddp-state-dict", WARNING,
                                 f"{owner}.state_dict() is the DDP wrapper's: every key starts with 'module.', so "
                                 "the file does not load into the plain model",
                                 f"save {owner}.module.state_dict()")
        if not self.distributed:
            return
        for call in self.calls:
            name = self.callee(call)
            if name != "torch.save" and ("save" not in last(name).lower() or last(name) in self.functions
                                         or isinstance(call.func, ast.Attribute) and call.func.attr.startswith("_")):
                continue  # a save function of this file is followed inside: its torch.save is the one judged
            if self._in_memory(call) or self._mentions_rank(call):
                continue  # into a BytesIO, or one file per rank
            if self.runs_on_rank0_only(call, frozenset({"global", "single"})):
                continue
            if self.runs_on_rank0_only(call, frozenset({"global", "single", "local"})):
                self.add(call, "local-rank-save", WARNING,
                         "saved when local_rank == 0: there is a local rank 0 on every machine, so every node writes "
                         "(the same file on shared storage, concurrently)",
                         "test the global rank: if dist.get_rank() == 0 (or rank == 0 with rank = int(os.environ['RANK']))")
            elif name == "torch.save" and not self.runs_on_rank0_only(call, ANY_RANK0):
                self.add(call, "unguarded-save", WARNING,
                         "torch.save runs on every rank: all processes write the same file at once (a corrupt "
                         "checkpoint, or N copies)",
                         "save on global rank 0 only: if dist.get_rank() == 0: torch.save(...)")
        # Printing is per-process output: any rank-0 test keeps it to one line per job (or per node, fine for logs).
        if self._replaces_print():
            return  # `builtins.print = ...` (setup_for_distributed): every print goes through the script's filter
        prints = sorted((c for c in self.calls if self.callee(c) == "print" and keyword(c, "file") is None
                         and not self._mentions_rank(c) and not self.runs_on_rank0_only(c, ANY_RANK0)),
                        key=lambda c: c.lineno)
        if prints:
            more = f" (also lines {', '.join(str(c.lineno) for c in prints[1:6])}{'...' if len(prints) > 6 else ''})" \
                if len(prints) > 1 else ""
            self.add(prints[0], "unguarded-print", WARNING,
                     f"print runs on every rank: each line appears once per process, interleaved{more}",
                     "print on global rank 0 only (if rank == 0: print(...)), or put the rank in the message",
                     also=[c.lineno for c in prints[1:]])

    def _replaces_print(self) -> bool:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Attribute) and t.attr == "print" and
                    self.resolve(dotted(t.value)) in ("builtins", "__builtin__") for t in node.targets):
                return True
        return False

    def _in_memory(self, call: ast.Call) -> bool:
        """torch.save(obj, buf) into an io.BytesIO: nothing is written to a file there."""
        target = call.args[1] if len(call.args) > 1 else keyword(call, "f")
        if target is None:
            return False
        if isinstance(target, ast.Call):
            return last(self.callee(target)) == "BytesIO"
        scope = self.enclosing_function(call)
        return any(isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and
                   last(self.callee(n.value)) == "BytesIO" and any(dotted(t) == dotted(target) for t in n.targets)
                   for n in ast.walk(scope or self.tree))

    def _mentions_rank(self, call: ast.Call) -> bool:
        """The rank (or the process id) is in the arguments: each process says who it is, or writes its own file."""
        for node in ast.walk(call):
            if node is call:
                continue
            if isinstance(node, ast.Call) and last(self.callee(node)) == "getpid":
                return True
            if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and self.rank_kind(node):
                return True
            if isinstance(node, (ast.Name, ast.Attribute)) and self._held(self.rank_derived, node):
                return True  # device = torch.device(f"cuda:{local_rank}"): printing it says who prints
        return False

    def check_loading(self) -> None:
        for call in self.calls:
            if self.callee(call) == "torch.load" and keyword(call, "map_location") is None and len(call.args) < 2:
                self.add(call, "load-no-map-location", WARNING,
                         "torch.load without map_location puts every tensor back on the device it was saved from "
                         "(cuda:0): every rank loads onto GPU 0",
                         "torch.load(path, map_location=device) (this rank's device, or 'cpu')")

    def check_teardown(self) -> None:
        inits = [c for c in self.calls if self.is_(c, "init_process_group")]
        if inits and not any(self.is_(c, "destroy_process_group") for c in self.calls):
            self.add(inits[0], "no-destroy", WARNING,
                     "the process group is never destroyed: on exit or after an error the other ranks may wait for "
                     "this one until the timeout",
                     "call dist.destroy_process_group() at the end, in a `finally:` so that it runs after errors too")

    def check_ddp_device_ids(self) -> None:
        gpu = self.backend == "nccl" or self.sets_device or any(
            isinstance(c.func, ast.Attribute) and c.func.attr == "cuda" for c in self.calls)
        if not gpu:
            return
        for call in self.calls:
            if self.callee_last(call) in DDP_NAMES and keyword(call, "device_ids") is None and len(call.args) < 2:
                self.add(call, "ddp-no-device-ids", WARNING,
                         "DistributedDataParallel without device_ids on GPUs: DDP cannot tell which single GPU this "
                         "process drives",
                         "DDP(model, device_ids=[local_rank]) on GPU (device_ids=None on CPU)")

    def check_collectives_in_rank_branches(self) -> None:
        for call in self.calls:
            if not self.is_collective(call):
                continue
            name = self.callee_last(call)
            for guard in (g for g in self.guards(call) if g.kind != "single"):
                paired = any(isinstance(n, ast.Call) and self.callee_last(n) == name
                             for branch in guard.other for n in ast.walk(branch))
                if not paired:
                    who = "rank 0" if guard.rank0 else "every rank but 0"
                    self.add(call, "collective-in-rank-branch", ERROR,
                             f"{name} runs on {who} only (the {guard.kind} rank test on line {guard.node.lineno}): "
                             "a collective needs every rank, so the others never join and it hangs",
                             f"call {name} on every rank, outside the rank test; keep only the printing/saving inside")
                    break

    def check_rank0_ddp_forward(self) -> None:
        """DDP's forward broadcasts the module's buffers from rank 0 (broadcast_buffers=True, the default), also
        under torch.no_grad() in the first forward after a training step: a forward through the wrapper on rank 0
        alone is a broadcast nobody else joins. Checked by running it: 2 gloo ranks, BatchNorm1d, rank 0 evaluating
        through the wrapper: both ranks stop at "Timed out waiting ... for send operation to complete"."""
        wrappers = [c for c in self.calls if self.callee_last(c) in DDP_NAMES]
        syncs = [c for c in wrappers if not any(
            isinstance(keyword(c, k), ast.Constant) and keyword(c, k).value is False
            for k in ("broadcast_buffers", "forward_sync_buffers"))]
        has_buffers = any(BUFFER_LAYERS.fullmatch(self.callee_last(c)) for c in self.calls)
        if not syncs or not has_buffers:
            return
        for call in self.calls:
            name = dotted(call.func)
            owner = name[: -len(".forward")] if name.endswith(".forward") else name
            if owner not in self.ddp_names or not self.runs_on_rank0_only(call, ANY_RANK0 - {"single"}):
                continue
            self.add(call, "rank0-ddp-forward", ERROR,
                     f"{owner}(...) runs the DDP wrapper's forward on rank 0 only: DDP broadcasts the module's "
                     "buffers (BatchNorm running stats) in forward, also under torch.no_grad(), and the other ranks "
                     "never join that broadcast: the run hangs",
                     f"evaluate the plain module on rank 0 ({owner}.module(...)), or evaluate on every rank and "
                     "all_reduce the metric")

    def check_loader_without_sampler(self) -> None:
        if not self.distributed:
            return
        samplers = [c for c in self.calls if self.callee_last(c) == "DistributedSampler"]
        for call in self.calls:
            if self.callee_last(call) != "DataLoader":
                continue
            shuffle, sampler = keyword(call, "shuffle"), keyword(call, "sampler")
            always_none = sampler is not None and self._always_none(sampler)
            shuffled = isinstance(shuffle, ast.Constant) and shuffle.value is True or (
                always_none and isinstance(shuffle, ast.Compare) and isinstance(shuffle.ops[0], ast.Is)
                and dotted(shuffle.left) == dotted(sampler))  # shuffle=(sampler is None)
            if not shuffled or (sampler is not None and not always_none) or keyword(call, "batch_sampler") is not None:
                continue
            if self.runs_on_rank0_only(call, ANY_RANK0) or self._dataset_sharded(call) or self._for_evaluation(call):
                continue
            beside = f" (the DistributedSampler on line {samplers[0].lineno} is not given to it)" if samplers else ""
            self.add(call, "loader-without-sampler", WARNING,
                     "DataLoader(shuffle=True) without a DistributedSampler: every rank reads the whole dataset in "
                     f"its own order, so the ranks do not split the data and an epoch is N times the work{beside}",
                     "DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=False) and "
                     "sampler.set_epoch(epoch) every epoch")

    def _always_none(self, name: ast.AST) -> bool:
        """`sampler=train_sampler` where train_sampler is only ever assigned None."""
        if not isinstance(name, ast.Name):
            return isinstance(name, ast.Constant) and name.value is None
        value = self._reaching_value(name)
        return isinstance(value, ast.Constant) and value.value is None

    def _reaching_value(self, name: ast.Name) -> ast.AST | None:
        """The value of the nearest `name = ...` on the straight path before this use (same block or enclosing
        ones), as a reader finds it scrolling up."""
        child, parent = name, self.parent.get(name)
        while parent is not None and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for field_name in ("body", "orelse", "finalbody"):
                block = getattr(parent, field_name, None)
                if isinstance(block, list) and child in block:
                    for stmt in reversed(block[: block.index(child)]):
                        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name.id
                                                                for t in stmt.targets):
                            return stmt.value
            child, parent = parent, self.parent.get(parent)
        return None

    def _for_evaluation(self, call: ast.Call) -> bool:
        """A validation/test loader (by its name, or a dataset built with train=False): every rank reading all of
        it costs time, not correctness."""
        parent = self.parent.get(call)
        names = [dotted(t).lower() for t in getattr(parent, "targets", [])]
        if any(w in n for n in names for w in ("val", "test", "eval")):
            return True
        return any(isinstance(n, ast.Call) and isinstance(keyword(n, "train"), ast.Constant)
                   and keyword(n, "train").value is False for n in ast.walk(call))

    def _dataset_sharded(self, call: ast.Call) -> bool:
        """The dataset given to the loader is already this rank's piece (built from the rank)."""
        dataset = call.args[0] if call.args else keyword(call, "dataset")
        if dataset is None:
            return False
        exprs = [dataset] + [n.value for n in ast.walk(self.tree) if isinstance(n, ast.Assign)
                             and any(dotted(t) == dotted(dataset) for t in n.targets) and dotted(dataset)]
        return any(isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and self.rank_kind(n)
                   for e in exprs for n in ast.walk(e))

    def check_grad_accumulation(self) -> None:
        """Micro-steps that only accumulate still all-reduce every backward unless DDP is told not to."""
        if not self.ddp_names or any(
                (isinstance(n, ast.Attribute) and n.attr in ("no_sync", "require_backward_grad_sync"))
                for n in ast.walk(self.tree)):
            return
        for loop in (n for n in ast.walk(self.tree) if isinstance(n, (ast.For, ast.While))):
            here = list(_walk_same_function(loop.body, into_loops=False))  # this loop's own level
            backward = next((c for c in here if isinstance(c, ast.Call) and _method(c) == "backward"), None)
            if backward is None:
                continue
            # `if (i + 1) % accum == 0: optimizer.step()` beside a backward on every iteration
            stepped_every_k = any(
                isinstance(n, ast.If) and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod)
                                              for b in ast.walk(n.test))
                and any(_method(c) == "step" for c in _calls_in(n.body))
                and not any(c is backward for c in _calls_in(n.body))
                for n in here)
            # `for micro_step in range(accum): ... backward()` inside a loop that steps after it
            outer = self.parent.get(loop)
            while outer is not None and not isinstance(outer, (ast.For, ast.While, ast.FunctionDef, ast.Module)):
                outer = self.parent.get(outer)
            inner_no_step = isinstance(outer, (ast.For, ast.While)) and \
                not any(_method(c) == "step" for c in _calls_in(loop.body)) and \
                any(isinstance(c, ast.Call) and _method(c) == "step" and c.lineno > loop.lineno
                    for c in _walk_same_function(outer.body, into_loops=False))
            if stepped_every_k or inner_no_step:
                self.add(loop, "grad-accum-no-sync", WARNING,
                         "gradient accumulation without no_sync(): DDP all-reduces the gradients in every "
                         "backward, also on the micro-steps where no optimizer step follows (k-1 of every k "
                         "all-reduces are wasted)",
                         "run the micro-steps but the last inside `with model.no_sync():` (or set "
                         "model.require_backward_grad_sync = is_last_micro_step before the forward)")


def _method(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else ""


def _walk_same_function(body: list[ast.stmt], into_loops: bool = True):
    """Every node under these statements, not entering nested functions or classes (nor loops, if told)."""
    stack = list(body)
    skip = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda) + \
        (() if into_loops else (ast.For, ast.While, ast.AsyncFor))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, skip):
            stack.extend(ast.iter_child_nodes(node))


def _calls_in(body: list[ast.stmt]) -> list[ast.Call]:
    return [n for n in _walk_same_function(body) if isinstance(n, ast.Call)]
