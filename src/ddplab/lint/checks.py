"""The rules of `ddplab lint`: each check reads the script through ScriptReader and adds findings (line, rule,
level, message, fix). docs/lint.md lists them and how often they are right on public scripts."""

from __future__ import annotations

import ast
import functools
import re

from ddplab.lint.findings import ERROR, POSSIBLE, SURE, WARNING, Finding
from ddplab.lint.multigpu import MultiGpuChecks
from ddplab.lint.scriptread import (
    ANY_RANK0,
    DDP_NAMES,
    RANK_VARS,
    SCHEDULER_PREFIXES,
    UNIQUE_NAMES,
    Facts,
    _is_none,
    block_of,
    body_exits,
    calls_in,
    const_str,
    default_of,
    dotted,
    given_for,
    is_main_block,
    keyword,
    last,
    leading_text,
    method_name,
    passed,
    said_plainly,
    walk_same_function,
)

LAUNCHER_VARS = {"MASTER_ADDR", "MASTER_PORT"}
SAVE_CALLS = {
    "torch.save",
    "save_pretrained",
}  # checkpoint writes judged as torch.save (Hugging Face's too; a project adds
# its own: vocabulary.py)
# libraries' calls that make the process group with init_process_group and leave it to the script to destroy
LIBRARY_GROUP_MAKERS = {
    "mmcv.runner.init_dist",
    "mmcv.runner.dist_utils.init_dist",
    "mmengine.dist.init_dist",
    "mmengine.dist.utils.init_dist",
    "deepspeed.init_distributed",
    "deepspeed.comm.init_distributed",
}
SEED_CALLS = {"manual_seed", "seed", "set_seed", "seed_everything", "manual_seed_all"}
RNG_MAKERS = {"default_rng", "RandomState", "Generator", "PRNGKey"}
RANDOM_TORCH = {"rand", "randn", "randint", "randperm", "normal", "rand_like", "randn_like", "randint_like"}
# a loaded object used so is a tensor of data, not a checkpoint
DATA_USES = set("numpy tolist size shape dim ndim numel float long squeeze unsqueeze view reshape sum mean".split())
DATA_SAVES = {"savetxt", "savez", "savez_compressed", "savemat", "savefig", "save_image"}  # data or picture files
BUFFER_LAYERS = re.compile(r"(Lazy)?BatchNorm[123]d|SyncBatchNorm|register_buffer")  # modules with buffers
# torchvision.models builders whose networks hold BatchNorm layers (running stats are buffers)
BATCHNORM_MODELS = re.compile(
    r"(resnet|resnext|wide_resnet|densenet|mobilenet_v[23]|efficientnet|regnet|inception_v3"
    r"|googlenet|shufflenet|mnasnet|vgg\d+_bn)\w*"
)


# the shuffling samplers of one process: each rank draws from the whole dataset
ONE_PROCESS_SAMPLERS = ("RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler")


class Checks(MultiGpuChecks):
    def __init__(self, tree: ast.Module, facts: Facts | None = None):
        self.findings: list[Finding] = []
        super().__init__(tree, facts)
        self.path_params: dict = {}  # line -> (function, parameter): a write whose path a caller gives
        self.loader_params: dict = {}  # line -> (function, parameter): a sum over a loader other files' callers give
        # the backend init_process_group is given as a literal, if any: known before any pass runs, since several
        # rules judge a device by it
        self.backend: str | None = None
        self.backend_line: int | None = None
        for call in self.calls:
            if self.callee_last(call) == "init_process_group":
                value = self._backend_value(keyword(call, "backend") or (call.args[0] if call.args else None))
                if value is not None:
                    self.backend, self.backend_line = value.lower(), call.lineno

    def add(
        self,
        node: ast.AST,
        rule: str,
        level: str,
        message: str,
        fix: str,
        also: list[int] | None = None,
        sure: bool = True,
        why: str = "",
    ) -> None:
        """A finding at the first line of the statement that holds `node` (where a reader looks for it);
        `sure=False` (with `why`: what lint could not see) puts it behind --all."""
        line = self.line_of(node)
        if not any(f.line == line and f.rule == rule for f in self.findings):
            self.findings.append(Finding(line, rule, level, message, fix, also or [], SURE if sure else POSSIBLE, why))

    def line_of(self, node: ast.AST) -> int:
        """The first line of the statement that holds `node`."""
        stmt = self.statement_of(node)
        return getattr(stmt if stmt is not None else node, "lineno", 0)

    def statement_of(self, node: ast.AST) -> ast.stmt | None:
        """The statement that holds `node` (`node` itself when it is one)."""
        while node is not None and not isinstance(node, ast.stmt):
            node = self.parent.get(node)
        return node

    def run(self, passes) -> None:
        """The rules' passes (ddplab.lint.rules), each a method of this reader."""
        for check in passes:
            check(self)

    def _skipped_when_launched(self, node: ast.AST) -> bool:
        """Inside `if "RANK" not in os.environ:` (or its kin): only runs when no launcher set the variables."""
        child, parent = node, self.parent.get(node)
        while parent is not None:
            if isinstance(parent, ast.If):
                for sub in ast.walk(parent.test):
                    if isinstance(sub, ast.Compare) and any(
                        self.resolve(dotted(c)) == "os.environ" for c in sub.comparators
                    ):
                        # `if V not in os.environ: <here>`, or `if V in os.environ: ... else: <here>`
                        if (
                            any(isinstance(op, ast.NotIn) for op in sub.ops)
                            and child in parent.body
                            or any(isinstance(op, ast.In) for op in sub.ops)
                            and child in parent.orelse
                        ):
                            return True
            child, parent = parent, self.parent.get(parent)
        return False

    def _from_scheduler(self, value: ast.AST) -> bool:
        """`os.environ["RANK"] = str(int(os.environ["SLURM_PROCID"]))`: the script translates its scheduler's ranks
        (Slurm, Open MPI, PMI) into the env:// variables: it is the launcher there (directly or through one name)."""

        def reads_scheduler(expr: ast.AST) -> bool:
            return any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith(SCHEDULER_PREFIXES)
                for n in ast.walk(expr)
            )

        if reads_scheduler(value):
            return True
        for name in (n for n in ast.walk(value) if isinstance(n, ast.Name)):
            held = self._reaching_value(name)
            if held is not None and reads_scheduler(held):
                return True
        return False

    def _reads_scheduler(self, scope: ast.AST) -> bool:
        """Reads the ranks a scheduler or MPI gives (SLURM_PROCID, MPI.COMM_WORLD): it starts the ranks itself."""
        return any(
            isinstance(n, ast.Constant)
            and isinstance(n.value, str)
            and n.value.startswith(SCHEDULER_PREFIXES)
            or isinstance(n, ast.Attribute)
            and n.attr == "COMM_WORLD"
            for n in ast.walk(scope)
        )

    def _set_again_later(self, node: ast.AST, var: str, scope: ast.AST) -> bool:
        """A later line of the scope sets `var` from something other than a constant (msn's `os.environ["MASTER_ADDR"]
        = "localhost"`, then `= os.environ["HOSTNAME"]` on the Slurm path): the constant is a default."""
        return any(
            isinstance(n, ast.Assign)
            and n.lineno > node.lineno
            and not isinstance(n.value, ast.Constant)
            and any(isinstance(t, ast.Subscript) and const_str(t.slice) == var for t in n.targets)
            for n in ast.walk(scope)
        )

    @staticmethod
    def _reads_launcher_ranks(scope: ast.AST) -> bool:
        """The scope reads torchrun's RANK or LOCAL_RANK (`if "RANK" in os.environ:`), not only sets them."""
        stored = {
            id(t.slice)
            for n in ast.walk(scope)
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Subscript)
        }
        return any(
            isinstance(n, ast.Constant) and n.value in ("RANK", "LOCAL_RANK") and id(n) not in stored
            for n in ast.walk(scope)
        )

    def _launches_itself(self) -> bool:
        """The script starts its own ranks (mp.spawn here or in a file it reaches): the rendezvous is its to set,
        whichever other call also reaches the worker (a parent that calls it directly too, a missing `else`)."""
        return self.spawns or self.facts.spawns

    def check_launcher_env(self) -> None:
        def report(node: ast.AST, var: str) -> None:
            if self._skipped_when_launched(node) or self._launches_itself():
                return  # mp.spawn: the script is its own launcher, the rendezvous and ranks are its to set
            value = getattr(self.parent.get(node), "value", None) if isinstance(node, ast.Subscript) else None
            value = getattr(node, "value", value)
            scope = self.enclosing_function(node) or self.tree
            fixed = isinstance(value, ast.Constant) and not self._set_again_later(node, var, scope)
            if (
                var in LAUNCHER_VARS
                and not (fixed and (var == "MASTER_ADDR" or self._reads_launcher_ranks(scope)))
                and self._reads_scheduler(scope)
            ):
                return  # a setup that reads SLURM_PROCID / MPI ranks computes the rendezvous itself (srun, mpirun),
            #         a fixed port among it; a constant address ('127.0.0.1') there is still one for every node, and
            #         a fixed port overrides torchrun's where the setup also takes torchrun's RANK
            if var in LAUNCHER_VARS:
                self.add(
                    node,
                    "sets-master-env",
                    ERROR,
                    f"sets {var} inside the script: it overrides the address the launcher gives every rank, so "
                    "the ranks look for the rendezvous where nobody serves it and hang in init_process_group",
                    "delete the line: torchrun / ddplab launch set MASTER_ADDR and MASTER_PORT (choose them with "
                    "--master-addr / --master-port)",
                )
            else:
                self.add(
                    node,
                    "sets-rank-env",
                    ERROR,
                    f"sets {var} inside the script: it overrides what the launcher gave this process, so ranks "
                    "disagree on who is who (init_process_group fails or waits forever)",
                    f"delete the line: the launcher sets {var} for every process",
                )

        env_vars = LAUNCHER_VARS | RANK_VARS
        for node in self.nodes:
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and self.resolve(dotted(target.value)) == "os.environ":
                    var = const_str(target.slice)
                    scheduler = self._from_scheduler(node.value) or self._reads_scheduler(
                        self.enclosing_function(node) or self.tree
                    )
                    if var in env_vars and not (var in RANK_VARS and scheduler):
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
                text = leading_text(method)
                if (
                    text
                    and text.startswith("tcp://")
                    and not self._launches_itself()
                    and not self._launcher_address(method)
                ):
                    self.add(
                        call,
                        "sets-master-env",
                        ERROR,
                        "init_process_group(init_method='tcp://...') hard-codes the rendezvous address: under a "
                        "launcher every rank then ignores the address it was given",
                        "drop init_method (env:// is the default: it reads what the launcher set)",
                    )
                size = keyword(call, "world_size")
                if isinstance(size, ast.Constant) and size.value == 1:
                    continue  # a group of one process (open_flamingo's "needed to run on single gpu"): rank 0 is right
                for arg in ("rank", "world_size"):
                    value = keyword(call, arg)
                    if isinstance(value, ast.Constant) and not (self._launches_itself() and arg == "world_size"):
                        self.add(
                            call,
                            "sets-rank-env",
                            ERROR,
                            f"init_process_group({arg}={value.value!r}) hard-codes the {arg}: every process "
                            "claims the same one, so the group never forms",
                            f"drop {arg}= (the launcher's environment gives each process its own)",
                        )

    def check_backend(self) -> None:
        for call in self.calls:
            if self.callee_last(call) != "init_process_group":
                continue
            value = self._backend_value(keyword(call, "backend") or (call.args[0] if call.args else None))
            if (
                value is not None
                and value.lower() == "nccl"
                and not self._cuda_checked(call)
                and not (self.facts.gpu_training or self.trains_on_gpus_only())
            ):
                self.add(
                    call,
                    "nccl-hardcoded",
                    WARNING,
                    "backend 'nccl' is hard-coded with no CUDA check: on a machine without GPUs (or a CPU build "
                    'of torch) init_process_group fails with "Distributed package doesn\'t have NCCL built in"',
                    "backend = 'nccl' if torch.cuda.is_available() else 'gloo'",
                )

    def _backend_value(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """What the backend expression evaluates to, when the script decides it: a literal, the enum
        (`Backend.NCCL`, `dist.Backend("nccl")`), a module constant, a parameter default no caller overrides, or a
        value assigned once in the same function. An argparse option or a config file is the user's choice: None."""
        if depth > 3 or node is None:
            return None
        if (text := const_str(node)) is not None:
            return text
        if (
            isinstance(node, ast.Attribute)
            and node.attr.upper() in ("NCCL", "GLOO", "MPI", "UCC")
            and last(dotted(node.value)) == "Backend"
        ):
            return node.attr.lower()  # torch.distributed.Backend.NCCL == "nccl"
        if isinstance(node, ast.Call) and self.callee_last(node) in ("Backend", "str") and len(node.args) == 1:
            return self._backend_value(node.args[0], depth + 1)
        if (chosen := _by_platform(node)) is not None:
            return self._backend_value(chosen, depth + 1)
        value = self._default_never_overridden(node) or self._assigned_literal(node) or self._attribute_literal(node)
        if value is None and isinstance(node, ast.Name):
            held = self.module_constant(node.id)
            value = self._backend_value(held, depth + 1) if held is not None else None
        return value

    def _attribute_literal(self, node: ast.AST | None) -> str | None:
        """`args.backend = 'nccl'` once in the file (in the main block, say) and `init_process_group(args.backend)`
        in the function it is handed to: a literal, when no argparse option of that name exists to change it."""
        if not isinstance(node, ast.Attribute) or self.calls_by_name.get("exec") or self.calls_by_name.get("setattr"):
            return None
        values = [
            n.value
            for n in self.nodes
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == node.attr for t in n.targets)
        ]
        option = any(
            method_name(c) == "add_argument"
            and (
                const_str(keyword(c, "dest")) == node.attr
                or any((const_str(a) or "").lstrip("-").replace("-", "_") == node.attr for a in c.args)
            )
            for c in self.calls
        )
        return const_str(values[0]) if len(values) == 1 and not option else None

    def _assigned_literal(self, node: ast.AST | None) -> str | None:
        """`args.dist_backend = 'nccl'` earlier in the same function, and nothing else assigned to it there."""
        if not isinstance(node, (ast.Name, ast.Attribute)):
            return None
        scope = self.enclosing_function(node)
        if scope is None and isinstance(node, ast.Name):
            return None  # a module-level knob (nanoGPT's `backend = 'nccl'`, overridden by its configurator)
        scope = scope or self.tree
        assigns = [
            n
            for n in walk_same_function(scope.body)
            if isinstance(n, ast.Assign)
            and any(dotted(t) == dotted(node) for t in n.targets)
            and n.lineno < node.lineno
        ]
        if len(assigns) == 1 and self._cuda_checked_here(assigns[0], strict=True):
            return None  # `if torch.cuda.is_available(): backend = "nccl"`: chosen by the platform
        values = [n.value for n in assigns]
        if len(values) == 1 and (chosen := _by_platform(values[0])) is not None:
            return const_str(chosen)
        return const_str(values[0]) if len(values) == 1 else None

    def _default_never_overridden(self, name: ast.AST | None) -> str | None:
        """`def setup(backend="nccl"): init_process_group(backend=backend)` and no call of setup passes a backend:
        the default is the backend, as if written in the call."""
        func = self.enclosing_function(name) if isinstance(name, ast.Name) else None
        if func is None:
            return None
        value = const_str(default_of(func, name.id))
        targets = [
            t
            for n in ast.walk(func)
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        ]
        if value is None or any(isinstance(t, ast.Name) and t.id == name.id for x in targets for t in ast.walk(x)):
            return None
        if any(passed(site, func, name.id) is not default_of(func, name.id) for site in self.call_sites(func)):
            return None  # a call passes its own (or may, through *args / **kwargs)
        return value

    def _in_branch_never_taken(self, node: ast.AST) -> bool:
        """In a branch of a parameter flag that no call of the function (by its name, or its class's for __init__; at
        least one seen) opens (branch_open): `def __init__(self, n, re_train=False): if re_train: torch.load(...)`
        built as `Net(n)`."""
        func = self.enclosing_function(node)
        if func is None:
            return False
        owner = self.parent.get(func)
        name = owner.name if func.name == "__init__" and isinstance(owner, ast.ClassDef) else func.name
        sites = [c for c in self.calls_by_name.get(name, []) if self.enclosing_function(c) is not func]
        return bool(sites) and not any(self.branch_open(node, func, c) for c in sites)

    def _mentions_cuda_check(self, node: ast.AST) -> bool:
        """torch.cuda.is_available() / device_count() / is_nccl_available() (not `dist.is_available()`, which says
        whether torch was built with distributed support, GPUs or not)."""
        return any(
            isinstance(n, ast.Call)
            and (
                last(dotted(n.func)) == "is_nccl_available"
                or last(dotted(n.func)) in ("is_available", "device_count")
                and self.resolve(dotted(n.func)).split(".")[-2:-1] != ["distributed"]
            )
            for n in ast.walk(node)
        )

    def _cuda_checked(self, call: ast.Call, depth: int = 0) -> bool:
        """A CUDA check decides whether `call` runs: an enclosing `if torch.cuda.is_available()`, an assert or an
        exit on it in the same function, or the same in every caller of that function in this file (`assert
        torch.cuda.is_available()` in main, then `setup()`); a function handed to another call (`mp.spawn(worker,
        ...)`) runs where that call runs it."""
        if self._cuda_checked_here(call) if depth == 0 else self._cuda_checked_here(call, strict=True):
            return True
        func = self.enclosing_function(call)
        if func is None or depth > 2:
            return False
        sites = self.call_sites(func) + [
            c
            for c in self.calls
            if func.name in self.passed
            and any(dotted(a) == func.name for a in [*c.args, *(k.value for k in c.keywords)])
        ]
        return bool(sites) and all(self._cuda_checked(s, depth + 1) for s in sites)

    def _needs_gpus(self, test: ast.AST) -> bool:
        """A GPU count compared so that it cannot hold without GPUs (`torch.cuda.device_count() > 1`, `assert n_gpus
        >= 2` with `n_gpus = torch.cuda.device_count()`): what it guards runs only where there are GPUs."""

        def count(n: ast.AST) -> bool:
            made = self._built(n) if isinstance(n, ast.Name) else [n]
            return bool(made) and all(isinstance(v, ast.Call) and self.callee_last(v) == "device_count" for v in made)

        for c in ast.walk(test):
            if isinstance(c, ast.Compare) and len(c.ops) == 1:
                left, op, right = c.left, type(c.ops[0]), c.comparators[0]
                if isinstance(left, ast.Constant):  # 1 < n  is  n > 1
                    left, right, op = right, left, {ast.Lt: ast.Gt, ast.LtE: ast.GtE}.get(op, op)
                k = right.value if isinstance(right, ast.Constant) and type(right.value) is int else None
                if k is not None and count(left) and (op is ast.Gt and k >= 0 or op in (ast.GtE, ast.Eq) and k >= 1):
                    return True
        return False

    def _cleared_without_cuda(self, flag: ast.AST) -> bool:
        """`if args.distributed:` where the flag is set False on the branch without CUDA (`if torch.cuda.
        is_available(): ... else: args.distributed = False`): the flag holds only with CUDA."""
        if not isinstance(flag, (ast.Name, ast.Attribute)):
            return False
        for n in self.nodes:
            if not (
                isinstance(n, ast.Assign)
                and isinstance(n.value, ast.Constant)
                and n.value.value is False
                and any(dotted(t) == dotted(flag) for t in n.targets)
            ):
                continue
            child = n
            for p in self.ancestors(n):
                if isinstance(p, ast.If) and self._mentions_cuda_check(p.test):
                    negated = isinstance(p.test, ast.UnaryOp) and isinstance(p.test.op, ast.Not)
                    if (child in p.orelse) != negated:
                        return True
                child = p
        return False

    def _cuda_checked_here(self, call: ast.Call, strict: bool = False) -> bool:
        """In a caller (strict) only `torch.cuda.is_available()` itself counts: `assert gpus == device_count()`
        there checks the GPU count the scheduler gave, not that there are GPUs."""

        def check(test: ast.AST) -> bool:
            return self._needs_gpus(test) or (
                self._asks_cuda_available(test) if strict else self._mentions_cuda_check(test)
            )

        parent = self.parent.get(call)
        while parent is not None:
            if isinstance(parent, (ast.If, ast.IfExp)) and (
                check(parent.test) or self._cleared_without_cuda(parent.test)
            ):
                return True
            parent = self.parent.get(parent)
        scope = self.enclosing_function(call)
        scope = self.tree if scope is None else scope  # the function that initialises, or the whole script
        if self._gpu_only_path(call, scope):
            return True
        # `assert torch.cuda.is_available()` or `if not ...: raise/exit`, in a block on the call's own path (not in a
        # branch beside it: a fallback for no launcher that torchrun never takes)
        path = {id(a) for a in self.ancestors(call)} | {id(call)}
        for node in ast.walk(scope):
            if not (
                isinstance(node, ast.Assert)
                and check(node.test)
                or isinstance(node, ast.If)
                and check(node.test)
                and (body_exits(node.body) or body_exits(node.orelse))
            ):
                continue
            if self._on_path_of(node, call, path):
                return True
        return False

    def _on_path_of(self, node: ast.stmt, call: ast.Call, path: set[int]) -> bool:
        """`node` sits in a block that holds `call` (or a statement around it), climbing out of any `if` whose test
        also guards `call` (`if config["distributed"]:` checks CUDA, a later `if config["distributed"]:` inits)."""
        tests = {ast.dump(a.test) for a in self.ancestors(call) if isinstance(a, ast.If)}
        while (block := block_of(up := self.parent.get(node), node)) is not None:
            if any(id(stmt) in path for stmt in block):
                return True
            if not (isinstance(up, ast.If) and ast.dump(up.test) in tests):
                return False
            node = up
        return True

    def _launcher_address(self, method: ast.AST) -> bool:
        """`f"tcp://{addr}:{port}"` with `addr = os.getenv("MASTER_ADDR")`: the address the launcher set, said again
        (read in the expression itself, or in what a name in it is assigned)."""
        values = [method] + [v for n in ast.walk(method) if isinstance(n, ast.Name) for v in self._built(n)]
        return any(const_str(c) in LAUNCHER_VARS for v in values for c in ast.walk(v))

    def trains_on_gpus_only(self) -> bool:
        """A function of this file that wraps a model in DDP puts something on a GPU in a statement of its own body,
        under no test (`criterion = nn.CrossEntropyLoss().cuda()`, `torch.cuda.set_device(gpu)`, `x.to("cuda")`,
        `DDP(model, device_ids=[rank])`), or refuses to go on without one (`if not torch.cuda.is_available(): raise
        SystemExit(...)`, `assert torch.cuda.is_available()`): its training cannot run without GPUs, whatever the
        backend, so a hard-coded nccl costs nothing more (a module of the project's counts for the script too:
        Facts.gpu_training). The module's own top level counts as such a function (a script with no functions)."""
        wrappers = DDP_NAMES | self.facts.ddp_factories  # DDP, or the project's function that returns a DDP model
        for func in self.nodes:  # the module itself first (nodes[0])
            if not isinstance(func, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)) or not any(
                isinstance(n, ast.Call) and self.callee_last(n) in wrappers for n in walk_same_function(func.body)
            ):
                continue
            # the script's `if __name__ == "__main__":` block runs whenever the script does (round 38's Grad-W:
            # `model.cuda()` there, its GPU picked by CUDA_VISIBLE_DEVICES)
            main = [s for b in func.body if is_main_block(b) for s in b.body] if isinstance(func, ast.Module) else []
            for stmt in [*func.body, *main]:
                if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)) and any(
                    self._needs_cuda(n) for n in _unconditional(stmt.value)
                ):
                    return True
                if self._refuses_cpus(stmt):
                    return True
        return False

    def _refuses_cpus(self, stmt: ast.stmt) -> bool:
        """`assert torch.cuda.is_available()` (or a GPU count that cannot hold without GPUs), or `if not
        torch.cuda.is_available():` with a raise or an exit inside. (A count compared with the scheduler's, `assert
        gpus == torch.cuda.device_count()`, holds with none.)"""
        if isinstance(stmt, ast.Assert):
            return self._needs_gpus(stmt.test) or (
                not isinstance(stmt.test, ast.UnaryOp) and self._asks_cuda_available(stmt.test)
            )
        return (
            isinstance(stmt, ast.If)
            and isinstance(stmt.test, ast.UnaryOp)
            and isinstance(stmt.test.op, ast.Not)
            and self._asks_cuda_available(stmt.test.operand)
            and any(isinstance(n, ast.stmt) and _fails(n, any_status=True) for n in ast.walk(stmt))
        )

    def _asks_cuda_available(self, test: ast.AST) -> bool:
        """`torch.cuda.is_available()` itself in the test (not a GPU count, not `dist.is_available()`)."""
        return self._mentions_cuda_check(test) and any(
            isinstance(n, ast.Call) and self.callee_last(n) == "is_available" for n in ast.walk(test)
        )

    def _needs_cuda(self, node: ast.AST) -> bool:
        """A call that fails without a GPU: `.cuda(...)`, `torch.cuda.set_device(...)`, `torch.cuda.current_device()`,
        `.to("cuda...")`, DDP given a list of `device_ids` (a CPU module takes none)."""
        if not isinstance(node, ast.Call):
            return False
        if self.callee_last(node) in DDP_NAMES:
            ids = keyword(node, "device_ids") or (node.args[1] if len(node.args) > 1 else None)
            return isinstance(ids, (ast.List, ast.Tuple)) and bool(ids.elts)  # (a name may hold None on CPUs)
        if not isinstance(node.func, ast.Attribute):
            return False
        if node.func.attr == "cuda":
            return True
        if self.resolve(self.callee(node)) in ("torch.cuda.set_device", "torch.cuda.current_device"):
            return True
        target = node.args[0] if node.args else keyword(node, "device")
        return node.func.attr == "to" and ((const_str(target) or "").startswith("cuda") or self._gpu_index(target))

    def _gpu_index(self, target: ast.AST | None) -> bool:
        """An int device (`.to(0)`, `.to(device)` with `device = int(os.environ["LOCAL_RANK"])` or 0 on every path):
        torch reads an int as a CUDA device's index."""

        def an_int(v: ast.AST) -> bool:
            return (
                isinstance(v, ast.Constant)
                and type(v.value) is int
                or isinstance(v, ast.Call)
                and self.callee(v) == "int"
            )

        values = self._built(target) if isinstance(target, ast.Name) else [target]
        return bool(values) and all(v is not None and an_int(v) for v in values)

    def _gpu_only_path(self, call: ast.Call, scope: ast.AST) -> bool:
        """`torch.cuda.set_device(args.gpu)` as a statement on the path of `call`: in a block that holds `call` (or
        the statement around it), before it or after it (MAE-style init_distributed_mode; `if args.distributed:
        torch.cuda.set_device(args.local_rank); init_process_group("nccl")`; LoRA's `init_process_group("nccl");
        torch.cuda.set_device(local_rank)`). That path runs on GPUs only, and nccl is its backend; gloo would not
        make it run without them."""
        on_the_way = {id(a) for a in self.ancestors(call, stop=scope)}
        for node in walk_same_function(scope.body):
            if not (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Call)
                and self.resolve(self.callee(node.value)) == "torch.cuda.set_device"
            ):
                continue
            block = block_of(self.parent.get(node), node, ("body", "orelse"))
            if block and any(id(stmt) in on_the_way for stmt in block):
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
                    self.add(
                        call,
                        "hardcoded-cuda-device",
                        WARNING,
                        ".cuda() without torch.cuda.set_device(local_rank): every rank puts its tensors on GPU 0",
                        "call torch.cuda.set_device(local_rank) before init_process_group, or use "
                        ".to(torch.device('cuda', local_rank))",
                    )
            if self.callee(call) == "torch.device" and len(call.args) == 2 and isinstance(call.args[1], ast.Constant):
                fixed = (
                    f"torch.device({call.args[0].value!r}, {call.args[1].value!r})"
                    if isinstance(call.args[0], ast.Constant)
                    else None
                )
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                text = const_str(arg)
                if text and re.fullmatch(r"cuda:\d+", text) and self.callee_last(call) != "add_argument":
                    fixed = repr(text)  # (an option's default is the user's choice, as a backend option is)
            if (
                fixed
                and re.search(r"\b0\b", fixed)
                and (self.facts.visible_per_process or self.visible_per_process_here())
            ):
                fixed = None  # each process sees only its own GPU (CUDA_VISIBLE_DEVICES from the rank): it is cuda:0
            if fixed and self.distributed:
                self.add(
                    call,
                    "hardcoded-cuda-device",
                    ERROR,
                    f"{fixed} is the same GPU on every rank: all processes share one GPU (NCCL then fails with "
                    "'Duplicate GPU detected', or the others sit idle)",
                    "use torch.device('cuda', local_rank) with local_rank = int(os.environ['LOCAL_RANK'])",
                )

    def _random_call(self, node: ast.AST) -> bool:
        if not isinstance(node, ast.Call) or keyword(node, "generator") is not None:
            return False
        full = self.callee(node)
        return (full.startswith("torch.") and last(full) in RANDOM_TORCH) or full.startswith("numpy.random.")

    def check_random_data(self) -> None:
        if not any(self._random_call(c) or self.callee_last(c) == "random_split" for c in self.calls):
            return  # nothing random drawn in this file
        tainted: dict[str, int] = {}  # names holding unseeded random values -> line
        assigns = [n for n in self.nodes if isinstance(n, ast.Assign)]
        for _ in range(3):  # y = 2 * x + noise: follow a few assignments
            for node in assigns:
                uses = any(
                    self._random_call(n) or (isinstance(n, ast.Name) and n.id in tainted) for n in ast.walk(node.value)
                )
                if uses:
                    for target in node.targets:
                        for n in ast.walk(target):
                            if isinstance(n, ast.Name):
                                tainted.setdefault(n.id, node.lineno)
        seeds = [c.lineno for c in self.calls if self.callee_last(c) in SEED_CALLS]
        fix = (
            "draw from a seeded generator: g = torch.Generator().manual_seed(0); torch.randn(..., generator=g) "
            "(or torch.manual_seed(0) first)"
        )
        for call in self.calls:
            if (
                self.callee_last(call) == "random_split"
                and keyword(call, "generator") is None
                and len(call.args) < 3
                and self.distributed
                and not any(line <= call.lineno for line in seeds)
            ):
                self.add(
                    call,
                    "unseeded-random-split",
                    WARNING,
                    "random_split without a seeded generator: every rank draws its own split, so the ranks "
                    "train on different subsets and one rank's test samples are in another's training set",
                    "random_split(dataset, lengths, generator=torch.Generator().manual_seed(0))",
                )
        flagged = False
        for call in self.calls:
            name = self.callee_last(call)
            if not name.endswith("Dataset"):
                continue
            parts = [*call.args, *(k.value for k in call.keywords)]
            random_in = any(
                self._random_call(n) or (isinstance(n, ast.Name) and n.id in tainted)
                for p in parts
                for n in ast.walk(p)
            )
            if random_in and not any(line <= call.lineno for line in seeds) and self.distributed:
                flagged = True
                self.add(
                    call,
                    "unseeded-random-data",
                    WARNING,
                    f"{name}(...) is built from random tensors drawn without a seed: every rank draws different "
                    "data, so the sampler's shards are not pieces of one dataset",
                    fix,
                )
        if flagged or not self.distributed:
            return
        # Without a Dataset: random tensors used directly by a training loop (one that calls .backward()).
        for loop in (n for n in self.nodes if isinstance(n, (ast.For, ast.While))):
            if not any(isinstance(n, ast.Attribute) and n.attr == "backward" for n in ast.walk(loop)):
                continue
            # a draw only rank 0 uses (a preview, a sample grid) is not the data the ranks train on
            used = sorted(
                {
                    tainted[n.id]
                    for n in ast.walk(loop)
                    if isinstance(n, ast.Name) and n.id in tainted and not self.runs_on_rank0_only(n, ANY_RANK0)
                }
            )
            # the data: drawn once before the loop, in its scope (draws in the loop or elsewhere are per-step noise)
            before = {
                a.lineno
                for a in assigns
                if a.lineno < loop.lineno and self.enclosing_function(a) is self.enclosing_function(loop)
            }
            drawn = [line for line in used if not any(seed <= line for seed in seeds) and line in before]
            if drawn:
                node = next(a for a in assigns if a.lineno == drawn[0])
                self.add(
                    node,
                    "unseeded-random-data",
                    WARNING,
                    "the training loop uses random tensors drawn without a seed: every rank trains on different data",
                    fix,
                )
                return

    def check_sampler(self) -> None:
        samplers = [c for c in self.calls if self.callee_last(c) == "DistributedSampler"]
        for call in self.calls:
            if self.callee_last(call) != "DataLoader":
                continue
            shuffle, sampler = keyword(call, "shuffle"), keyword(call, "sampler")
            if (
                isinstance(shuffle, ast.Constant)
                and shuffle.value is True
                and sampler is not None
                and not _is_none(sampler)
            ):
                self.add(
                    call,
                    "shuffle-with-sampler",
                    ERROR,
                    "DataLoader gets shuffle=True and a sampler: it raises 'sampler option is mutually exclusive "
                    "with shuffle'",
                    "drop shuffle=True: DistributedSampler shuffles by itself (and set_epoch reshuffles each epoch)",
                )
        if not samplers:
            # the sampler is made in an imported module (a loader factory) and nothing in the project ever calls
            # set_epoch: the script's epoch loop is where it is missing
            if self.facts.sampler and not self.facts.set_epoch and (loop := self._epoch_loop()) is not None:
                self.add(
                    loop,
                    "sampler-no-set-epoch",
                    WARNING,
                    "this epoch loop never calls sampler.set_epoch(epoch), and nothing in the project does: the "
                    "DistributedSampler built in an imported module shuffles every epoch the same way",
                    "call train_loader.sampler.set_epoch(epoch) at the start of every epoch",
                )
            return
        set_epoch_in_loop = any(
            isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch" and self._in_loop(c, across_calls=True)
            for c in self.calls
        )
        # a sampler built with shuffle=False reads the same order every epoch by design: set_epoch changes nothing
        shuffled = [
            c
            for c in samplers
            if not (isinstance(keyword(c, "shuffle"), ast.Constant) and keyword(c, "shuffle").value is False)
        ]
        if set_epoch_in_loop or not shuffled or self._sampler_handed_over(samplers):
            return
        loop = self._epoch_loop()
        if loop is not None:
            self.add(
                loop,
                "sampler-no-set-epoch",
                WARNING,
                "this epoch loop never calls sampler.set_epoch(epoch): DistributedSampler then shuffles every "
                "epoch the same way",
                "call sampler.set_epoch(epoch) at the start of every epoch",
            )
        elif (restart := self._endless_pass()) is not None:
            self.add(
                shuffled[0],
                "sampler-no-set-epoch",
                WARNING,
                f"the loader is read again and again (the `while True` on line {restart.lineno} starts a new "
                "pass each time it runs out) but this DistributedSampler's set_epoch is never called: every "
                "pass shuffles the same way",
                "count the passes and call sampler.set_epoch(n) before each one",
            )

    def _endless_pass(self) -> ast.While | None:
        """`def cycle(dl): while True: for batch in dl: yield batch` (or the same loop inline): a loop over a loader
        restarted by an outer loop that has no epoch counter: each restart is a new epoch for the sampler."""
        for node in self.nodes:
            if isinstance(node, ast.While) and any(
                isinstance(n, ast.For) and isinstance(n.iter, (ast.Name, ast.Attribute, ast.Call))
                for n in ast.walk(node)
                if n is not node
            ):
                inner = [n for n in ast.walk(node) if isinstance(n, ast.For)]
                func = self.enclosing_function(node)
                params = {a.arg for a in func.args.args} if func is not None else set()
                if any(
                    isinstance(n.iter, ast.Name) and n.iter.id in params or "loader" in dotted(n.iter).lower()
                    for n in inner
                ):
                    return node
        return None

    def _sampler_handed_over(self, samplers: list[ast.Call]) -> bool:
        """A sampler given to anything but a DataLoader (a checkpointer's epochs(), a trainer, a helper): what sets
        its epoch is there, out of this rule's sight."""
        names = {
            t.id
            for c in samplers
            if isinstance(self.parent.get(c), ast.Assign)
            for t in self.parent[c].targets
            if isinstance(t, ast.Name)
        }
        return any(
            isinstance(value, ast.Name) and value.id in names
            for call in self.calls
            if self.callee_last(call) != "DataLoader"
            for value in [*call.args, *(k.value for k in call.keywords)]
        )

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

    def _epoch_loop(self) -> ast.For | ast.While | None:
        """The loop over epochs: `for epoch in ...`, `while epoch <= max_epoch`, else the first loop around another
        loop that is not itself a loop over batches."""
        loops = [n for n in self.nodes if isinstance(n, ast.For)]
        for loop in loops:
            if "epoch" in dotted(loop.target).lower():
                return loop
        for loop in (n for n in self.nodes if isinstance(n, ast.While)):
            if any(
                isinstance(n, (ast.Name, ast.Attribute)) and "epoch" in last(dotted(n)).lower()
                for n in ast.walk(loop.test)
            ):
                return loop
        for loop in loops:
            if any(isinstance(n, ast.For) for n in ast.walk(loop) if n is not loop) and not self._over_batches(
                loop.iter
            ):
                return loop
        return None

    def check_saving(self) -> None:
        if any(self._saves(c) for c in self.calls):
            for call in self.calls:
                if isinstance(call.func, ast.Attribute) and call.func.attr == "state_dict":
                    owner = dotted(call.func.value)
                    if self.wrapped_at(owner, call):
                        if (
                            self.saves_wrapper(owner)
                            and not self._on_unwrapped_path(call, owner)
                            and not self._prefix_stripped(call)
                        ):
                            self.add_wrapper_saved(call, owner)
                    elif (func := self.enclosing_function(call)) is not None:
                        for site in self.wrapper_sites(call, self.call_sites(func)):
                            self.add_wrapper_saved(site, dotted(given_for(site, func, owner)), call)
        if not self.distributed:
            return
        by_callers: list[ast.Call] = []
        for call in self.calls:
            name = self.callee(call)
            if not self._saves(call) and (
                "save" not in last(name).lower()
                or last(name) in self.functions
                or isinstance(call.func, ast.Attribute)
                and call.func.attr.startswith("_")
                or self._data_file_write(name)
            ):
                continue  # a save function of this file is followed inside: its torch.save is the one judged
            if self._in_memory(call) or self._mentions_rank(call):
                continue  # into a BytesIO, or one file per rank
            if self.runs_on_rank0_only(call, frozenset({"global", "single"})):
                continue
            if self.runs_on_rank0_only(call, frozenset({"global", "single", "local"})):
                if not self._saves(call) and not any(g.rank0 and g.kind == "local" for g in self.guards(call)):
                    # a save known by its name only (`model.save(epoch)`, written elsewhere) with the local-rank
                    # test in its callers: reported at their calls, where the test is
                    by_callers.append(call)
                    continue
                self.add(
                    call,
                    "local-rank-save",
                    WARNING,
                    "saved when local_rank == 0: there is a local rank 0 on every machine, so every node writes "
                    "(the same file on shared storage, concurrently)",
                    "test the global rank: if dist.get_rank() == 0 (or rank == 0 with rank = int(os.environ['RANK']))",
                )
            elif self._saves(call) and not self.runs_on_rank0_only(call, ANY_RANK0):
                self.add(
                    call,
                    "unguarded-save",
                    WARNING,
                    f"{name} runs on every rank: all processes write the same file at once (a corrupt "
                    "checkpoint, or N copies)",
                    "save on global rank 0 only: if dist.get_rank() == 0: torch.save(...)",
                )
        self._save_helper_sites(by_callers)
        # Printing is per-process output: any rank-0 test keeps it to one line per job (or per node, fine for logs).
        # `builtins.print = ...` (setup_for_distributed): every print goes through the project's filter, once it
        # is installed: a print earlier in the function that installs it (or calls what does) is not filtered
        filtered = self.replaces_print_here() or self.facts.replaces_print
        prints = sorted(
            (
                c
                for c in self.calls
                if self._prints(c)
                and keyword(c, "file") is None
                and not self._mentions_rank(c, sometimes=True)
                and not self.runs_on_rank0_only(c, ANY_RANK0)
                and not self._stdout_redirected(c)
                and not self._reports_a_failure(c)
                and not self._in_a_launcher(c)
                and (not filtered or self._before_filter(c))
            ),
            key=lambda c: c.lineno,
        )
        if prints:  # the message (with the other lines) is written where the rule refines the finding
            self.add(
                prints[0],
                "unguarded-print",
                WARNING,
                "print runs on every rank: each line appears once per process, interleaved",
                "print on global rank 0 only (if rank == 0: print(...)), or put the rank in the message",
                also=[c.lineno for c in prints[1:]],
            )

    @staticmethod
    def _data_file_write(name: str) -> bool:
        """np.savetxt / np.save, a figure, an image: a data or picture file, not a checkpoint (the shared-write
        rule judges those)."""
        return last(name) in DATA_SAVES or name.split(".")[0] in ("numpy", "np", "pandas", "scipy", "cv2", "PIL")

    def _before_filter(self, call: ast.Call) -> bool:
        """A later statement of the print's own function installs the print filter (`builtins.print = ...`, or a
        call of a function that does): this print runs before it, on every rank."""
        scope = self.enclosing_function(call)
        if scope is None or any(isinstance(p, (ast.For, ast.While)) for p in self.ancestors(call, scope)):
            return False  # module level (imports run first), or a loop that may come round after the install
        installers = self.facts.print_installers
        for n in walk_same_function(scope.body):
            if getattr(n, "lineno", 0) <= call.lineno:
                continue
            if isinstance(n, ast.Call) and self.function_called(n) in installers:
                return True
            if self.sets_print(n):
                return True
        return False

    def _prints(self, call: ast.Call) -> bool:
        """print, pprint (`pprint.pprint(x)`, `pp = pprint.PrettyPrinter(); pp.pprint(x)`) to stdout, or tqdm's
        write (`tqdm.write(s)`, `pbar.write(s)`: a class method that prints whether or not the bar is disabled)."""
        if isinstance(call.func, ast.Attribute) and call.func.attr == "write":
            owner = call.func.value
            made = self._built(owner) if isinstance(owner, ast.Name) else []
            return last(self.resolve(dotted(owner))) in ("tqdm", "trange") or any(
                isinstance(v, ast.Call) and self.callee_last(v) in ("tqdm", "trange") for v in made
            )
        if any(  # `with redirect_stdout(f): print(...)`: it goes to f
            isinstance(w, (ast.With, ast.AsyncWith))
            and any(
                isinstance(i.context_expr, ast.Call) and self.callee_last(i.context_expr) == "redirect_stdout"
                for i in w.items
            )
            for w in self.ancestors(call)
        ):
            return False
        return self.callee(call) == "print" or self.callee_last(call) == "pprint" and keyword(call, "stream") is None

    def _in_a_launcher(self, call: ast.Call) -> bool:
        """The print's function hands a worker (a function of this file that makes the process group or wraps the
        model in DDP) to another call: detectron2's `print("Command Line Args:", args); launch(main, num_gpus)`,
        mp.spawn's shape under any name. That function is the launcher: it runs once, before the ranks exist."""
        scope = self.enclosing_function(call)
        if scope is None:
            return False
        launchers = self.__dict__.setdefault("_launchers", {})  # a function's prints share its answer
        if scope not in launchers:
            launchers[scope] = any(
                isinstance(a, ast.Name) and self._worker(a.id)
                for node in walk_same_function(scope.body)
                if isinstance(node, ast.Call)
                for a in [*node.args, *(k.value for k in node.keywords)]
            )
        return launchers[scope]

    def _worker(self, name: str) -> bool:
        func = self.functions.get(name)
        return func is not None and any(
            isinstance(c, ast.Call)
            and self.callee_last(c) in {"init_process_group", *DDP_NAMES, *self.facts.group_makers}
            for c in walk_same_function(func.body)
        )

    def _reports_a_failure(self, call: ast.Call) -> bool:
        """The print says why the process is about to fail or leave, or what failed in it: its block ends in a raise
        or an exit with an error status (`print("ERROR: magic number mismatch"); exit(1)`), or is a branch that
        leaves the process whatever the status (`if not enough_gpus(): print("... Exiting."); sys.exit()`), or it
        is an `except` block's (`except yaml.YAMLError as exc: print(exc)`). Each rank that fails or leaves says
        why, as it should: a rank-0 test would hide the failure of every other rank."""
        stmt = self.statement_of(call)
        parent = self.parent.get(stmt)
        if isinstance(parent, ast.ExceptHandler):
            return True
        block = block_of(parent, stmt)
        if block is None:
            return False
        return (
            _fails(block[-1])
            or (isinstance(parent, ast.If) and _fails(block[-1], any_status=True))
            or self._leaves_unbound(parent, block)
        )

    def _leaves_unbound(self, branch: ast.AST, block: list[ast.stmt]) -> bool:
        """`block` is the final `else:` of an if/elif chain and only prints (`else: print("Invalid batch size!")`),
        while every other branch assigns a name the code after the chain reads (`lr = 1e-4`): on this path that
        name is unbound, and the process fails on the next lines (NameError)."""
        if not (isinstance(branch, ast.If) and block is branch.orelse and all(isinstance(s, ast.Expr) for s in block)):
            return False
        top, others = branch, [branch.body]
        while isinstance(up := self.parent.get(top), ast.If) and up.orelse == [top]:
            top = up
            others.append(top.body)

        def stored(stmts: list[ast.stmt]) -> set[str]:
            return {n.id for n in walk_same_function(stmts) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

        everywhere = set.intersection(*(stored(b) for b in others)) - stored(block)
        after = block_of(self.parent.get(top), top)
        later = after[after.index(top) + 1 :] if after else []
        return any(
            isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in everywhere
            for n in walk_same_function(later)
        )

    def _stdout_redirected(self, call: ast.Call) -> bool:
        """`sys.stdout = f` earlier in the same function: the print writes that file (a write, judged as one), not
        the console."""
        scope = self.enclosing_function(call)
        return any(
            isinstance(n, ast.Assign)
            and n.lineno < call.lineno
            and self.enclosing_function(n) is scope
            and any(self.resolve(dotted(t)) == "sys.stdout" for t in n.targets)
            and not self.resolve(dotted(n.value)).startswith("sys.__")
            for n in self.nodes
        )

    def _saves(self, call: ast.Call) -> bool:
        """torch.save, or a call the project names a checkpoint write (pyproject's save-calls)."""
        name = self.callee(call)
        return name in SAVE_CALLS or last(name) in SAVE_CALLS

    def _save_helper_sites(self, saves: list[ast.Call]) -> None:
        """A save helper of this file called under `local_rank == 0` (at one site and elsewhere at another, or with
        the test in its callers only: `saves`): its save is judged by all its callers together, so the per-node
        writer is reported at its own call, where the test is."""
        by_function: dict[ast.AST, list[ast.Call]] = {}
        for c in self.calls:
            if (
                (c in saves or self._saves(c))
                and (func := self.enclosing_function(c)) is not None
                and not self._in_memory(c)
                and not self._mentions_rank(c)
            ):
                by_function.setdefault(func, []).append(c)
        for func, saves in by_function.items():
            if any(f.rule == "local-rank-save" and f.line == self.line_of(saves[0]) for f in self.findings):
                continue
            for site in self.call_sites(func):
                if not self.runs_on_rank0_only(site, frozenset({"global", "single"})) and self.runs_on_rank0_only(
                    site, frozenset({"global", "single", "local"})
                ):
                    self.add(
                        site,
                        "local-rank-save",
                        WARNING,
                        f"{func.name}() saves (torch.save on line {saves[0].lineno}) when local_rank == 0: there "
                        "is a local rank 0 on every machine, so every node writes the same file",
                        "test the global rank: if dist.get_rank() == 0 (or rank == 0 with rank = "
                        "int(os.environ['RANK']))",
                    )

    def _in_memory(self, call: ast.Call) -> bool:
        """torch.save(obj, buf) into an io.BytesIO: nothing is written to a file there."""
        target = call.args[1] if len(call.args) > 1 else keyword(call, "f")
        if target is None:
            return False
        if isinstance(target, ast.Call):
            return last(self.callee(target)) == "BytesIO"
        return any(
            isinstance(v, ast.Call) and last(self.callee(v)) == "BytesIO"
            for v in self._built(target, self.enclosing_function(call))
        )

    def _mentions_rank(self, call: ast.Call, sometimes: bool = False) -> bool:
        """The rank (or the process id) is in the arguments: each process says who it is, or writes its own file.
        `sometimes`: a name the rank labels on some path counts (`device = "cuda"`, then `device = f"cuda:{rank}"`
        when DDP is on: printed, it says which process speaks wherever there are several)."""
        held = self.rank_labelled if sometimes else self.rank_derived
        for node in ast.walk(call):
            if node is call:
                continue
            if isinstance(node, ast.Call) and last(self.callee(node)) in UNIQUE_NAMES:
                return True
            if isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and self.rank_kind(node):
                return True
            if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and self._held(held, node):
                return True  # device = torch.device(f"cuda:{local_rank}"): printing it says who prints
            if (
                isinstance(node, ast.Name)
                and self._held(self.rank_labelled, node)
                and self._per_rank_when_several(node)
            ):
                return True
        return False

    def _per_rank_when_several(self, name: ast.Name) -> bool:
        """`suffix = ""`, then `if get_world_size() > 1: suffix = f"_{dist.get_rank()}"`: the name is a per-rank
        label wherever there are several processes (a constant only for the one process)."""
        scope = self.enclosing_function(name)
        assigns = [
            n
            for n in (walk_same_function(scope.body) if scope else self.tree.body)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name.id for t in n.targets)
        ]
        labels = [a for a in assigns if not isinstance(a.value, ast.Constant)]
        return bool(labels) and all(
            self._labels_rank(a.value)
            and any(
                isinstance(p, ast.If) and a in p.body and self._launcher_test(p.test) is True for p in self.ancestors(a)
            )
            for a in labels
        )

    def _prefix_stripped(self, call: ast.Call) -> bool:
        """The wrapper's state_dict goes through code that takes 'module.' off its keys: in the same statement
        (`{k.replace("module.", ""): v for k, v in model.state_dict().items()}`), or handed to a function of this
        file that does (`translate_state_dict(model.state_dict())`, its body naming the prefix)."""

        def names_prefix(node: ast.AST) -> bool:
            return any((const_str(n) or "").startswith("module") for n in ast.walk(node))

        parent = self.parent.get(call)
        if isinstance(parent, ast.Call) and call in parent.args:
            func = self.functions.get(self.function_called(parent) or "")
            if func is not None and names_prefix(func):
                return True
        return names_prefix(self.statement_of(call))

    def saves_wrapper(self, wrapper: str) -> bool:
        """What `wrapper.state_dict()` saved is not loaded back into a wrapper, nor its `module.` taken off."""
        return wrapper not in self.loaded_into and not self._handed_to_loader(wrapper)

    def wrapper_sites(self, call: ast.Call, sites: list[ast.Call], readers=None) -> list[ast.Call]:
        """Of `sites` (calls of the function around `call`, a `param.state_dict()` the file saves), those that fill
        the parameter with a DDP wrapper saved as it is (`save_model(..., model_without_ddp=model)` with `model =
        DDP(model)`); `readers`: the reader of each site (this file's by default)."""
        func, param = self.enclosing_function(call), dotted(call.func.value)
        if func is None or param not in {a.arg for a in func.args.args} or self._prefix_stripped(call):
            return []
        if any(
            isinstance(w, ast.With)
            and any(
                isinstance(i.context_expr, ast.Call) and self.callee_last(i.context_expr) == "state_dict_type"
                for i in w.items
            )
            for w in self.ancestors(call)
        ):
            return []  # `with FSDP.state_dict_type(model, ...): model.state_dict()`: an FSDP model's, on purpose
        if param in self.stores(func):
            return []  # reassigned in the function: not (only) what the call gave
        if any(
            isinstance(n, ast.Attribute) and n.attr == "module" and dotted(n.value) == param for n in ast.walk(func)
        ):
            return []  # `if distributed: model.module.state_dict() else: model.state_dict()`: it unwraps a wrapper
        if any(isinstance(n, ast.Call) and dotted(n.func) == param for n in ast.walk(func)):
            return []  # it trains through the parameter (`model(x)`): the wrapper is what it must be handed
        found = []
        for site in sites:
            reader = self if readers is None else readers[site]
            given = dotted(given_for(site, func, param))
            if given and reader.wrapped_at(given, site):
                if reader.saves_wrapper(given):
                    found.append(site)
        return found

    def add_wrapper_saved(self, node: ast.AST, wrapper: str, saved: ast.Call | None = None, where: str = "") -> None:
        """save-ddp-state-dict at `node`: `wrapper.state_dict()` saved, or (`saved`: `param.state_dict()` at line
        `saved.lineno` of file `where`, this one's by default) the wrapper handed to a function that saves it."""
        if saved is None:
            what, fix = f"{wrapper}.state_dict() is the DDP wrapper's", f"save {wrapper}.module.state_dict()"
        else:
            param, at = dotted(saved.func.value), f"{where}:{saved.lineno}" if where else f"line {saved.lineno}"
            what = f"{wrapper}, the DDP wrapper, is handed over as {param}, whose state_dict() is saved ({at})"
            fix = f"hand over the plain model: {param}={wrapper}.module"
        self.add(
            node,
            "save-ddp-state-dict",
            WARNING,
            f"{what}: every key starts with 'module.', so the file does not load into the plain model",
            fix,
        )

    def _handed_to_loader(self, owner: str) -> bool:
        """The wrapper is given to a helper that loads or resumes (restart_from_checkpoint(..., model=ddp)): its
        checkpoints go back into the wrapper."""
        return any(
            any(dotted(a) == owner for a in [*c.args, *(k.value for k in c.keywords)])
            and any(w in self.callee_last(c).lower() for w in ("load", "restore", "resume", "restart"))
            for c in self.calls
        )

    def _maps_nowhere(self, where: ast.AST | None, call: ast.Call) -> bool:
        """No map_location: none given, None, or a parameter of the function every call of it leaves None (`def
        read_pkl(path, map_location=None): torch.load(path, map_location=map_location)`, called `read_pkl(p)`)."""
        if where is None or _is_none(where):
            return True
        func = self.enclosing_function(call)
        if not isinstance(where, ast.Name) or func is None or not self._parameter(where):
            return False
        if where.id in self.stores(func):
            return False  # `if map_location is None: map_location = "cpu"`
        sites = self.call_sites(func)
        return bool(sites) and all(_is_none(passed(site, func, where.id)) for site in sites)

    def check_loading(self) -> None:
        if not self.distributed:
            return  # no process group, no DDP anywhere in the project (a DataParallel script): one process loads
        for call in self.calls:
            if (
                self.callee(call) == "torch.load"
                and self._maps_nowhere(keyword(call, "map_location"), call)
                and len(call.args) < 2
                and not any(k.arg is None for k in call.keywords)
            ):  # **kwargs may carry map_location
                if self.runs_on_rank0_only(call, ANY_RANK0) or self._in_branch_never_taken(call):
                    continue  # one process (per node) loads: the saving GPU is its own, no other rank's lands there
                own = self._mentions_rank(call)  # queue{rank}.pth: this rank saved it from its own GPU
                if self._loaded_as_data(call):
                    self.add(
                        call,
                        "load-no-map-location",
                        WARNING,
                        "torch.load without map_location puts every tensor back on the device it was saved from",
                        "torch.load(path, map_location=device) (this rank's device, or 'cpu')",
                        sure=False,
                        why="what is loaded is data (used as a tensor: .size(), .numpy(), ...; or loaded by a "
                        "data set's own method), not a model's weights: a data file is usually written from the CPU, "
                        "where it comes back",
                    )
                    continue
                self.add(
                    call,
                    "load-no-map-location",
                    WARNING,
                    "torch.load without map_location puts every tensor back on the device it was saved from "
                    "(cuda:0): every rank loads onto GPU 0",
                    "torch.load(path, map_location=device) (this rank's device, or 'cpu')",
                    sure=not own,
                    why="the file is this rank's own (the rank is in its path): saved from this rank's GPU, it "
                    "goes back there unless the GPU layout changed between runs"
                    if own
                    else "",
                )

    def _loaded_as_data(self, call: ast.Call) -> bool:
        """The loaded object is used as a tensor of data (`torch.load(f).numpy()`, `freq = torch.load(f)` then
        `freq.size(0)`), never as a checkpoint (given to load_state_dict, indexed by a key, .items() / .keys()); or
        it is loaded by a data set's own method (a class with `__getitem__`: what it loads are its samples)."""
        func = self.enclosing_function(call)
        owner = self.parent.get(func) if func is not None else None
        if isinstance(owner, ast.ClassDef) and any(
            isinstance(n, ast.FunctionDef) and n.name == "__getitem__" for n in owner.body
        ):
            return True
        parent = self.parent.get(call)
        if isinstance(parent, ast.Attribute):
            return parent.attr in DATA_USES
        if not (
            isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)
        ):
            return False
        name, scope = parent.targets[0].id, self.enclosing_function(call)
        uses = [
            n
            for n in (walk_same_function(scope.body) if scope else self.nodes)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno >= call.lineno
        ]
        data = checkpoint = False
        for use in uses:
            holder = self.parent.get(use)
            if isinstance(holder, ast.Attribute):
                data |= holder.attr in DATA_USES
                checkpoint |= holder.attr in ("items", "keys", "get", "values")
            elif isinstance(holder, ast.Subscript) and const_str(holder.slice) is not None:
                checkpoint = True  # ckpt["model"]
            elif isinstance(holder, ast.Call) and use in holder.args and self.callee_last(holder) == "load_state_dict":
                checkpoint = True
            elif isinstance(holder, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in holder.ops):
                checkpoint = True  # "model" in ckpt
        return data and not checkpoint

    def check_teardown(self) -> None:
        inits = [
            c
            for c in self.calls
            if self.callee_last(c) == "init_process_group" or self.callee(c) in LIBRARY_GROUP_MAKERS
        ]
        if not inits or self.destroys_group() or self.facts.destroys:
            return
        # the first init of each function: one of them may be a setup nothing calls (a Slurm variant kept beside the
        # one the script runs); the engine keeps the finding of one that runs (the rule is `once`)
        firsts = {}
        for init in inits:
            firsts.setdefault(self.enclosing_function(init), init)
        for init in firsts.values():
            endless = self._ends_in_endless_loop(init)
            self.add(
                init,
                "no-destroy",
                WARNING,
                "the process group is never destroyed: on exit or after an error the other ranks may wait for "
                "this one until the timeout",
                "call dist.destroy_process_group() at the end, in a `finally:` so that it runs after errors too",
                sure=not endless,
                why="the run ends in a `while True` loop with no way out but an error: a "
                "destroy at the end would never run"
                if endless
                else "",
            )

    def destroys_group(self, used: set[str] | None = None) -> bool:
        """A destroy_process_group that runs: at module level, or in a function something names (`used`: the
        names of the project, else this file's). In a file whose `__main__` block says how it runs, a `cleanup()`
        nothing calls destroys nothing; without one, its functions are read as called."""
        destroys = self.calls_by_name.get("destroy_process_group", [])
        if not destroys or not any(is_main_block(n) for n in self.tree.body):
            return bool(destroys)
        if used is None:
            used = {
                n.id if isinstance(n, ast.Name) else n.attr
                for n in self.nodes
                if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load)
            }
        return any((func := self.enclosing_function(c)) is None or func.name in used for c in destroys)

    def _ends_in_endless_loop(self, node: ast.AST) -> bool:
        """After this line the function (or module) enters `while True:` with no break: only an error ends it."""
        scope = self.enclosing_function(node) or self.tree
        return any(
            isinstance(n, ast.While)
            and isinstance(n.test, ast.Constant)
            and n.test.value is True
            and n.lineno > node.lineno
            and not any(isinstance(b, (ast.Break, ast.Return)) for b in walk_same_function(n.body, False))
            for n in walk_same_function(scope.body)
        )

    def check_ddp_device_ids(self) -> None:
        """torch's DDP on a GPU with no device_ids: fine when the current device was set (a single-device module on
        this process's GPU needs none), a mistake when the model sits on the default GPU. Wrappers of other
        libraries (apex, fairscale) have their own signatures: apex's DDP takes no device_ids at all."""
        gpu = self.backend == "nccl" or any(
            isinstance(c.func, ast.Attribute) and c.func.attr == "cuda" or self._bare_cuda(c) for c in self.calls
        )
        if not gpu:
            return
        for call in self.calls:
            if self.sets_device and not self._other_branch_sets_device(call):
                continue  # the device is set on this path (not only on the other branch of an `if`)
            if (
                self.callee_last(call) in DDP_NAMES
                and self.is_torch_ddp(call)
                and keyword(call, "device_ids") is None
                and len(call.args) < 2
            ):
                self.add(
                    call,
                    "ddp-no-device-ids",
                    WARNING,
                    "DistributedDataParallel without device_ids, and the current device is not set on this path: "
                    "the model sits on the default GPU, GPU 0 on every rank",
                    "DDP(model, device_ids=[local_rank]) on GPU (device_ids=None on CPU)",
                )

    def _on_unwrapped_path(self, node: ast.AST, owner: str) -> bool:
        """`model.module.state_dict() if args.distributed else model.state_dict()`, with `model = DDP(model)` only
        under `if args.distributed:`: on the branch where that flag is false the model was never wrapped. Also the
        branch the innermost wrapper test of its function sends plain models to (`... if hasattr(net, "module") else
        net.state_dict()`, `isinstance(net, DDP)`), and the `except:` after a `try:` that reads `net.module` (the
        fallback for a model that has none)."""
        flags = set()
        for n in self.nodes:
            if (
                isinstance(n, ast.Assign)
                and any(dotted(t) == owner for t in n.targets)
                and isinstance(n.value, ast.Call)
                and (self.callee_last(n.value) in DDP_NAMES or self.callee_last(n.value) in self.facts.ddp_factories)
            ):
                flags |= self._conditions(n)
        # no wrapper test counts once the innermost one was met, or the walk left the node's function
        child, parent, wrapper_settled = node, self.parent.get(node), False
        while parent is not None:
            wrapper_settled |= isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ExceptHandler) and isinstance(parent, ast.Try):
                if any(dotted(n) == f"{owner}.module" for s in parent.body for n in ast.walk(s)):
                    return True
            if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
                test, branch = said_plainly(parent.test), parent.orelse  # the flag's else, or its negation's body
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                    test, branch = test.operand, parent.body
                unwrapped = child in (branch if isinstance(branch, list) else [branch])
                if unwrapped and dotted(test) in flags:
                    return True
                # a test of the model in any form (`is_parallel(model)`, `type(model) in (DataParallel, DDP)`) beside
                # a branch that takes `owner.module`: this branch is where the model has none
                branches = [b if isinstance(b, list) else [b] for b in (parent.body, parent.orelse)]
                beside = [n for b in branches if child not in b for part in b for n in ast.walk(part)]
                unwraps = any(dotted(n) == f"{owner}.module" for n in beside) and any(
                    dotted(n) == owner for n in ast.walk(test)
                )
                if not wrapper_settled and (unwraps or self._wrapper_test(test, owner)):
                    if unwrapped or unwraps:
                        return True
                    wrapper_settled = True
            child, parent = parent, self.parent.get(parent)
        return False

    def _wrapper_test(self, test: ast.AST, owner: str) -> bool:
        """`hasattr(owner, "module")` / `isinstance(owner, DDP)`."""
        return (
            isinstance(test, ast.Call)
            and len(test.args) == 2
            and dotted(test.args[0]) == owner
            and (
                self.callee_last(test) == "hasattr"
                and const_str(test.args[1]) == "module"
                or self.callee_last(test) == "isinstance"
                and last(dotted(test.args[1])) in DDP_NAMES
            )
        )

    def check_collectives_in_rank_branches(self) -> None:
        for call in self.calls:
            if not self.is_collective(call):
                continue
            name = self.callee_last(call)
            direct = [g for g in self.guards(call) if g.kind != "single"]
            if not direct:
                self._collective_in_guarded_helper(call, name)
            for guard in direct:
                paired = any(
                    isinstance(n, ast.Call) and self.callee_last(n) == name
                    for branch in guard.other
                    for n in ast.walk(branch)
                ) or self._paired_elsewhere(call, name, guard)
                if not paired:
                    who = "rank 0" if guard.rank0 else "every rank but 0"
                    self.add(
                        call,
                        "collective-in-rank-branch",
                        ERROR,
                        f"{name} runs on {who} only (the {guard.kind} rank test on line {guard.node.lineno}): "
                        "a collective needs every rank, so the others never join and it hangs",
                        f"call {name} on every rank, outside the rank test; keep only the printing/saving inside",
                    )
                    break

    def _collective_in_guarded_helper(
        self, call: ast.Call, name: str, depth: int = 0, func: ast.AST | None = None
    ) -> None:
        """`if rank == 0: val = evaluate(model)` where evaluate (or a helper it calls) runs all_reduce: the
        collective runs on rank 0 only, reported at the guarded call."""
        func = func or self.enclosing_function(call)
        if func is None or depth > 3 or func.name in self.passed:
            return
        sites = self.call_sites(func)
        if not sites or not all(self.runs_on_rank0_only(s, ANY_RANK0 - {"single"}) for s in sites):
            return
        for site in sites:
            guards = [g for g in self.guards(site) if g.kind != "single"]
            if not guards:
                self._collective_in_guarded_helper(call, name, depth + 1, self.enclosing_function(site))
                continue
            if any(
                isinstance(n, ast.Call) and self.callee_last(n) == func.name
                for g in guards
                for branch in g.other
                for n in ast.walk(branch)
            ):
                continue  # the same helper on the other ranks' branch too
            who = "rank 0" if guards[0].rank0 else "every rank but 0"
            self.add(
                site,
                "collective-in-rank-branch",
                ERROR,
                f"{func.name}() runs {name} (line {call.lineno}) and is called on {who} only here (the "
                f"{guards[0].kind} rank test on line {guards[0].node.lineno}): a collective needs every rank, "
                "so the others never join and it hangs",
                f"call {func.name}() on every rank, outside the rank test; keep only the printing/saving inside",
            )

    def _paired_elsewhere(self, call: ast.Call, name: str, guard) -> bool:
        """ "Rank 0 goes first": `if rank != 0: barrier()` ... `if rank == 0: barrier()` in the same function. The
        same collective under the opposite test of the same kind: every rank reaches it once."""
        scope = self.enclosing_function(call)
        return any(
            other is not call
            and self.callee_last(other) == name
            and self.enclosing_function(other) is scope
            and any(g.kind == guard.kind and g.rank0 != guard.rank0 for g in self.guards(other))
            for other in self.calls
        )

    def check_rank0_ddp_forward(self) -> None:
        """DDP's forward broadcasts the module's buffers from rank 0 (broadcast_buffers=True, the default), also
        under torch.no_grad() in the first forward after a training step: a forward through the wrapper on rank 0
        alone is a broadcast nobody else joins. Checked by running it: 2 gloo ranks, BatchNorm1d, rank 0 evaluating
        through the wrapper: both ranks stop at "Timed out waiting ... for send operation to complete"."""
        syncs = [c for c in self.calls if self._syncs_buffers(c)]
        has_buffers = any(self._builds_buffers(c, self.facts.buffer_classes) for c in self.calls)
        # `model = get_model(local_rank)`, a project function that builds a BatchNorm model and wraps it in DDP
        made = any(self.callee_last(c) in self.facts.buffer_factories for c in self.calls)
        if not (syncs and has_buffers or made):
            return
        handed = self._wrapper_params
        for call in self.calls:
            name = dotted(call.func)
            owner = name[: -len(".forward")] if name.endswith(".forward") else name
            param = owner in handed.get(self.enclosing_function(call), ())
            if not (param or self.holds_ddp(owner, call)) or not self.runs_on_rank0_only(call, ANY_RANK0 - {"single"}):
                continue
            if not param and self.ddp_names.get(owner, 0) > call.lineno:
                continue  # `logits = model(x)` before `model = DDP(model)`: the bare module, no broadcast yet
            self.add(
                call,
                "rank0-ddp-forward",
                ERROR,
                f"{owner}(...) runs the DDP wrapper's forward on rank 0 only: DDP broadcasts the module's "
                "buffers (BatchNorm running stats) in forward, also under torch.no_grad(), and the other ranks "
                "never join that broadcast: the run hangs",
                f"evaluate the plain module on rank 0 ({owner}.module(...)), or evaluate on every rank and "
                "all_reduce the metric",
            )

    def _builds_buffers(self, call: ast.Call, classes: set[str]) -> bool:
        """A layer with buffers (BatchNorm, ...), a torchvision model with BatchNorm, or a project class with one."""
        return bool(
            BUFFER_LAYERS.fullmatch(self.callee_last(call))
            or self.callee(call).startswith("torchvision.models.")
            and BATCHNORM_MODELS.fullmatch(self.callee_last(call))
            or self.callee_last(call) in classes
        )

    def buffer_factories(self, factories: set[str], classes: set[str]) -> set[str]:
        """This file's DDP factories (`factories`) that build a model with buffers and wrap it with DDP's buffer
        broadcast on (faa's `get_model`: `resnet18(...)`, then `DistributedDataParallel(model, ...)`)."""
        return {
            func.name
            for func in self.nodes
            if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and func.name in factories
            if any(isinstance(c, ast.Call) and self._builds_buffers(c, classes) for c in ast.walk(func))
            and any(isinstance(c, ast.Call) and self._syncs_buffers(c) for c in ast.walk(func))
        }

    def _syncs_buffers(self, call: ast.Call) -> bool:
        """A DDP wrapper built with its buffer broadcast on (the default; not `broadcast_buffers=False`)."""
        return self.callee_last(call) in DDP_NAMES and not any(
            isinstance(keyword(call, k), ast.Constant) and keyword(call, k).value is False
            for k in ("broadcast_buffers", "forward_sync_buffers")
        )

    @functools.cached_property
    def _wrapper_params(self) -> dict[ast.AST, set[str]]:
        """Each function's parameters every call of it in this file fills with the DDP wrapper (`train(model)` with
        `model = DDP(...)`, then `validate(model, x)` inside train), three calls deep."""
        held: dict[ast.AST, set[str]] = {}

        def wrapper_at(site: ast.Call, func: ast.AST, param: str) -> bool:
            given = dotted(given_for(site, func, param))
            return bool(given) and (
                self.wrapped_at(given, site) or given in held.get(self.enclosing_function(site), ())
            )

        for _ in range(3):
            for func in (n for n in self.nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                sites = self.call_sites(func)
                found = {a.arg for a in func.args.args if sites and all(wrapper_at(s, func, a.arg) for s in sites)}
                if found - held.get(func, set()):
                    held[func] = held.get(func, set()) | found
        return held

    def check_loader_without_sampler(self) -> None:
        if not (self.distributed or self.facts.distributed):
            return
        samplers = [c for c in self.calls if self.callee_last(c) == "DistributedSampler"]
        for call in self.calls:
            if self.callee_last(call) != "DataLoader":
                continue
            shuffle, sampler = keyword(call, "shuffle"), keyword(call, "sampler")
            always_none = sampler is not None and self._always_none(sampler)
            drawn = self._one_process_sampler(sampler)  # sampler=RandomSampler(ds): shuffle=True by another name
            shuffled = (
                isinstance(shuffle, ast.Constant)
                and shuffle.value is True
                or (
                    always_none
                    and isinstance(shuffle, ast.Compare)
                    and isinstance(shuffle.ops[0], ast.Is)
                    and dotted(shuffle.left) == dotted(sampler)
                )
            )  # shuffle=(sampler is None)
            if drawn is None and (
                not shuffled or (sampler is not None and not always_none) or keyword(call, "batch_sampler") is not None
            ):
                continue
            if (
                self.runs_on_rank0_only(call, ANY_RANK0)
                or self._read_on_rank0_only(call)
                or self._dataset_sharded(call)
                or self._for_evaluation(call)
            ):
                continue
            beside = f" (the DistributedSampler on line {samplers[0].lineno} is not given to it)" if samplers else ""
            what = f"DataLoader(sampler={drawn}(...))" if drawn else "DataLoader(shuffle=True)"
            # the project has a data set that shards its own loaders, and this loader's data set comes from elsewhere
            inner = sorted(self.facts.sharding_datasets) if not self._dataset_seen(call) else []
            self.add(
                call,
                "loader-without-sampler",
                WARNING,
                f"{what} without a DistributedSampler: every rank reads the whole dataset in "
                f"its own order, so the ranks do not split the data and an epoch is N times the work{beside}",
                "DataLoader(dataset, sampler=DistributedSampler(dataset), shuffle=False) and "
                "sampler.set_epoch(epoch) every epoch",
                sure=not inner,
                why=f"the data set comes from elsewhere, and the project's {inner[0]} shards its own loaders with a "
                "DistributedSampler: if it is one, each item is already this rank's"
                if inner
                else "",
            )

    def _dataset_seen(self, call: ast.Call) -> bool:
        """The loader's data set is made where this file shows (`DataLoader(MyData(...))`, `ds = MyData(...)`), not
        handed in (a parameter) or read from elsewhere."""
        dataset = call.args[0] if call.args else keyword(call, "dataset")
        return dataset is not None and (
            not isinstance(dataset, (ast.Name, ast.Attribute)) or bool(self._built(dataset))
        )

    def _read_on_rank0_only(self, call: ast.Call) -> bool:
        """The loader is built on every rank but read on rank 0 alone (`preview = DataLoader(...)`, then under `if
        rank == 0:` `next(iter(preview))`): no two ranks read its samples."""
        parent = self.parent.get(call)
        if not (
            isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)
        ):
            return False
        name, scope = parent.targets[0].id, self.enclosing_function(call)
        reads = [
            n
            for n in walk_same_function(scope.body if scope else self.tree.body)
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
        ]
        return bool(reads) and all(self.runs_on_rank0_only(n, ANY_RANK0) for n in reads)

    def _one_process_sampler(self, sampler: ast.AST | None) -> str | None:
        """`sampler=RandomSampler(ds)` (or a name only ever given one): a shuffling sampler of one process, which
        draws from the whole dataset on every rank; its class name."""
        value = self._reaching_value(sampler) if isinstance(sampler, ast.Name) else sampler
        if isinstance(value, ast.Call) and self.callee_last(value) in ONE_PROCESS_SAMPLERS:
            return self.callee_last(value)
        return None

    def _always_none(self, name: ast.AST) -> bool:
        """`sampler=train_sampler` where train_sampler is only ever assigned None."""
        return _is_none(self._reaching_value(name) if isinstance(name, ast.Name) else name)

    def _for_evaluation(self, call: ast.Call) -> bool:
        """A validation/test loader (by its name, a dataset built with train=False, or built where no gradient is
        taken: under `@torch.no_grad()` or `with torch.no_grad():`): every rank reading all of it costs time, not
        correctness."""
        parent = self.parent.get(call)
        names = [dotted(t).lower() for t in getattr(parent, "targets", [])]
        if any(w in n for n in names for w in ("val", "test", "eval")) or self._without_grad(call):
            return True
        return any(
            isinstance(n, ast.Call)
            and isinstance(keyword(n, "train"), ast.Constant)
            and keyword(n, "train").value is False
            for n in ast.walk(call)
        )

    def _without_grad(self, node: ast.AST) -> bool:
        """`node` runs with gradients off: inside `with torch.no_grad():` (or inference_mode) or a function decorated
        with either."""
        for a in self.ancestors(node):
            exprs = [i.context_expr for i in a.items] if isinstance(a, ast.With) else getattr(a, "decorator_list", [])
            if any(last(dotted(e)) in ("no_grad", "inference_mode") for e in exprs):
                return True
        return False

    def _dataset_sharded(self, call: ast.Call) -> bool:
        """The dataset given to the loader is already this rank's piece (built from the rank)."""
        dataset = call.args[0] if call.args else keyword(call, "dataset")
        if dataset is None:
            return False
        exprs = [dataset, *(self._built(dataset) if dotted(dataset) else [])]
        if any(isinstance(e, ast.Call) and self.callee_last(e) in self.facts.sharding_datasets for e in exprs):
            return True  # a project data set that shards its own loaders (each item one of this rank's batches)
        # or drawn from a seed the rank flows into (`g = torch.Generator().manual_seed(1000 + rank)`, `torch.randn(n,
        # generator=g)`; `torch.manual_seed(rank)` before the draw): each rank has its own data by construction
        flow = self._flow(dataset)
        seeds = [c for c in flow if isinstance(c, ast.Call) and self.callee_last(c) in SEED_CALLS | RNG_MAKERS]
        for draw in (d for d in flow if self._random_call(d)):  # the last seed before an unseeded draw, in its function
            scope = self.enclosing_function(draw)
            before = [
                c
                for c in self.calls
                if self.callee_last(c) in SEED_CALLS and c.lineno <= draw.lineno and self.enclosing_function(c) is scope
            ]
            seeds += [max(before, key=lambda c: c.lineno)] if before else []
        return any(
            isinstance(n, (ast.Name, ast.Attribute, ast.Call, ast.Subscript)) and self.rank_kind(n)
            for n in [
                *(m for e in exprs for m in ast.walk(e)),
                *(m for c in seeds if c.args for m in self._flow(c.args[0])),
            ]
        )

    def _flow(self, expr: ast.AST, depth: int = 4) -> list[ast.AST]:
        """The nodes of `expr` and of what its names are assigned, followed `depth` assignments back."""
        names = {n.id: n for n in ast.walk(expr) if isinstance(n, ast.Name) and depth}
        return [*ast.walk(expr), *(m for n in names.values() for v in self._built(n) for m in self._flow(v, depth - 1))]

    def check_grad_accumulation(self) -> None:
        """Micro-steps that only accumulate still all-reduce every backward unless DDP is told not to."""
        if (
            not (self.ddp_names or self.facts.ddp)
            or self.facts.no_sync
            or any(
                (isinstance(n, ast.Attribute) and n.attr in ("no_sync", "require_backward_grad_sync"))
                for n in self.nodes
            )
        ):
            return
        for loop in (n for n in self.nodes if isinstance(n, (ast.For, ast.While))):
            here = list(walk_same_function(loop.body, into_loops=False))  # this loop's own level
            backward = next((c for c in here if isinstance(c, ast.Call) and method_name(c) == "backward"), None)
            if backward is None:
                # loss_scaler(loss, optimizer, update_grad=(i + 1) % accum_iter == 0): backward every call, the step
                # every k-th, inside a helper
                if any(
                    isinstance(c, ast.Call)
                    and any(
                        isinstance(k.value, ast.Compare)
                        and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(k.value))
                        for k in c.keywords
                    )
                    and any("loss" in dotted(a).lower() for a in c.args)
                    for c in here
                ):
                    self.add(
                        loop,
                        "grad-accum-no-sync",
                        WARNING,
                        "gradient accumulation without no_sync(): the helper runs backward every micro-step and "
                        "steps every k-th, and DDP all-reduces the gradients in each of those backwards (k-1 of "
                        "every k all-reduces are wasted)",
                        "run the micro-steps but the last inside `with model.no_sync():`",
                    )
                continue
            # `if (i + 1) % accum == 0: optimizer.step()` beside a backward on every iteration
            stepped_every_k = any(
                isinstance(n, ast.If)
                and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(n.test))
                and any(method_name(c) == "step" for c in calls_in(n.body))
                and not any(c is backward for c in calls_in(n.body))
                for n in here
            ) or self._skips_until_every_k(loop, backward)
            # `for micro_step in range(accum): ... backward()` inside a loop that steps after it
            outer = self.parent.get(loop)
            while outer is not None and not isinstance(outer, (ast.For, ast.While, ast.FunctionDef, ast.Module)):
                outer = self.parent.get(outer)
            inner_no_step = (
                isinstance(outer, (ast.For, ast.While))
                and not any(method_name(c) == "step" for c in calls_in(loop.body))
                and any(
                    isinstance(c, ast.Call) and method_name(c) == "step" and c.lineno > loop.lineno
                    for c in walk_same_function(outer.body, into_loops=False)
                )
            )
            if stepped_every_k or inner_no_step:
                self.add(
                    backward,  # where DDP all-reduces each micro-step: the statement no_sync() must wrap
                    "grad-accum-no-sync",
                    WARNING,
                    "gradient accumulation without no_sync(): DDP all-reduces the gradients in every "
                    "backward, also on the micro-steps where no optimizer step follows (k-1 of every k "
                    "all-reduces are wasted)",
                    "run the micro-steps but the last inside `with model.no_sync():` (or set "
                    "model.require_backward_grad_sync = is_last_micro_step before the forward)",
                )

    def _skips_until_every_k(self, loop: ast.AST, backward: ast.Call) -> bool:
        """`if batch_idx % k != 0: continue` after the backward, then `optimizer.step()` further down the loop's
        body: accumulation written as an early skip."""
        for i, stmt in enumerate(loop.body):
            if (
                isinstance(stmt, ast.If)
                and isinstance(stmt.body[-1], ast.Continue)
                and stmt.lineno > backward.lineno
                and any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mod) for b in ast.walk(stmt.test))
            ):
                return any(
                    method_name(c) == "step" and "sched" not in dotted(c.func.value).lower()
                    for c in calls_in(loop.body[i + 1 :])
                )
        return False


PLATFORM_TESTS = {"os.name", "sys.platform", "platform.system"}
WINDOWS = {"nt", "win", "win32", "Windows"}  # what those tests compare with on Windows


def _by_platform(node: ast.AST) -> ast.AST | None:
    """`'gloo' if os.name == 'nt' else 'nccl'`: the branch a Linux machine takes when the choice is by operating
    system only. An OS is no CUDA check: a Linux machine without GPUs still gets the other branch."""
    if not isinstance(node, ast.IfExp):
        return None
    tested = {dotted(n) for n in ast.walk(node.test) if isinstance(n, ast.Attribute)}
    if not tested or not all(
        any(t.startswith(p) for p in PLATFORM_TESTS) or any(p.startswith(t + ".") for p in PLATFORM_TESTS)
        for t in tested
    ):
        return None
    if any(isinstance(n, ast.Name) and n.id not in ("os", "sys", "platform") for n in ast.walk(node.test)):
        return None
    if not {const_str(c) for c in ast.walk(node.test) if isinstance(c, ast.Constant)} & WINDOWS:
        return None
    negated = sum(isinstance(n, (ast.NotEq, ast.NotIn, ast.Not)) for n in ast.walk(node.test)) % 2 == 1
    return node.body if negated else node.orelse  # the test is true on Windows unless negated


def _fails(stmt: ast.stmt, any_status: bool = False) -> bool:
    """`raise ...`, or `exit(1)` / `sys.exit("why")` / `os._exit(2)`: the process ends with an error status (with
    any_status, `sys.exit()` too)."""
    if isinstance(stmt, ast.Raise):
        return True
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not isinstance(call, ast.Call) or last(dotted(call.func)) not in ("exit", "quit", "_exit"):
        return False
    status = call.args[0] if call.args else None
    ok = status is None or (isinstance(status, ast.Constant) and status.value in (0, None, False))
    return any_status or not ok


def _unconditional(expr: ast.AST | None):
    """The nodes of an expression that run whenever it does: not inside a conditional expression, a boolean operator,
    a lambda or a comprehension."""
    stack = [expr] if expr is not None else []
    skip = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
    while stack:
        node = stack.pop()
        if isinstance(node, skip):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))
