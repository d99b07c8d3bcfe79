"""The multi-GPU mistakes users hit most (issue 28), each a crash, a hang or a wrong number: a --local_rank flag
torchrun never passes, a current device never set, the global rank used as a device index, a metric of one rank's
shard reported as the whole, one file written by every rank, and rank 0 leaving a loop the others go on with.

Each check reads the script through ScriptReader (scriptread.py); Checks (checks.py) runs them with the others."""

from __future__ import annotations

import ast
import bisect
import functools
import re

from ddplab.lint.findings import ERROR, WARNING
from ddplab.lint.scriptread import (
    ANY_RANK0,
    DDP_NAMES,
    RANK_ENV,
    Guard,
    ScriptReader,
    _is_none,
    body_exits,
    const_str,
    dotted,
    given_for,
    keyword,
    last,
    leading_text,
    method_name,
    said_plainly,
    walk_same_function,
)

LOG_FILES = ("FileHandler", "RotatingFileHandler", "TimedRotatingFileHandler", "WatchedFileHandler")  # logging's
REPORTS = ("info", "log", "add_scalar", "add_scalars", "log_metric", "log_metrics")  # a metric shown or logged
CLOCK_CALLS = {"now", "utcnow", "today", "strftime", "time", "time_ns", "localtime", "gmtime", "ctime"}
STEP_NAMES = re.compile(r"(^|_)(steps?|iters?|iterations?|it|global_step|n_iter|num_updates|updates)$")
AGGREGATES = {"mean", "sum", "average", "nanmean", "median", "fsum"}  # avg = np.mean(losses): the same numbers
TIMERS = {"time", "time_ns", "perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns"}  # durations, rates

GLOBAL_ENV = {name for name, kind in RANK_ENV.items() if kind == "global"}
LOCAL_ENV = {name for name, kind in RANK_ENV.items() if kind == "local"}
LOCAL_CALLS = ("get_local_rank", "get_node_local_rank")
LAST_VALUE = {"val", "value"}  # a meter's latest update (AverageMeter.val, SmoothedValue.value), not its sum
REDUCERS = ("reduce", "gather", "sync")  # all_reduce, reduce_mean, all_gather, synchronize_between_processes
IMPLICIT_DEVICE = {
    "synchronize",
    "empty_cache",
    "current_device",
    "memory_allocated",
    "max_memory_allocated",
    "reset_peak_memory_stats",
    "GradScaler",
}  # calls that use (and create a context on) the current GPU
# calls that download into a path (torchvision's dataset helpers, urllib, gdown, wget)
CUDA_STATE = {"get_rng_state", "set_rng_state", "get_rng_state_all"}  # torch.cuda's: the current device's generator
DOWNLOADS = {"download_url", "download_and_extract_archive", "download_file_from_google_drive", "urlretrieve"}
DOWNLOAD_MODULES = ("gdown.", "wget.")
IMAGE_WRITES = {"savefig", "save_image", "imwrite"}  # a figure or image file
# an array or a config written to a path (OmegaConf.save: Hydra projects record their resolved config so)
ARRAY_WRITES = {"numpy.save", "numpy.savez", "numpy.savez_compressed", "numpy.savetxt", "omegaconf.OmegaConf.save"}
COPIES = {
    "shutil.copy",
    "shutil.copyfile",
    "shutil.copy2",
    "shutil.move",
    "shutil.make_archive",
    "numpy.save",
    "numpy.savez",
}
REMOVALS = {"os.remove", "os.unlink", "shutil.rmtree"}  # the second rank to remove a path finds it gone


ATTRIBUTE = "attribute"  # check_scaled_twice: an attribute's value is one for the whole file


# torch's samplers over every index of the data set: each rank that builds one reads the whole set
WHOLE_SET_SAMPLERS = {"SequentialSampler", "RandomSampler"}


class MultiGpuChecks(ScriptReader):
    """Mixed into Checks: uses its add(), backend and helpers."""

    path_params: dict
    loader_params: dict

    # ------------------------------------------------------------------------------------------ --local_rank

    def local_rank_flags(self) -> list[tuple[ast.Call, str]]:
        """This file's argparse --local_rank flags, with the attribute each stores into (argparse's: `dest`, or the
        first long option: `add_argument("--rank", "--local_rank")` stores into args.rank)."""
        flags = [(c, [const_str(a) or "" for a in c.args]) for c in self.calls if method_name(c) == "add_argument"]
        return [
            (c, const_str(keyword(c, "dest")) or next(o for o in opts if o[:2] == "--")[2:].replace("-", "_"))
            for c, opts in flags
            if {"--local_rank", "--local-rank"} & set(opts)
        ]

    def check_local_rank_flag(self) -> None:
        """argparse --local_rank read for the device, and LOCAL_RANK never read: torchrun does not pass the flag.
        The parser may be built in an options module: then the device pick in this file is where it is reported."""
        flags = self.local_rank_flags()
        dests = {dest for _, dest in flags} or self.facts.local_rank_flags
        if not dests or self.facts.reads_local_rank_env:  # gathered from every file, this one too
            return
        stored = self.facts.stored_attrs
        if any(stored[d] - dests - {"="} for d in dests & stored.keys()):
            # `args.local_rank = dist.get_rank() % gpus` in the script: the flag's value is replaced before any device
            # is picked, also where an options module's set_dist(args) reads it (`cfg.local_rank = args.local_rank`
            # replaces nothing: it copies the flag; nor does a constant, the same on every rank: `self.local_rank =
            # 0` in the branch of one process without a group, round 35's MathPoseGNN)
            return
        # where the value is copied to (`config.LOCAL_RANK = args.local_rank`, else only constants): the flag's too
        dests = dests | {attr for attr, kinds in stored.items() if kinds & dests and kinds <= dests | {"="}}
        used = [
            n
            for n in self.nodes
            if isinstance(n, ast.Attribute)
            and n.attr in dests
            and isinstance(n.ctx, ast.Load)
            and self._picks_device(n)
        ]
        if used:
            # torch.distributed.launch passes `--local-rank=N` since PyTorch 2.0 (torch/distributed/run.py): a parser
            # that knows only the underscored flag stops there
            dashed = any("--local-rank" in (const_str(a) for a in c.args) for c, _ in flags)
            launch = (
                ""
                if dashed or not flags
                else "; and torch.distributed.launch passes it as --local-rank=N since PyTorch 2.0, which this "
                "parser (only --local_rank) refuses: 'unrecognized arguments: --local-rank=0'"
            )
            self.add(
                flags[0][0] if flags else used[0],
                "local-rank-argparse",
                ERROR,
                f"the device comes from the --local_rank flag (line {used[0].lineno}), which torchrun does not "
                "pass: every rank keeps the default and takes the same GPU (duplicate GPU error or out of "
                f"memory){launch}",
                "local_rank = int(os.environ['LOCAL_RANK']) (set by torchrun and ddplab launch)",
                why="LOCAL_RANK is read nowhere in the script or its modules",
            )

    def _picks_device(self, node: ast.AST) -> bool:
        """The value goes (directly, or through one assignment) into set_device, device_ids, .cuda(), .to(),
        torch.device or a 'cuda:N' string."""

        def into_device(n: ast.AST) -> bool:
            child, parent = n, self.parent.get(n)
            for _ in range(4):
                if parent is None:
                    return False
                if isinstance(parent, ast.Call) and (
                    self.callee_last(parent) in ("set_device", "cuda", "to", "device", "set_device_index")
                    or keyword(parent, "device_ids")
                    or self.callee_last(parent) in DDP_NAMES
                    and child in parent.args[1:2]
                ):  # DDP(model, ids)
                    return True
                if isinstance(parent, ast.JoinedStr):
                    return any(isinstance(v, ast.Constant) and "cuda" in str(v.value) for v in parent.values)
                child, parent = parent, self.parent.get(parent)
            return False

        if into_device(node):
            return True
        assign = self.parent.get(node)
        while assign is not None and not isinstance(assign, (ast.Assign, ast.stmt)):
            assign = self.parent.get(assign)
        if isinstance(assign, ast.Assign) and len(assign.targets) == 1:
            target = dotted(assign.targets[0])
            return any(
                into_device(n)
                for n in self.nodes
                if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load) and dotted(n) == target
            )
        return False

    # ------------------------------------------------------------------------------------------ current device

    def check_current_device(self) -> None:
        for call in self.calls:
            # torch.accelerator.device_index(i) is a context manager: as a plain statement it sets nothing
            if self.callee_last(call) == "device_index" and isinstance(self.parent.get(call), ast.Expr):
                self.add(
                    call,
                    "no-set-device",
                    ERROR,
                    "torch.accelerator.device_index(...) is a context manager: called alone it changes nothing, "
                    "so every rank stays on GPU 0 for NCCL and for .cuda()",
                    "torch.accelerator.set_device_index(local_rank) (or torch.cuda.set_device(local_rank))",
                )
        if self.sets_device:
            # `.cuda()` on the branch of an `if` whose other branch is the one that sets the device
            for call in self.calls:
                if (
                    method_name(call) == "cuda"
                    and not call.args
                    and not call.keywords
                    and self.distributed
                    and self._other_branch_sets_device(call)
                    and self._wraps_in_ddp_here(call)
                ):
                    self.add(
                        call,
                        "no-set-device",
                        ERROR,
                        ".cuda() on a path where torch.cuda.set_device is not called (only the other branch of "
                        "the `if` sets it): every rank on this path puts the model on GPU 0",
                        "set the device on every path: torch.cuda.set_device(local_rank) with local_rank = "
                        "int(os.environ['LOCAL_RANK']), before init_process_group",
                    )
            return
        if not self.distributed:
            return
        ddp = self.facts.ddp or any(self.callee_last(c) in DDP_NAMES for c in self.calls)
        for call in self.calls:
            # 'cuda' is the current device whatever the backend: under gloo too, every rank's model on GPU 0
            if self._bare_cuda(call) and (ddp or self.backend == "nccl" or self.facts.backend_nccl):
                self.add(
                    call,
                    "no-set-device",
                    ERROR,
                    "'cuda' without an index and no torch.cuda.set_device anywhere: 'cuda' is the current "
                    "device, GPU 0 on every rank (all ranks on one GPU, NCCL then fails or runs out of memory)",
                    "torch.cuda.set_device(local_rank) before init_process_group (local_rank = "
                    "int(os.environ['LOCAL_RANK']))",
                )
        inits = [c for c in self.calls if self.callee_last(c) == "init_process_group" and not keyword(c, "device_id")]
        if inits and (self.backend == "nccl" or self._nccl_where_cuda(inits[0])):
            implicit = [
                c
                for c in self.calls
                if self.callee_last(c) in IMPLICIT_DEVICE
                or self.callee_last(c) in CUDA_STATE
                and "cuda" in self.callee(c)
            ]
            self.add(
                inits[0],
                "no-set-device",
                WARNING,
                "NCCL with no torch.cuda.set_device in the script or its modules: the current device stays GPU 0 "
                "on every rank, so anything that uses it (torch.cuda.synchronize, empty_cache, a GradScaler, "
                "barrier) makes a CUDA context on GPU 0 per rank",
                "torch.cuda.set_device(local_rank) before init_process_group",
                sure=bool(implicit),
                why=(
                    f"line {implicit[0].lineno} uses the current device"
                    if implicit
                    else "nothing in the script uses the current device by itself"
                ),
            )

    def _nccl_where_cuda(self, init: ast.Call) -> bool:
        """`backend = "nccl" if torch.cuda.is_available() else "gloo"`: NCCL on every GPU machine, the machines where
        the current device matters."""
        backend = keyword(init, "backend") or (init.args[0] if init.args else None)
        if isinstance(backend, ast.Name):
            backend = self._reaching_value(backend)
        return isinstance(backend, ast.IfExp) and "nccl" in (const_str(backend.body), const_str(backend.orelse))

    def _bare_cuda(self, call: ast.Call) -> bool:
        """torch.device("cuda") or .to("cuda"), also as a branch of `"cuda" if available else "cpu"`: the current
        device, with no index."""

        def cuda(arg: ast.AST) -> bool:
            if isinstance(arg, ast.IfExp):
                return cuda(arg.body) or cuda(arg.orelse)
            return const_str(arg) == "cuda"

        return (
            bool(call.args)
            and cuda(call.args[0])
            and (
                self.callee(call) == "torch.device"
                and len(call.args) == 1
                and keyword(call, "index") is None
                or method_name(call) == "to"
            )
        )

    def _wraps_in_ddp_here(self, node: ast.AST) -> bool:
        """The block this line is in builds the DDP wrapper: the path is a distributed one."""
        block = self.parent.get(node)
        while block is not None and not isinstance(block, (ast.If, ast.FunctionDef, ast.Module)):
            block = self.parent.get(block)
        return block is not None and any(
            isinstance(n, ast.Call) and self.callee_last(n) in DDP_NAMES for n in ast.walk(block)
        )

    def _other_branch_sets_device(self, node: ast.AST) -> bool:
        child, parent = node, self.parent.get(node)
        while parent is not None and not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if isinstance(parent, ast.If):
                mine, other = (parent.body, parent.orelse) if child in parent.body else (parent.orelse, parent.body)
                if child in mine and any(
                    isinstance(n, ast.Call) and self.callee_last(n) in ("set_device", "set_device_index")
                    for s in other
                    for n in ast.walk(s)
                ):
                    return True
            child, parent = parent, self.parent.get(parent)
        return False

    # ------------------------------------------------------------------------------------------ global rank as device

    def _global_by_flow(self, expr: ast.AST, depth: int = 0) -> bool:
        """The value is the global rank by data flow: dist.get_rank(), RANK / SLURM_PROCID from the environment,
        or a name assigned only from those (not a name that merely says `rank`)."""
        return self._rank_by_flow(expr, "global", depth)

    def _rank_by_flow(self, expr: ast.AST, kind: str, depth: int = 0) -> bool:
        """The value is that kind of rank by data flow ("global": dist.get_rank(), RANK / SLURM_PROCID; "local":
        LOCAL_RANK / SLURM_LOCALID, an argparse --local_rank nothing reassigns), or a name assigned only from those."""
        env, calls = (GLOBAL_ENV, ("get_rank",)) if kind == "global" else (LOCAL_ENV, LOCAL_CALLS)
        if isinstance(expr, ast.Call):
            name = self.callee_last(expr)
            if name in calls:
                return True
            if name in ("int", "str") and expr.args:
                return self._rank_by_flow(expr.args[0], kind, depth)
            if name in ("get", "getenv") and expr.args:
                return const_str(expr.args[0]) in env
            return False
        if isinstance(expr, ast.Subscript):
            return const_str(expr.slice) in env and "environ" in dotted(expr.value)
        if isinstance(expr, (ast.Name, ast.Attribute)) and depth < 3:
            scope = self.enclosing_function(expr) if isinstance(expr, ast.Name) else None
            memo = self.__dict__.setdefault("_rank_flow_memo", {})
            key = (id(scope), dotted(expr), depth, kind)
            if key not in memo:
                memo[key] = False  # a cycle (x = f(x)) finds nothing new
                memo[key] = self._rank_name(expr, scope, kind, depth)
            return memo[key]
        return False

    def _rank_name(self, expr: ast.AST, scope: ast.AST | None, kind: str, depth: int) -> bool:
        """Every assignment of the name (in its function, or anywhere for an attribute) is that kind of rank."""
        values = self._built(expr, scope)
        if not values and isinstance(expr, ast.Attribute):
            if kind == "local" and expr.attr in ({d for _, d in self.local_rank_flags()} | self.facts.local_rank_flags):
                return True  # torch.distributed.launch's --local_rank, stored by argparse and never reassigned
            return self._param_field_rank(expr, kind, depth)
        # `rank = 0` on the path without a process group is the one process's rank, not another kind of rank:
        # what the name holds where there are several ranks is the rest (`rank = dist.get_rank()`)
        values = [v for v in values if not (isinstance(v, ast.Constant) and v.value == 0)]
        return bool(values) and all(self._rank_by_flow(v, kind, depth + 1) for v in values)

    def _param_field_rank(self, expr: ast.Attribute, kind: str, depth: int) -> bool:
        """`def train(config): DDP(model, device_ids=[config.rank])` where every call of train in this file passes an
        options object whose field is that kind of rank (`CFG.rank = int(os.environ['RANK'])`, then `train(CFG)`):
        the field is read through the parameter."""
        base = expr.value
        func = self.enclosing_function(expr)
        if not isinstance(base, ast.Name) or func is None:
            return False
        if base.id not in [a.arg for a in [*func.args.posonlyargs, *func.args.args]]:
            return False
        given = [given_for(c, func, base.id) for c in self.call_sites(func)]
        return bool(given) and all(
            isinstance(g, (ast.Name, ast.Attribute))
            and self._rank_by_flow(ast.Attribute(value=g, attr=expr.attr, ctx=ast.Load()), kind, depth + 1)
            for g in given
        )

    def _given_global(self, pick: ast.AST) -> bool:
        """`def build(model, device): DDP(model, device_ids=[device])` and every call of build in this file passes
        the global rank by data flow: the parameter is the global rank."""
        return self._given_rank(pick, "global")

    def _given_rank(self, pick: ast.AST, kind: str) -> bool:
        """The parameter `pick` is never reassigned and every call of its function in this file passes that kind of
        rank by data flow."""
        if not isinstance(pick, ast.Name):
            return False
        func = self.enclosing_function(pick)
        if func is None:
            return False
        params = [a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]]
        if pick.id not in params or any(
            isinstance(n, ast.Assign) and any(dotted(t) == pick.id for t in n.targets) for n in ast.walk(func)
        ):
            return False
        given = [given_for(c, func, pick.id) for c in self.call_sites(func)]
        return bool(given) and all(g is not None and self._rank_by_flow(g, kind) for g in given)

    def check_global_rank_device(self) -> None:
        later = []  # .to(rank), torch.device(f"cuda:{rank}"): reported only for a rank no other use shows
        shown: set[str] = set()
        for call in self.calls:
            picks, fallback = [], False
            ids = keyword(call, "device_ids")
            if self.callee_last(call) in DDP_NAMES and isinstance(ids, (ast.List, ast.Tuple)):
                picks = list(ids.elts)
            elif self.callee_last(call) in ("set_device", "set_device_index") and call.args:
                picks = [call.args[0]]
            elif method_name(call) == "cuda" and call.args:
                picks = [call.args[0]]
            elif self.callee(call) == "torch.device" and len(call.args) == 2:
                picks = [call.args[1]]
            elif self.callee(call) == "torch.load" and (where := keyword(call, "map_location")) is not None:
                # map_location={'cuda:0': 'cuda:%d' % rank}: the checkpoint lands on the GPU the rank names
                if isinstance(where, ast.Name):
                    where = self._reaching_value(where) or where  # map_location = {...}; torch.load(p, map_location)
                targets = where.values if isinstance(where, ast.Dict) else [where]
                picks = [i for t in targets for i in _cuda_index(t)]
                fallback = True
            elif (self.callee(call) == "torch.device" or method_name(call) == "to") and len(call.args) == 1:
                picks = (
                    _cuda_index(call.args[0])
                    if method_name(call) != "to" or isinstance(call.args[0], ast.JoinedStr)
                    else [call.args[0]]
                )  # .to(rank) is cuda:rank; .to(f"cuda:{rank}"); torch.device(f"cuda:{rank}")
                fallback = True
            for pick in picks:
                if self._global_by_flow(pick) or self._given_global(pick):
                    if fallback:
                        later.append((call, dotted(pick)))
                    else:
                        shown.add(dotted(pick))
                        self._report_global_device(call)
                    break
        for call, name in later:
            if name not in shown:
                shown.add(name)
                self._report_global_device(call)

    def check_local_rank_as_rank(self) -> None:
        """`init_process_group(rank=local_rank)` under a launcher: on a second machine its processes claim the ranks
        the first machine's hold. Not in a script that starts its own workers (mp.spawn's index is the rank of a
        one-machine job)."""
        if self.spawns or self.facts.spawns:
            return
        for call in self.calls:
            if self.callee_last(call) != "init_process_group":
                continue
            given = keyword(call, "rank")
            given = given if given is not None else (call.args[4] if len(call.args) > 4 else None)
            if self._one_machine(call):
                continue
            if given is not None and (self._rank_by_flow(given, "local") or self._given_rank(given, "local")):
                self.add(
                    call,
                    "local-rank-as-rank",
                    ERROR,
                    "init_process_group is given the local rank as the process's rank: on a second machine its "
                    "processes claim ranks 0, 1, ... again, which the first machine's hold, and the job fails or "
                    "hangs at start-up",
                    "pass the global rank (rank=int(os.environ['RANK'])), or leave rank and world_size out under "
                    "torchrun: init_process_group reads them from the environment",
                )

    def _one_machine(self, init: ast.Call) -> bool:
        """A job one machine by construction, where the local rank is the rank: its world is this machine's GPU count
        (`world_size=torch.cuda.device_count()`) or its own processes (`world_size=local_world_size`), or its
        rendezvous is on loopback (`tcp://127.0.0.1:...`)."""
        world = keyword(init, "world_size") or (init.args[3] if len(init.args) > 3 else None)
        method = keyword(init, "init_method") or (init.args[1] if len(init.args) > 1 else None)
        return (
            (isinstance(world, ast.Call) and self.callee_last(world) == "device_count")
            or (world is not None and "local_world_size" in dotted(world).lower())
            or (leading_text(method) or "").startswith(("tcp://127.", "tcp://localhost"))
        )

    def _report_global_device(self, call: ast.Call) -> None:
        self.add(
            call,
            "global-rank-device-ids",
            ERROR,
            "the GPU index is the global rank: on the second machine it is 8, 9, ... where the "
            "GPUs are 0-7 (invalid device ordinal)",
            "use the local rank: local_rank = int(os.environ['LOCAL_RANK'])",
        )

    # ------------------------------------------------------------------------------------------ unreduced metric

    def reduce_returners(self) -> dict[str, frozenset]:
        """This file's functions that return a value out of a reducer (`reduced = reduce_mean(loss, n)` on the
        distributed path, `return reduced, preds`): name -> the positions of the returned tuple that are reduced
        (-1: the whole value)."""
        found = {}
        reducing = [
            c
            for name, calls in self.calls_by_name.items()
            if any(w in name.lower() for w in REDUCERS)
            for c in calls
            if self._reduces(c)
        ]  # (the names first: one test per name, not per call)
        for func in {self.enclosing_function(c) for c in reducing} - {None}:
            body = list(walk_same_function(func.body))
            reduced = _names_given(func.body, lambda v: isinstance(v, ast.Call) and self._reduces(v))
            if not reduced:
                continue
            positions = None
            for r in (n for n in body if isinstance(n, ast.Return) and n.value is not None):
                elts = r.value.elts if isinstance(r.value, ast.Tuple) else None
                here = (
                    {i for i, e in enumerate(elts) if isinstance(e, ast.Name) and e.id in reduced}
                    if elts
                    else ({-1} if isinstance(r.value, ast.Name) and r.value.id in reduced else set())
                )
                positions = here if positions is None else positions & here
            if positions:
                found[func.name] = frozenset(positions)
        return found

    def _given_by(self, body: list[ast.stmt], table: dict[str, frozenset]) -> dict[str, ast.Assign]:
        """Names assigned what a helper of `table` (name -> positions of its returned tuple; -1: the whole value)
        returns there (`loss, preds = self._run_batch(x)`) -> the assignment."""
        found: dict[str, ast.Assign] = {}
        for node in walk_same_function(body) if table else ():
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and (positions := table.get(self.callee_last(node.value)))
            ):
                for target in node.targets:
                    parts = target.elts if isinstance(target, ast.Tuple) and -1 not in positions else [target]
                    for i, part in enumerate(parts):
                        for n in ast.walk(part) if part is target or i in positions else ():
                            if isinstance(n, ast.Name):
                                found.setdefault(n.id, node)
        return found

    def sum_returners(self) -> dict[str, frozenset]:
        """This file's functions that return a sum over this rank's batches, never reduced (`for x in loader: loss
        += ...` then `return loss / n, acc / n`): name -> the positions of the returned tuple that hold one (-1: the
        whole value; `return epoch_loss, last_lr`: only 0)."""
        found = {}
        candidates = {
            self.enclosing_function(n)
            for n in self.nodes
            if isinstance(n, (ast.For, ast.AsyncFor)) and self._over_batches(n.iter)
        } - {None}  # only functions with a loop over batches
        for func in candidates:
            body = func.body
            if any(self._reduces(c) for c in walk_same_function(body) if isinstance(c, ast.Call)):
                continue
            # a loop over a loader that reads the whole set on every rank (`DataLoader(val_set)`, no sampler) sums
            # the whole
            summed = {
                name: loop
                for name, loop in self._summed_over_batches(body).items()
                if not self._reads_whole_dataset(loop)
            }
            positions = {
                i if isinstance(r.value, ast.Tuple) else -1
                for r in walk_same_function(body)
                if isinstance(r, ast.Return) and r.value is not None
                for i, part in enumerate(r.value.elts if isinstance(r.value, ast.Tuple) else [r.value])
                if any(isinstance(n, ast.Name) and n.id in summed for n in ast.walk(part))
            }
            if positions:
                found[func.name] = frozenset(positions)
        return found

    def _summed_over_batches(self, body: list[ast.stmt], reduced: frozenset | set = frozenset()) -> dict[str, ast.AST]:
        """Names grown with += in a loop over a loader in this scope -> the loop (and names computed from them, unless
        from one given to a reducer)."""
        accumulated: dict[str, ast.AST] = {}
        meters: set[str] = set()  # the names of meter objects among them (what their methods return is theirs)
        clocks = self._clock_names(body)

        in_place = {
            n.id
            for c in walk_same_function(body)
            if isinstance(c, ast.Call) and self.callee_last(c) in ("all_reduce", "reduce", "all_reduce_coalesced")
            for a in c.args[:1]
            for n in ast.walk(a)
            if isinstance(n, ast.Name)
        }

        # loss, preds = self._run_batch(x): loss came out of one
        in_place |= set(self._given_by(body, self.facts.reduce_returners))
        # `reduced = reduce_tensor(loss, n).item()` on the distributed path (`else: reduced = loss.item()` on the one
        # process): a sum of those is a sum of whole values
        in_place |= _names_given(body, lambda v: any(isinstance(x, ast.Call) and self._reduces(x) for x in ast.walk(v)))
        # and what is taken from one (`losses = train(...)`, a helper that all-reduces; `loss = losses.pop("loss")`)
        for node in sorted((n for n in walk_same_function(body) if isinstance(n, ast.Assign)), key=lambda n: n.lineno):
            if isinstance(root := _taken_from(node.value), ast.Name) and root.id in in_place:
                in_place |= {t.id for t in node.targets if isinstance(t, ast.Name)}

        def whole(value: ast.AST) -> bool:  # `total += t.item()` after dist.all_reduce(t): a sum of whole values
            return any(
                isinstance(x, ast.Name) and x.id in in_place or isinstance(x, ast.Call) and self._reduces(x)
                for x in ast.walk(value)
            )

        lists = _names_given(  # `losses = []`, `losses = list()`
            body,
            lambda v: (
                isinstance(v, ast.List)
                and not v.elts
                or isinstance(v, ast.Call)
                and dotted(v) == "list()"
                and not v.args
            ),
        )

        dicts = _names_given(  # `loss_dict = defaultdict(float)`, `= {}`, `= dict()`: sums kept by key
            body,
            lambda v: isinstance(v, ast.Dict) or isinstance(v, ast.Call) and last(dotted(v)) in ("dict", "defaultdict"),
        )

        def timed(value: ast.AST) -> bool:  # `tr_time += end - start`, `steps / (end - start)`: time, no metric
            return self._timed(value, clocks)

        for node in walk_same_function(body):
            if isinstance(node, (ast.For, ast.AsyncFor)) and (
                self._over_batches(node.iter) or self._draws_batches(node)
            ):
                for sub in walk_same_function(node.body):
                    if (
                        isinstance(sub, ast.AugAssign)
                        and isinstance(sub.op, ast.Add)
                        and (
                            isinstance(sub.target, ast.Name)
                            or isinstance(sub.target, ast.Attribute)
                            and dotted(sub.target.value) == "self"
                        )
                        and not timed(sub.value)
                        and not whole(sub.value)
                        and not self._set_earlier_in_pass(sub, node)
                    ):
                        accumulated.setdefault(dotted(sub.target), node)  # loss += ..., self.epoch_loss += ...
                    elif (
                        isinstance(sub, ast.AugAssign)
                        and isinstance(sub.op, ast.Add)
                        and isinstance(sub.target, ast.Subscript)
                        and isinstance(sub.target.value, ast.Name)
                        and sub.target.value.id in dicts
                        and not timed(sub.value)
                        and not whole(sub.value)
                    ):
                        accumulated.setdefault(sub.target.value.id, node)  # loss_dict["sum"] += loss.item()
                    elif (
                        isinstance(sub, ast.Assign)
                        and len(sub.targets) == 1
                        and isinstance(sub.targets[0], ast.Subscript)
                        and isinstance(sub.targets[0].value, ast.Name)
                        and sub.targets[0].value.id in dicts
                        and (added := _added_to_itself(sub)) is not None
                        and not timed(added)
                        and not whole(added)
                    ):
                        accumulated.setdefault(sub.targets[0].value.id, node)  # d[k] = d.get(k, 0) + loss.item()
                    elif (
                        isinstance(sub, ast.Call)
                        and self._meter_update(sub, body)
                        and not whole(sub.args[0] if sub.args else sub.keywords[0].value)
                    ):
                        accumulated.setdefault(_held_in(sub.func.value).id, node)
                        meters.add(_held_in(sub.func.value).id)
                    elif (
                        isinstance(sub, ast.Call)
                        and method_name(sub) == "append"
                        and sub.args
                        and isinstance(sub.func.value, ast.Name)
                        and sub.func.value.id in lists
                        and not timed(sub.args[0])
                        and not whole(sub.args[0])
                    ):
                        accumulated.setdefault(sub.func.value.id, node)  # losses.append(loss.item())
        for name in self._step_counters(body) & accumulated.keys():
            del accumulated[name]
        for node in walk_same_function(body):  # avg_loss = total_loss / len(loader): the same shard's number
            if (
                accumulated
                and isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                grown = [
                    dotted(n)
                    for n in ast.walk(node.value)
                    if isinstance(n, (ast.Name, ast.Attribute))
                    and dotted(n) in accumulated
                    and dotted(n) not in reduced
                    and not self._within(node, accumulated[dotted(n)])
                ]  # after its loop, not in it
                if (
                    grown
                    and (
                        not isinstance(node.value, ast.Call)
                        or self.callee_last(node.value) in AGGREGATES
                        or dotted(node.value.func) == f"{grown[0]}.{method_name(node.value)}"  # pix_acc = metric.get()
                        and grown[0] in meters
                    )
                    and not timed(node.value)
                ):
                    accumulated.setdefault(node.targets[0].id, accumulated[grown[0]])
        return accumulated

    def _set_earlier_in_pass(self, grow: ast.AugAssign, loop: ast.AST) -> bool:
        """`log = f"epoch {e}"` and then `log += ...` in the same pass of the loop: the name starts again on every
        iteration (a message being built), so what it holds is this pass's, not a sum over batches. So does a
        loop's own target (`for batch_idx, x in enumerate(loader): batch_idx += 1`: an index made 1-based)."""
        child, parent = grow, self.parent.get(grow)
        while child is not loop and parent is not None:
            if isinstance(parent, (ast.For, ast.AsyncFor)) and child in parent.body:
                if dotted(grow.target) in {dotted(t) for t in ast.walk(parent.target)}:
                    return True
            for block in (getattr(parent, "body", None), getattr(parent, "orelse", None)):
                if (
                    isinstance(block, list)
                    and child in block
                    and any(
                        isinstance(s, ast.Assign) and dotted(grow.target) in map(dotted, s.targets)
                        for s in block[: block.index(child)]
                    )
                ):
                    return True
            child, parent = parent, self.parent.get(parent)
        return False

    def _clock_names(self, body: list[ast.stmt]) -> set[str]:
        """Names assigned a clock reading in this scope (`start = time.time()`), or a value read from one (`duration =
        time.time() - start`): a time, never a metric of the data."""
        return _names_given(
            body, lambda v: any(isinstance(n, ast.Call) and self.callee_last(n) in TIMERS for n in ast.walk(v))
        )

    def _timed(self, value: ast.AST, clocks: set[str]) -> bool:
        """The expression reads a clock (a name from _clock_names, or a timer call): a duration, no metric."""
        return any(
            isinstance(x, ast.Name) and x.id in clocks or isinstance(x, ast.Call) and self.callee_last(x) in TIMERS
            for x in ast.walk(value)
        )

    def _only_as_rate(self, report: ast.Call, name: str, body: list[ast.stmt]) -> bool:
        """`steps / (time.time() - start)` in the report: a speed, not a metric of the data; or a count only ever
        dividing (`total / n`): what is divided decides."""
        clocks = self._clock_names(body)
        uses = [n for n in ast.walk(report) if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) == name]
        rates = [
            b
            for b in ast.walk(report)
            if isinstance(b, ast.BinOp) and isinstance(b.op, ast.Div) and self._timed(b.right, clocks)
        ]
        divisors = [b.right for b in ast.walk(report) if isinstance(b, ast.BinOp) and isinstance(b.op, ast.Div)]
        # `running.item() / (n * world_size)`: a count in the divisor; the numerator says whether it is whole
        return bool(uses) and all(
            any(u in ast.walk(r.left) for r in rates) or any(u in ast.walk(d) for d in divisors) for u in uses
        )

    def _step_counters(self, body: list[ast.stmt]) -> set[str]:
        """Names only ever grown by a constant (`train_steps += 1`) and used as a step index: in a `%` test
        (`train_steps % log_every == 0`), as a logger's step (`add_scalar(tag, value, iters)`, `step=it`), or named
        as one (`self.step`, `global_step`, `iters`). They count this rank's steps, the same on every rank: no
        metric of a shard."""
        grown: dict[str, bool] = {}
        indexed: set[str] = set()
        for n in walk_same_function(body):
            if isinstance(n, ast.AugAssign) and isinstance(n.target, (ast.Name, ast.Attribute)):
                key = dotted(n.target)
                grown[key] = grown.get(key, True) and isinstance(n.value, ast.Constant)
                if STEP_NAMES.search(last(key)):
                    indexed.add(key)  # `self.step += 1`, `global_step += 1`: named as a step count
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) and isinstance(n.left, ast.Name):
                indexed.add(n.left.id)
            elif isinstance(n, ast.Call):
                indexed |= {
                    k.value.id
                    for k in n.keywords
                    if k.arg in ("step", "global_step", "iteration") and isinstance(k.value, ast.Name)
                }
                if (
                    method_name(n) in ("add_scalar", "add_scalars", "add_image", "add_figure")
                    and len(n.args) > 2
                    and isinstance(n.args[2], ast.Name)
                ):
                    indexed.add(n.args[2].id)
        return {name for name, constant in grown.items() if constant} & indexed

    def _reduces(self, call: ast.Call) -> bool:
        """A reducer, or a call of this file's function that calls one in its own body."""
        return self._reducer(call) or call in self._reducing_helper_calls

    def _reducer(self, call: ast.Call) -> bool:
        """all_reduce, reduce_mean, all_gather, synchronize_between_processes; not `torch.cuda.synchronize()`,
        which waits for this process's own GPU and exchanges nothing."""
        name = self.callee_last(call).lower()
        if name == "synchronize" and any(
            w in self.callee(call).lower() for w in ("cuda", "mps", "xpu", "xm", "accelerator", "device")
        ):
            return False
        return any(w in name for w in REDUCERS)

    @functools.cached_property
    def _reducing_helper_calls(self) -> set[ast.Call]:
        """Calls of this file's functions that all-reduce in their own body (`losses = train(model, ...)`, whose
        `dist.all_reduce(all_losses)` makes what it returns every rank's)."""
        return {
            site
            for func in {self.enclosing_function(c) for c in self.calls if self._reducer(c)} - {None}
            for site in self.call_sites(func)
        }

    def _draws_batches(self, loop: ast.AST) -> bool:
        """`for _ in range(steps): x, y = val_loader.next_batch()` (or `next(train_iter)` of a loader): each
        iteration takes this rank's next batch, as `for x in loader` does."""
        for c in walk_same_function(loop.body):
            if not isinstance(c, ast.Call):
                continue
            source = (
                c.func.value
                if isinstance(c.func, ast.Attribute) and any(w in c.func.attr.lower() for w in ("next", "batch"))
                else (c.args[0] if self.callee(c) == "next" and c.args else None)
            )
            if isinstance(source, (ast.Name, ast.Attribute)) and self._over_batches(source):
                return True
        return False

    def _loader_from_rank(self, loop: ast.AST) -> bool:
        """The loop's loader is built with the rank (`DistributedDataLoader(path, B, T, ddp_rank, world)`): each
        rank reads its own part, as with a DistributedSampler."""
        names = {
            dotted(n) for n in ast.walk(loop) if isinstance(n, (ast.Name, ast.Attribute)) and self._over_batches(n)
        } - {""}
        for n in self.nodes:
            if (
                isinstance(n, ast.Assign)
                and isinstance(n.value, ast.Call)
                and any(dotted(t) in names for t in n.targets)
                and any(
                    isinstance(a, (ast.Name, ast.Attribute, ast.Call)) and self.rank_kind(a)
                    for a in [*n.value.args, *(k.value for k in n.value.keywords)]
                )
            ):
                return True
        return False

    @property
    def rank0_printers_here(self) -> set[str]:
        """This file's functions and methods that print or log only under a rank-0 test (`def print0(s): if rank ==
        0: print(s)`, `def log_string(self, s): if dist.get_rank() == 0: print(s)`, `def logger_info(self, msg):
        self.logger.info(msg) if self.local_master else None`): a call of one is a report on rank 0."""
        if not hasattr(self, "_printers0"):
            by_function: dict[ast.AST, list[bool]] = {}
            for c in self.calls:
                if (self.callee(c) == "print" or method_name(c) in REPORTS) and (
                    func := self.enclosing_function(c)
                ) is not None:
                    by_function.setdefault(func, []).append(self._passes_on_rank0(c, func))
            # a reporter is straight-line code that hands its message on (a `train()` that prints on rank 0 is
            # no report of what it is given)
            self._printers0 = {
                f.name
                for f, ok in by_function.items()
                if all(ok) and not any(isinstance(n, (ast.For, ast.While)) for n in walk_same_function(f.body))
            }
        return self._printers0

    def _passes_on_rank0(self, report: ast.Call, func: ast.AST) -> bool:
        """`report` shows one of `func`'s parameters, under a rank-0 test that reads none of them (a rank the
        caller passes, `rank: int = 0`, is the caller's choice)."""
        params = {
            a.arg
            for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs, func.args.vararg, func.args.kwarg]
            if a is not None
        } - {"self", "cls"}
        shown = {
            n.id
            for a in [*report.args, *(k.value for k in report.keywords)]
            for n in ast.walk(a)
            if isinstance(n, ast.Name)
        }  # (`print(*args)`: a Starred around the name)
        guards = [g for g in self.guards(report) if g.rank0]
        return (
            bool(shown & params)
            and bool(guards)
            and not any(isinstance(n, ast.Name) and n.id in params for g in guards for n in ast.walk(g.node.test))
        )

    def meter_classes(self) -> set[str]:
        """This file's classes that keep a sum over the batches they are given: an update() adding to their own
        attributes (`self.total_correct += correct`), and nothing in the class reduces across ranks (semseg's
        SegmentationMetric; not one with a `synchronize_between_processes`)."""
        return {
            cls.name
            for cls in self.classes.values()
            if any(
                isinstance(f, ast.FunctionDef)
                and f.name == "update"
                and any(
                    isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and dotted(n.target).startswith("self.")
                    for n in ast.walk(f)
                )
                for f in cls.body
            )
            and not any(isinstance(c, ast.Call) and self._reduces(c) for c in ast.walk(cls))
        }

    def _meter_update(self, call: ast.Call, body: list[ast.stmt]) -> bool:
        """`losses.update(loss.item(), n)` on a running-average meter made in this scope (`losses = AverageMeter()`):
        a sum over this rank's batches kept in an object. A timer (`batch_time.update(time.time() - end)`) is no
        metric, and a value that comes out of a reducer (`reduced = reduce_tensor(loss)`) is already the whole."""
        if not (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "update"
            and isinstance(_held_in(call.func.value), ast.Name)
            and (call.args or call.keywords)
        ):
            return False
        meter = _held_in(call.func.value).id  # `losses`, or `records` of `records["loss"].update(...)`
        made = [
            v
            for n in walk_same_function(body)
            if isinstance(n, ast.Assign) and len(n.targets) == 1
            for t in n.targets
            if isinstance(_held_in(t), ast.Name) and _held_in(t).id == meter
            for v in _meters_made(n.value, isinstance(t, ast.Name) and isinstance(call.func.value, ast.Subscript))
        ]
        if not made or not all(
            isinstance(v, ast.Call)
            and (_a_meter(self.callee_last(v)) or self.callee_last(v) in self.facts.meter_classes)
            for v in made
        ):
            return False
        given = call.args[0] if call.args else call.keywords[0].value  # `metric_logger.update(loss=loss.item())`
        if any(isinstance(n, ast.Call) and self.callee_last(n) in CLOCK_CALLS for n in ast.walk(given)):
            return False
        names = {n.id for n in ast.walk(given) if isinstance(n, ast.Name)}
        for n in walk_same_function(body):
            if (
                isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id in names for t in n.targets)
                and any(isinstance(c, ast.Call) and self._reduces(c) for c in ast.walk(n.value))
            ):
                return False
        return True

    def check_unreduced_metric(self) -> None:
        """A count or sum accumulated over this rank's shard (here, or by a function that returns it), reported
        under a rank-0 test (global, or one per node), never reduced."""
        if not self.distributed:
            return
        sharded = self.facts.sampler or any(self.callee_last(c) == "DistributedSampler" for c in self.calls)
        printers0 = self.rank0_printers_here | self.facts.rank0_printers
        reports = [c for c in self.calls if self._reports(c, printers0)]
        scopes = {self.enclosing_function(c) for c in reports}  # only where something is reported
        for func in (self.tree if f is None else f for f in scopes):
            body = func.body
            calls = [n for n in walk_same_function(body) if isinstance(n, ast.Call)]
            reducers = [c for c in calls if self._reduces(c)]
            if any(not c.args and not c.keywords for c in reducers):
                continue  # metric_logger.synchronize_between_processes(): the meters are reduced
            reduced = self._flows_into(reducers, body)
            accumulated = self._summed_over_batches(body, reduced)  # name -> the loop it grows in
            # train_loss, train_acc = run_epoch(train_loader, ...)
            accumulated = self._given_by(body, self.facts.sum_returners) | accumulated
            if not accumulated:
                continue
            said: set[int] = set()  # one finding per loop (or helper call) the sums come from
            rank0 = [
                c
                for c in calls
                if self._reports(c, printers0)
                and (
                    self.callee_last(c) in printers0
                    or self.runs_on_rank0_only(c, frozenset({"global", "local", "device"}))
                )
            ]
            # then the prints the project's rank-0 filter keeps to rank 0: a sum's finding names a guarded report first
            for call in rank0 + [
                c for c in calls if c not in rank0 and self._reports(c, printers0) and self._filtered_print(c)
            ]:
                read_as = self._dict_values_read(call, accumulated)  # `for k, v in sums.items(): log(k, v)`
                names = {
                    read_as.get(dotted(n), dotted(n))
                    for n in ast.walk(call)
                    if isinstance(n, (ast.Name, ast.Attribute)) and (dotted(n) in accumulated or dotted(n) in read_as)
                } - reduced
                names = {
                    n
                    for n in names
                    if not self._reads_whole_dataset(accumulated[n])
                    and not self._only_as_rate(call, n, body)
                    and not _only_last_value(call, n)
                    and id(accumulated[n]) not in said
                }
                if names:
                    name = sorted(names)[0]
                    loop = accumulated[name]
                    said |= {id(accumulated[n]) for n in names}
                    where = (
                        f"loop on line {loop.lineno}"
                        if isinstance(loop, (ast.For, ast.AsyncFor))
                        else f"returned by {self.callee_last(loop.value)}() on line {loop.lineno}"
                    )
                    own_part = sharded or (isinstance(loop, (ast.For, ast.AsyncFor)) and self._loader_from_rank(loop))
                    # rank 0 alone runs the loop: its sum is 1/N only if its loader is sharded, seen or not
                    alone = self.runs_on_rank0_only(loop, frozenset({"global", "local", "device"})) and not any(
                        self.callee_last(v) == "DataLoader"
                        for o in self._loop_origins(loop)
                        for v in self._built(o)
                        if isinstance(v, ast.Call)
                    )
                    if (param := self._loop_param(loop)) is not None:
                        self.loader_params[self.line_of(call)] = param
                    self.add(
                        call,
                        "unreduced-metric",
                        WARNING,
                        f"{name} is summed over this rank's batches only ({where}) and "
                        "reported on rank 0 as if it were the whole: with N ranks it describes 1/N of the data",
                        f"all_reduce the sums first: t = torch.tensor([{name}, ...], device=device); "
                        "dist.all_reduce(t), then report from t",
                        sure=own_part and not alone,
                        why="the loader's DistributedSampler (or the rank it is built with) "
                        "gives each rank its own shard"
                        if own_part and not alone
                        else "the loop runs on rank 0 only: whether its loader is sharded shows in a run"
                        if alone
                        else "no DistributedSampler seen: the loader may read the whole dataset",
                    )

    def _dict_values_read(self, call: ast.Call, accumulated: dict) -> dict[str, str]:
        """The names the loops around `call` give the values of a dict of sums (`for k, v in avg_loss.items():` ->
        {"v": "avg_loss"})."""
        found: dict[str, str] = {}
        for loop in self.ancestors(call):
            if (
                isinstance(loop, (ast.For, ast.AsyncFor))
                and isinstance(loop.iter, ast.Call)
                and method_name(loop.iter) in ("items", "values")
                and dotted(loop.iter.func.value) in accumulated
            ):
                value = loop.target.elts[-1] if isinstance(loop.target, ast.Tuple) else loop.target
                if isinstance(value, ast.Name):
                    found.setdefault(value.id, dotted(loop.iter.func.value))
        return found

    def _filtered_print(self, call: ast.Call) -> bool:
        """A print after the project's rank-0 filter is installed (`builtins.print = print_if_rank0`): rank 0's."""
        return (
            self.callee(call) == "print"
            and (self.replaces_print_here() or self.facts.replaces_print)
            and not self._before_filter(call)
        )

    def _reports(self, call: ast.Call, printers0: set[str]) -> bool:
        """A print, a logger's or tracker's report (REPORTS), or a call of this file's rank-0 printer."""
        return self.callee(call) == "print" or method_name(call) in REPORTS or self.callee_last(call) in printers0

    def _reads_whole_dataset(self, loop: ast.AST) -> bool:
        """The loop reads a loader that every origin shows built without a sampler (`test_loader = DataLoader(ds,
        **test_kwargs)`, passed to `test(model, test_loader)`): each rank reads the whole set, so the sum is the
        whole, not 1/N. Unknown origins (a parameter no call here fills, a factory) keep the finding."""
        origins = self._loop_origins(loop)
        return bool(origins) and all(self.built_without_sampler(o) for o in origins)

    def _loop_origins(self, loop: ast.AST) -> list[ast.AST]:
        """What the loop's loader is, where this file says: its name, or what each call of its function hands it
        (`acc = evaluate(model, test_loader)`: the helper's sum is over the loader this call hands it)."""
        if isinstance(loop, ast.Assign) and isinstance(loop.value, ast.Call):
            given = [*loop.value.args, *(k.value for k in loop.value.keywords)]
            return [a for a in given if isinstance(a, (ast.Name, ast.Attribute)) and self._loader_named(a)]
        loaders = self._loop_loaders(loop) if isinstance(loop, (ast.For, ast.AsyncFor)) else []
        func = self.enclosing_function(loop)
        params = [a.arg for a in func.args.args] if func is not None else []
        origins: list[ast.AST] = []
        for loader in loaders[:1]:
            if isinstance(loader, ast.Name) and loader.id in params:
                origins += [given_for(site, func, loader.id) for site in self.call_sites(func)]
                if not origins or None in origins:
                    return []  # no caller here (other files' callers: _loop_param), or one passing nothing known
            else:
                origins.append(loader)
        return origins

    def _loop_param(self, loop: ast.AST) -> tuple[ast.AST, str] | None:
        """(function, parameter) when the loop reads a loader its function is handed and no call in this file hands
        it one: lint_project asks the callers in other files (callers.py) what they pass."""
        loaders = self._loop_loaders(loop) if isinstance(loop, (ast.For, ast.AsyncFor)) else []
        func = self.enclosing_function(loop)
        if func is None or not loaders or not isinstance(loaders[0], ast.Name) or self.call_sites(func):
            return None
        return (func, loaders[0].id) if loaders[0].id in [a.arg for a in func.args.args] else None

    def _loop_loaders(self, loop: ast.AST) -> list[ast.AST]:
        """The loaders a loop reads: named in its header, or in what the name it iterates was made from (`pbar =
        tqdm(enumerate(val_loader))`, `for step, batch in pbar`)."""

        def named(expr: ast.AST) -> list[ast.AST]:
            return [
                n
                for n in ast.walk(expr)
                if isinstance(n, (ast.Name, ast.Attribute)) and "loader" in last(dotted(n)).lower()
            ]

        found = named(loop.iter)
        if not found and isinstance(loop.iter, ast.Name) and loop.iter.id in self._loader_streams:
            scope = self.enclosing_function(loop)
            for value in self._built(loop.iter, scope):
                found += [x for x in named(value) if x not in found and dotted(x) not in {dotted(f) for f in found}]
        return found

    def plain_loader_makers(self) -> set[str]:
        """This file's functions that return a DataLoader built without a sampler (`def prepare_dataloader(df,
        cfg): loader = DataLoader(ds, batch_size=...); return loader`): every rank reads the whole set from it."""
        found = set()
        for func, returned in self._loader_functions():
            if returned and all(
                self.built_without_sampler(v, func) if isinstance(v, ast.Name) else self._plain_loader_call(v)
                for v in returned
            ):
                found.add(func.name)
        return found

    def _loader_functions(self):
        """(function, the values its returns give) for each of this file's functions that builds a DataLoader."""
        for func in {self.enclosing_function(c) for c in self.calls_by_name.get("DataLoader", [])} - {None}:
            yield func, [r.value for r in walk_same_function(func.body) if isinstance(r, ast.Return)]

    def loader_branches(self) -> dict[str, tuple]:
        """This file's functions whose one returned loader is built with a sampler in one branch and without one in
        another (`def build_dataloader(mode, ...)`: a DistributedSampler for "train", none for "validation"): name ->
        (this reader, the function, [(a loader built, without a sampler?)]); the call's constants pick the branch."""
        found = {}
        for func, returned in self._loader_functions():
            if len(returned) == 1 and isinstance(returned[0], ast.Name):
                built = [(v, self._plain_loader_call(v)) for v in self._built(returned[0], func)]
                if len({plain for _, plain in built}) == 2:
                    found[func.name] = (self, func, built)
        return found

    def _plain_for_call(self, call: ast.AST) -> bool:
        """`build_dataloader("validation", cfg)`: every loader the helper can build for this call's constants
        (ScriptReader.branch_open) has no sampler."""
        held = self.facts.loader_branches.get(self.callee_last(call)) if isinstance(call, ast.Call) else None
        if held is None:
            return False
        reader, func, built = held
        reached = [plain for value, plain in built if reader.branch_open(value, func, call)]
        return bool(reached) and all(reached)

    def _plain_loader_call(self, value: ast.AST) -> bool:
        """`DataLoader(ds, batch_size=8)`, `sampler=None` (the default) or `**kwargs` seen without one: the whole
        set."""
        if not (isinstance(value, ast.Call) and self.callee_last(value) == "DataLoader") or len(value.args) > 3:
            return False
        return not any(
            k.arg in ("sampler", "batch_sampler")
            and not _is_none(k.value)
            and not self._whole_set_sampler(k.value)
            or k.arg is None
            and self._may_hold_sampler(k.value)
            for k in value.keywords
        )

    def _whole_set_sampler(self, value: ast.AST, depth: int = 0) -> bool:
        """`SequentialSampler(ds)`, `RandomSampler(ds)` (or a name bound to one, or a BatchSampler over one): every
        index of the set, on each rank that builds it."""
        if isinstance(value, ast.Name) and depth < 2:
            built = self._built(value, self.enclosing_function(value))
            return bool(built) and all(self._whole_set_sampler(v, depth + 1) for v in built)
        if not isinstance(value, ast.Call):
            return False
        name = self.callee_last(value)
        if name == "BatchSampler" and value.args:
            return self._whole_set_sampler(value.args[0], depth)
        return name in WHOLE_SET_SAMPLERS

    def built_without_sampler(self, name: ast.AST, scope: ast.AST | None = None) -> bool:
        built = self._built(name, scope)
        return bool(built) and all(
            isinstance(v, ast.Call)
            and self.callee_last(v) in self.facts.plain_loader_makers  # a project helper's
            or self._plain_loader_call(v)
            or self._plain_for_call(v)
            for v in built
        )

    def _may_hold_sampler(self, kwargs: ast.AST, depth: int = 0) -> bool:
        """`**test_kwargs`: a dict whose every assignment and update is seen and none names a sampler (an update
        from another such dict, `test_kwargs.update(cuda_kwargs)`, is followed)."""
        if not isinstance(kwargs, ast.Name) or depth > 2:
            return True
        seen = False
        for n in self.nodes:
            value = None
            if isinstance(n, ast.Assign) and any(dotted(t) == kwargs.id for t in n.targets):
                value = n.value
            elif isinstance(n, ast.Call) and dotted(n.func) == f"{kwargs.id}.update" and n.args:
                value = n.args[0]
            if value is None:
                continue
            if isinstance(value, ast.Name) and value.id != kwargs.id:
                if self._may_hold_sampler(value, depth + 1):
                    return True
                seen = True
                continue
            if not isinstance(value, ast.Dict) or any(
                k is None or const_str(k) in ("sampler", "batch_sampler") for k in value.keys
            ):
                return True
            seen = True
        return not seen

    def _flows_into(self, reducers: list[ast.Call], body: list[ast.stmt]) -> set[str]:
        """Names given to a reducer, directly or through one assignment (t = torch.tensor([correct, total]);
        dist.all_reduce(t))."""
        given = {dotted(n) for c in reducers for n in ast.walk(c) if isinstance(n, (ast.Name, ast.Attribute))}
        for node in walk_same_function(body):
            if isinstance(node, ast.Assign) and any(dotted(t) in given for t in node.targets):
                given |= {dotted(n) for n in ast.walk(node.value) if isinstance(n, (ast.Name, ast.Attribute))}
        return given

    def _over_batches(self, it: ast.AST) -> bool:
        """`for x in loader`, `enumerate(train_loader)`, `metric_logger.log_every(data_loader, ...)`."""
        return any(
            isinstance(n, (ast.Name, ast.Attribute))
            and (self._loader_named(n) or dotted(n) in self._with_sampler or dotted(n) in self._loader_streams)
            for n in ast.walk(it)
        )

    @staticmethod
    def _loader_named(n: ast.AST) -> bool:
        name = last(dotted(n)).lower()
        return "loader" in name or "batches" in name

    @property
    def _loader_streams(self) -> set[str]:
        """Names made from a loader by a call (`data = cycle(train_loader)`, `it = iter(loader)`, an endless
        generator): what they yield are the loader's batches."""
        if not hasattr(self, "_streams"):
            self._streams = {
                dotted(t)
                for n in self.nodes
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and self._wraps_loader(n.value)
                for t in n.targets
            } - {""}
        return self._streams

    def _wraps_loader(self, call: ast.Call, depth: int = 0) -> bool:
        """The call yields a loader's batches: a loader among its arguments, also through wrappers around it
        (`pbar = tqdm(enumerate(train_loader))`); not `len(loader)`, a count."""
        if self.callee_last(call) == "len" or depth > 2:
            return False
        return any(
            isinstance(a, (ast.Name, ast.Attribute))
            and self._loader_named(a)
            or isinstance(a, ast.Call)
            and self._wraps_loader(a, depth + 1)
            for a in call.args
        )

    @property
    def _with_sampler(self) -> set[str]:
        """Names whose `.sampler` is used (`self.train_data.sampler.set_epoch(epoch)`): data loaders."""
        if not hasattr(self, "_sampler_owners"):
            self._sampler_owners = {
                dotted(n.value) for n in self.nodes if isinstance(n, ast.Attribute) and n.attr == "sampler"
            } - {""}
        return self._sampler_owners

    # ------------------------------------------------------------------------------------------ one file, every rank

    def check_shared_writes(self) -> None:
        if not self.distributed:
            return
        for call in self.calls:
            what = self._writes(call)
            if what is None or self.runs_on_rank0_only(call, ANY_RANK0) or self._mentions_rank(call):
                continue
            if self._checkpoint_write(call):
                continue  # a checkpoint helper: the save rules speak for it (unguarded-save, local-rank-save)
            if (param := self._path_parameter(call)) is not None:
                self.path_params[self.line_of(call)] = param  # the caller decides the path: judged with the callers
            stamped, first = self._time_stamped(call), self.after_rank0_barrier(call)
            per_sample = not stamped and self._path_from_batch(call)
            # a log file opened to append is written only where something logs to it: that shows in a run
            appends = what.startswith("a logging") and self._log_mode(call) != "w"
            self.add(
                call,
                "shared-path-write",
                WARNING,
                f"{what} on every rank, to the same path: the ranks race on one file (truncated, interleaved or "
                "half-written; with download=True, N downloads into one folder)",
                "do it on rank 0 only (if rank == 0: ...; then dist.barrier() if the others read it), or put "
                "the rank in the path",
                sure=not stamped and not per_sample and not first and not appends,
                why="the path holds the clock time it was made: ranks that start in the same second share it, "
                "ranks started apart (by hand, on other machines) do not"
                if stamped
                else "the path is made from the loop's batch: each rank's own samples under a DistributedSampler, "
                "the same on every rank without one (shows in a run)"
                if per_sample
                else "rank 0 runs it first, the others after its barrier: whether they write again shows in a run"
                if first
                else "opened to append: whether every rank logs to it (its lines interleave) shows in a run"
                if appends
                else "",
            )

    @staticmethod
    def _log_mode(call: ast.Call) -> str:
        """A logging file handler's mode: FileHandler(path, "w") truncates, its default "a" appends."""
        mode = keyword(call, "mode") or keyword(call, "filemode") or (call.args[1] if len(call.args) > 1 else None)
        return const_str(mode) or "a"

    def _checkpoint_write(self, call: ast.Call) -> bool:
        """The file is a checkpoint: opened for torch.save (`with open(p, "wb") as f: torch.save(obj, f)`), or written
        by a save helper (a function named save/checkpoint that calls torch.save)."""
        scope = self.enclosing_function(call)
        saves = [
            n
            for n in (ast.walk(scope) if scope else self.nodes)
            if isinstance(n, ast.Call) and self.callee(n) == "torch.save"
        ]
        if not saves:
            return False
        if scope is not None and any(w in scope.name.lower() for w in ("save", "checkpoint", "ckpt")):
            return True
        holder = self.parent.get(call)
        handle = (
            dotted(holder.optional_vars)
            if isinstance(holder, ast.withitem) and holder.optional_vars
            else dotted(holder.targets[0])
            if isinstance(holder, ast.Assign) and len(holder.targets) == 1
            else ""
        )
        return bool(handle) and any(
            dotted(a) == handle for s in saves for a in [*s.args, *(k.value for k in s.keywords)]
        )

    def _time_stamped(self, call: ast.Call) -> bool:
        """The path is built from the clock (`datetime.now().strftime(...)`, `time.time()`), here or through the
        names it is assigned to in this function: whether ranks share it depends on when each started."""
        return any(
            isinstance(n, ast.Call) and last(self.callee(n)) in CLOCK_CALLS
            for expr in self._built_from(call)
            for n in ast.walk(expr)
        )

    def _path_from_batch(self, call: ast.Call) -> bool:
        """A path made as text from what a loop over the data yields (`np.save(f"{out}/{names[i]}.npy", x)`, one
        file per sample): with a DistributedSampler each rank's samples, so their paths, are its own."""
        bound = {
            n.id
            for loop in self.ancestors(call)
            if isinstance(loop, ast.For) and self._over_batches(loop.iter)
            for n in ast.walk(self._batch_target(loop))
            if isinstance(n, ast.Name)
        }
        return bool(bound) and any(
            self._text(expr) and any(isinstance(n, ast.Name) and n.id in bound for n in ast.walk(expr))
            for expr in self._built_from(call)
        )

    def _batch_target(self, loop: ast.For) -> ast.AST:
        """What a loop over the data binds to the batch: `for i, batch in enumerate(loader)`'s batch (its counter, the
        same on every rank, is not the data)."""
        counted = any(isinstance(n, ast.Call) and self.callee_last(n) == "enumerate" for n in ast.walk(loop.iter))
        if counted and isinstance(loop.target, ast.Tuple) and len(loop.target.elts) == 2:
            return loop.target.elts[1]
        return loop.target

    def _text(self, expr: ast.AST) -> bool:
        """`expr` builds a string (a path): an f-string, `"a" + x`, `"%s" % x`, `os.path.join(...)`, `"{}".format(x)`
        (not the tensors a batch's values make)."""
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Mod)):
            return any(self._text(side) for side in (expr.left, expr.right))
        if isinstance(expr, ast.Call):
            return self.callee_last(expr) in ("join", "format")
        return isinstance(expr, ast.JoinedStr) or (isinstance(expr, ast.Constant) and isinstance(expr.value, str))

    def _built_from(self, call: ast.Call) -> list[ast.AST]:
        """`call`'s arguments and the values the names in them are assigned in the function around it, transitively:
        what a written path is built from."""
        scope = self.enclosing_function(call)
        body = scope.body if scope is not None else self.tree.body
        assigned: dict[str, list[ast.AST]] = {}
        for node in walk_same_function(body):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                assigned.setdefault(dotted(node.targets[0]), []).append(node.value)
        found, todo, seen = [], [*call.args, *(k.value for k in call.keywords)], set()
        while todo:
            expr = todo.pop()
            found.append(expr)
            for n in ast.walk(expr):
                if isinstance(n, (ast.Name, ast.Attribute)) and (key := dotted(n)) not in seen:
                    seen.add(key)
                    todo.extend(assigned.get(key, []))
        return found

    def _path_parameter(self, call: ast.Call) -> tuple[ast.AST, str] | None:
        """(function, parameter) when the written path is built from a bare parameter of the enclosing function
        (`open(filename, "w")`, `download_url(url, root)`), not from a config object's field (`args.root`)."""
        func = self.enclosing_function(call)
        if func is None:
            return None
        params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]} - {"self", "cls"}
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            for n in ast.walk(arg):
                if (
                    isinstance(n, ast.Name)
                    and n.id in params
                    and not isinstance(self.parent.get(n), (ast.Attribute, ast.Subscript))
                ):
                    return func, n.id
                if (
                    isinstance(n, ast.Attribute)
                    and dotted(n.value) == "self"
                    and (given := self._set_by_constructor(func, n.attr)) is not None
                ):
                    return given  # self.path = path in __init__: whoever builds the object chooses the path
        return None

    def _set_by_constructor(self, method: ast.AST, attr: str) -> tuple[ast.AST, str] | None:
        """(__init__, parameter) when the class of `method` sets self.<attr> from a parameter of its __init__."""
        cls = self.parent.get(method)
        init = next(
            (f for f in getattr(cls, "body", []) if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None
        )
        if init is None:
            return None
        params = {a.arg for a in [*init.args.args, *init.args.kwonlyargs]} - {"self"}
        for n in ast.walk(init):
            if (
                isinstance(n, ast.Assign)
                and any(dotted(t) == f"self.{attr}" for t in n.targets)
                and isinstance(n.value, ast.Name)
                and n.value.id in params
            ):
                return init, n.value.id
        return None

    @functools.cached_property
    def _imported_twice(self) -> set[str]:
        """Names two imports bind to different things (`if not is_master: from metrics import SummaryWriterDummy as
        SummaryWriter` `else: from torch.utils.tensorboard import SummaryWriter`): which one a rank calls is its own."""
        bound: dict[str, set[str]] = {}
        for node in self.nodes:
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    bound.setdefault(a.asname or a.name, set()).add(f"{node.module}.{a.name}")
        return {name for name, targets in bound.items() if len(targets) > 1}

    def _writes(self, call: ast.Call) -> str | None:
        name, method = self.callee(call), method_name(call)
        builtin = name == "open" and isinstance(call.func, ast.Name)  # (`(folder / "log.txt").open("a")`: a Path's)
        if builtin or (
            method == "open"
            and isinstance(call.func, ast.Attribute)
            and not dotted(call.func.value).startswith(("os", "io", "gzip", "h5py"))
        ):
            args = call.args[1:] if builtin else call.args
            if len(args) > 1 and not _a_mode(const_str(args[0])):
                args = args[1:]  # `PathManager.open(path, "a")` (iopath, fsspec): the path first, as open() has it
            mode = const_str(keyword(call, "mode")) or (const_str(args[0]) if args else None) or "r"
            if not _a_mode(mode):
                return None  # Image.open("data/img.jpg"): a path, not a mode (PIL opens for reading)
            if any(m in mode for m in "wax") and (not call.args or "devnull" not in dotted(call.args[0])):
                return f"open(..., {mode!r})"
            return None
        if last(name) == "SummaryWriter" and last(name) not in self.facts.classes | self._imported_twice:
            return "a TensorBoard SummaryWriter"  # (a project's own class is its own; so is a name imported from two
            #                                       places, a dummy writer on the other ranks)
        if last(name) in LOG_FILES or (last(name) == "basicConfig" and keyword(call, "filename") is not None):
            return f"a logging {last(name)}"  # every rank opens the log: its lines interleave (mode "w": truncated)
        if isinstance(keyword(call, "download"), ast.Constant) and keyword(call, "download").value is True:
            return f"{last(name)}(download=True)"
        if (
            last(name) in ("makedirs", "mkdir")
            and keyword(call, "exist_ok") is None
            and (name.startswith("os.") or method == "mkdir")
            and not self._error_caught(call, "FileExistsError")
        ):
            return f"{last(name)}() without exist_ok=True (FileExistsError on all ranks but the first)"
        if (
            name in REMOVALS
            and keyword(call, "ignore_errors") is None
            and not self._error_caught(call, "FileNotFoundError")
        ):
            return f"{last(name)}() (FileNotFoundError on all ranks but the first)"
        if last(name) in DOWNLOADS or name.startswith(DOWNLOAD_MODULES) and last(name) == "download":
            return f"{last(name)}()"
        if method in ("write_text", "write_bytes") or last(name) in IMAGE_WRITES or name in ARRAY_WRITES:
            return f"{last(name)}()"  # Path(...).write_text, plt.savefig, torchvision's save_image
        if name in COPIES or method == "to_csv":
            return f"{last(name)}()"
        return None

    def _error_caught(self, call: ast.Call, error: str) -> bool:
        """`try: os.mkdir(d) except: pass` (or except OSError / FileExistsError / Exception): the rank that comes
        second gets `error` (FileExistsError, FileNotFoundError) and goes on, so the race is harmless."""
        child = call
        for node in self.ancestors(call):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return False
            if isinstance(node, ast.Try) and child in node.body:
                return any(
                    h.type is None
                    or {last(dotted(t)) for t in (h.type.elts if isinstance(h.type, ast.Tuple) else [h.type])}
                    & {"OSError", error, "Exception", "BaseException", "IOError"}
                    for h in node.handlers
                )
            child = node
        return False

    # ------------------------------------------------------------------------------------------ scaled twice

    def check_scaled_twice(self) -> None:
        """lr (or batch size) multiplied (or divided) by the number of ranks, and the result scaled again. A value is
        followed as Python holds it: a plain name is its function's own (`global_batch_size` in main() and in
        train_one_epoch() are two variables), an attribute (`args.lr`) is one for the whole file, and a new value
        assigned that is not computed from the scaled one (`global_batch_size = batch_size`) starts afresh."""
        # (function, name) or (ATTRIBUTE, last name) -> (line, up|down); None: assigned afresh in that function
        scaled: dict[tuple, tuple[int, str] | None] = {}

        def key(at: ast.AST, name: str) -> tuple:
            return (ATTRIBUTE, last(name)) if "." in name else (self.enclosing_function(at), name)

        def was_scaled(at: ast.AST, name: str) -> tuple[int, str] | None:
            k = key(at, name)
            if k in scaled or k[0] is ATTRIBUTE:
                return scaled.get(k)
            return scaled.get((None, name))  # a module-level name read in a function

        def direction(value: ast.AST) -> tuple[str, list[ast.AST]] | None:
            for b in ast.walk(value):
                if isinstance(b, ast.BinOp) and isinstance(b.op, (ast.Mult, ast.Div, ast.FloorDiv)):
                    for side, rest in ((b.right, b.left), (b.left, b.right)):
                        if _world(self, side) and not (isinstance(b.op, (ast.Div, ast.FloorDiv)) and side is b.left):
                            return ("up" if isinstance(b.op, ast.Mult) else "down"), [rest]
            return None

        def report(node: ast.AST, name: str, first: int, way: str) -> None:
            self.add(
                node,
                "world-size-scaled-twice",
                WARNING,
                f"{name} is {'multiplied' if way == 'up' else 'divided'} by the number of ranks here and was "
                f"already on line {first}: scaled twice, it is off by a factor of the world size",
                "scale once: decide whether the value is per rank or for the whole job, and convert in one place",
            )

        nodes = sorted(
            (n for n in self.nodes if isinstance(n, (ast.Assign, ast.AugAssign, ast.keyword))),
            key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)),
        )
        # world_size = ngpus_per_node * world_size (nodes): the world size already counts the GPUs per node
        composed = {
            last(dotted(n.targets[0])): _factors(n.value) - {last(dotted(n.targets[0]))}
            for n in nodes
            if isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and _world(self, n.targets[0])
            and isinstance(n.value, ast.BinOp)
            and isinstance(n.value.op, ast.Mult)
        }
        for node in nodes:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and any(w in last(dotted(node.targets[0])).lower() for w in SCALED)
            ):
                factors = _factors(node.value)
                twice = next(
                    (
                        f"{w} (= {' * '.join(sorted(composed[w]))} * ...) and {f}"
                        for w in sorted(factors)
                        if w in composed
                        for f in sorted(composed[w] & factors)
                    ),
                    None,
                )
                if twice:
                    self.add(
                        node,
                        "world-size-scaled-twice",
                        WARNING,
                        f"{last(dotted(node.targets[0]))} is multiplied by {twice}: the world size already "
                        "counts those, so the value is off by that factor",
                        "scale once: decide whether the value is per rank or for the whole job, and convert "
                        "in one place",
                    )
                    continue
            if isinstance(node, ast.keyword):
                target, value = node.arg or "", node.value
            elif isinstance(node, ast.AugAssign):
                target, value = dotted(node.target), node
                if not isinstance(node.op, (ast.Mult, ast.Div, ast.FloorDiv)) or not _world(self, node.value):
                    continue
                way = "up" if isinstance(node.op, ast.Mult) else "down"
                if (before := was_scaled(node, target)) and before[1] == way:
                    report(node, target, before[0], way)
                scaled[key(node, target)] = (node.lineno, way)
                continue
            else:
                if len(node.targets) != 1:
                    continue
                target, value = dotted(node.targets[0]), node.value
            if not any(w in last(target).lower() for w in SCALED):
                continue
            found = direction(value)
            if found is None and isinstance(value, ast.Call):
                # lr = get_lr(args, world_size) with `def get_lr(args, ws): return args.lr * ws`: scaled in the helper
                found = next(
                    (
                        d
                        for f in self.nodes
                        if isinstance(f, ast.FunctionDef) and f.name == self.callee_last(value)
                        for r in ast.walk(f)
                        if isinstance(r, ast.Return) and r.value is not None and (d := direction(r.value)) is not None
                    ),
                    None,
                )
            if found is None:
                reads_itself = any(
                    dotted(n) == target for n in ast.walk(value) if isinstance(n, (ast.Name, ast.Attribute))
                )
                if not isinstance(node, ast.keyword) and not reads_itself:
                    scaled[key(node, target)] = None  # a new value, not the scaled one
                continue
            way, rest = found
            again = [
                (dotted(n), before)
                for r in rest
                for n in ast.walk(r)
                if isinstance(n, (ast.Name, ast.Attribute))
                and (before := was_scaled(node, dotted(n)))
                and before[1] == way
            ]
            if again:
                name, (line, _) = again[0]
                report(node.value if isinstance(node, ast.keyword) else node, last(name), line, way)
            if not isinstance(node, ast.keyword):
                scaled[key(node, target)] = (node.lineno, way)

    # ------------------------------------------------------------------------------------------ rank 0 leaves

    def check_rank0_leaves_loop(self) -> None:
        """`if rank == 0 and ...: break` in a loop whose iterations run collectives (or DDP's backward): the others
        go on to the next iteration's all-reduce and wait for rank 0 forever."""

        helpers = self._syncing_helper_calls

        def syncing(c: ast.AST) -> bool:
            return isinstance(c, ast.Call) and (self._syncs(c) or c in helpers)

        lines = sorted(c.lineno for c in self.calls if syncing(c))
        for loop in (n for n in self.nodes if isinstance(n, (ast.For, ast.While))):
            at = bisect.bisect_left(lines, loop.lineno)
            if at == len(lines) or lines[at] > (loop.end_lineno or loop.lineno):
                continue  # no collective within its lines (most loops): not walked
            syncs = [c for c in walk_same_function(loop.body, into_loops=True) if syncing(c)]
            if not syncs:
                continue
            for node in walk_same_function(loop.body, into_loops=False):
                if not (isinstance(node, ast.If) and body_exits(node.body) and not node.orelse):
                    continue
                test = self.rank_test(node.test)
                if test is None or isinstance(node.body[-1], ast.Continue) or self.never_runs(node.body[-1], loop):
                    continue
                self._report_early_exit(node.body[-1], node, test, syncs[0])
            # `if rank == 0: ... if val < best: ... else: break`: the exit sits deeper under the rank test
            for leave in walk_same_function(loop.body, into_loops=True):
                if not (
                    isinstance(leave, (ast.Break, ast.Return))
                    or isinstance(leave, ast.Expr)
                    and isinstance(leave.value, ast.Call)
                    and last(dotted(leave.value.func)) in ("exit", "_exit")
                ):
                    continue
                if isinstance(leave, ast.Break) and self._own_loop(leave) is not loop:
                    continue
                inside = [g for g in self.guards(leave) if g.kind != "single" and self._within(g.node, loop)]
                if self.never_runs(leave, loop):
                    continue
                flag = None
                if not inside:  # `if stop: break`, where only rank 0 ever decides `stop`
                    decided = [(f, g) for f in self._flag_tests(leave, loop) if (g := self._decided_by_one_rank(f))]
                    flag, inside = (dotted(decided[0][0]), [decided[0][1]]) if decided else (None, [])
                if inside and self.enclosing_function(leave) is self.enclosing_function(loop):
                    guard = inside[0]
                    self._report_early_exit(leave, guard.node, (guard.kind, guard.rank0), syncs[0], flag)

    def _syncs(self, call: ast.Call) -> bool:
        """A collective, or DDP's backward (its gradients' all-reduce) where a DDP model is trained."""
        return self.is_collective(call) or (method_name(call) == "backward" and bool(self.ddp_names or self.facts.ddp))

    @functools.cached_property
    def _syncing_helper_calls(self) -> set[ast.Call]:
        """Calls of this file's functions that sync in their body or in a function they call (`train_loss =
        fit_one_epoch(model, optimizer)`, whose `loss.backward()` all-reduces DDP's gradients), three calls deep."""
        found: set[ast.Call] = set()
        seen: set[ast.AST] = set()
        funcs = {self.enclosing_function(c) for c in self.calls if self._syncs(c)} - {None}
        for _ in range(3):
            sites = {site for func in funcs - seen for site in self.call_sites(func)}
            seen |= funcs
            found |= sites
            funcs = {self.enclosing_function(site) for site in sites} - {None} - seen
        return found

    def _flag_tests(self, leave: ast.AST, loop: ast.AST) -> list[ast.AST]:
        """The names (`stop`, `self.stop`) that the ifs around `leave`, within `loop`, test for truth (`if stop:`,
        `if stop == True:`, `if a and stop:`)."""
        found, child = [], leave
        for parent in self.ancestors(leave, stop=loop):
            if isinstance(parent, ast.If) and child in parent.body:
                test = parent.test
                terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
                for t in map(said_plainly, terms):
                    if isinstance(t, ast.Name) or isinstance(t, ast.Attribute) and dotted(t).startswith("self."):
                        found.append(t)
            child = parent
        return found

    def _decided_by_one_rank(self, flag: ast.AST) -> Guard | None:
        """The rank test under which `flag` gets its every value but a constant (`stop = False` before the loop; `if
        rank == 0: stop = bad >= 5`), when no collective hands it to the other ranks (`broadcast_object_list([stop])`)
        and nothing else sets it: only that rank's copy can change. A name within its function, `self.x` within its
        class."""
        key = dotted(flag)
        if isinstance(flag, ast.Name):  # the function's statements (the module's, for a name at module level)
            nodes = walk_same_function(getattr(self.enclosing_function(flag), "body", self.tree.body))
        elif (owner := self._class_of(flag)) is not None:
            nodes = ast.walk(owner)
        else:
            return None  # `self.x` outside a class: nothing to read it in
        decided: list[Guard] = []
        for node in nodes:
            if (
                isinstance(node, ast.Call)
                and self.is_collective(node)
                and any(dotted(n) == key for a in node.args for n in ast.walk(a))
            ):
                return None
            if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                pairs = (
                    zip(target.elts, node.value.elts)
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                    else [(t, node.value) for t in getattr(target, "elts", [target])]
                )
                for t, value in pairs:
                    if dotted(t) != key or isinstance(node, ast.Assign) and isinstance(value, ast.Constant):
                        continue
                    guard = next((g for g in self.guards(node) if g.rank0 and g.kind != "single"), None)
                    if guard is None:
                        return None
                    decided.append(guard)
        return decided[0] if decided else None

    def _class_of(self, node: ast.AST) -> ast.ClassDef | None:
        return next((p for p in self.ancestors(node) if isinstance(p, ast.ClassDef)), None)

    def _own_loop(self, node: ast.AST) -> ast.AST | None:
        """The loop a `break` leaves (None, or a function, when it is in none)."""
        return next(
            (
                p
                for p in self.ancestors(node)
                if isinstance(p, (ast.For, ast.While, ast.AsyncFor, ast.FunctionDef, ast.AsyncFunctionDef))
            ),
            None,
        )

    def _within(self, node: ast.AST, ancestor: ast.AST) -> bool:
        return any(p is ancestor for p in self.ancestors(node))

    def _report_early_exit(
        self, leave: ast.AST, where: ast.AST, test: tuple, sync: ast.Call, flag: str | None = None
    ) -> None:
        if any(f.rule == "rank0-early-exit" and f.line == self.line_of(leave) for f in self.findings):
            return
        who = "rank 0" if test[1] else "every rank but 0"
        why = (
            f"{who} leaves this loop here (the rank test on line {where.lineno})"
            if flag is None
            else f"`{flag}` is decided on {who} only (the rank test on line {where.lineno}), and this line leaves "
            f"the loop when it holds: {who} leaves"
        )
        self.add(
            leave,
            "rank0-early-exit",
            ERROR,
            f"{why} while the others go on to {self.callee_last(sync)} on line {sync.lineno}: "
            "they wait for it until the timeout (or crash when it exits)",
            "decide to stop on every rank: compute the decision on rank 0, broadcast it "
            "(dist.broadcast_object_list), then break on all ranks together",
        )


def _taken_from(value: ast.AST) -> ast.AST:
    """What `value` reads a part of (`losses` in `losses.pop("loss")`, `losses["loss"]`, `t.item()`), or itself."""
    while True:
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            value = value.func.value
        elif isinstance(value, (ast.Subscript, ast.Attribute)):
            value = value.value
        else:
            return value


def _added_to_itself(store: ast.Assign) -> ast.AST | None:
    """What `d[k] = d.get(k, 0) + x` (or `d[k] = d[k] + x`) adds to the slot it stores: x; None for another store."""
    target, value = store.targets[0], store.value
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
        return None
    for mine, added in ((value.left, value.right), (value.right, value.left)):
        if ast.dump(mine) == ast.dump(target, include_attributes=False).replace("Store()", "Load()"):
            return added
        if (
            isinstance(mine, ast.Call)
            and isinstance(mine.func, ast.Attribute)
            and mine.func.attr == "get"
            and dotted(mine.func.value) == dotted(target.value)
        ):
            return added
    return None


def _a_mode(text: str | None) -> bool:
    """An open() mode (`"a"`, `"wb"`), not a path (`Image.open("data/img.jpg")`)."""
    return text is not None and re.fullmatch(r"[rwxabt+]{1,4}", text) is not None


def _held_in(node: ast.AST) -> ast.AST:
    """The container a subscript reads from (`records` of `records["loss"]`), or the node itself."""
    return node.value if isinstance(node, ast.Subscript) else node


def _a_meter(cls: str) -> bool:
    """A running-average meter: `AverageMeter`, DETR's and torchvision's `MetricLogger` and `SmoothedValue`."""
    return cls.endswith("Meter") or cls in ("MetricLogger", "SmoothedValue")


def _meters_made(value: ast.AST, whole_container: bool) -> list[ast.AST]:
    """What an assignment makes meters of: the value itself, or for a container of meters (`records = {"loss":
    AverageMeter()}`, `{k: AverageMeter() for k in keys}`) its values."""
    if whole_container and isinstance(value, ast.Dict):
        return list(value.values)
    if whole_container and isinstance(value, ast.DictComp):
        return [value.value]
    return [value]


SCALED = ("lr", "learning_rate", "batch", "bs")  # what is scaled by the number of ranks


def _world(self: ScriptReader, node: ast.AST) -> bool:
    """The number of ranks: world_size, nprocs, dist.get_world_size(), os.environ['WORLD_SIZE']."""
    if isinstance(node, ast.Call):
        return self.callee_last(node) == "get_world_size" or (
            self.callee_last(node) == "int" and bool(node.args) and _world(self, node.args[0])
        )
    if isinstance(node, ast.Subscript):
        return const_str(node.slice) == "WORLD_SIZE"
    name = last(dotted(node)).lower()
    return bool(name) and ("world_size" in name or name in ("world", "nprocs", "num_gpus", "ngpus", "n_gpus"))


def _factors(expr: ast.AST) -> set[str]:
    """The names a product multiplies by: `lr * float(bs * ngpus * world_size) / 256` -> lr, bs, ngpus, world_size."""
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        return _factors(expr.left) | _factors(expr.right)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Div, ast.FloorDiv)):
        return _factors(expr.left)
    if isinstance(expr, ast.Call) and last(dotted(expr.func)) in ("float", "int") and len(expr.args) == 1:
        return _factors(expr.args[0])
    if isinstance(expr, (ast.Name, ast.Attribute)) and dotted(expr):
        return {last(dotted(expr))}
    return set()


def _only_last_value(report: ast.Call, name: str) -> bool:
    """Every use of the meter in the report is its latest value (`losses.val`, a SmoothedValue's `.value`): this
    rank's last batch, as `loss.item()` is, not the sum it keeps over the epoch."""
    read = {id(n.value): n.attr for n in ast.walk(report) if isinstance(n, ast.Attribute)}  # x -> attr of x.attr
    uses = [n for n in ast.walk(report) if isinstance(n, (ast.Name, ast.Attribute)) and dotted(n) == name]
    return bool(uses) and all(read.get(id(u)) in LAST_VALUE for u in uses)


def _names_given(body: list[ast.stmt], kind) -> set[str]:
    """The plain names this scope assigns a value of that kind (`start = time.time()`, `losses = []`)."""
    return {
        t.id
        for n in walk_same_function(body)
        if isinstance(n, ast.Assign) and kind(n.value)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def _cuda_index(arg: ast.AST) -> list[ast.AST]:
    """The index in f"cuda:{i}" (or "cuda:" + str(i)): what torch.device / .to() is given as the GPU."""
    if isinstance(arg, ast.JoinedStr):
        text = "".join(v.value for v in arg.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
        if text.rstrip().endswith("cuda:") or text == "cuda:":
            return [v.value for v in arg.values if isinstance(v, ast.FormattedValue)]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add) and const_str(arg.left) == "cuda:":
        return [arg.right]
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod) and const_str(arg.left) in ("cuda:%d", "cuda:%s"):
        return [arg.right]  # 'cuda:%d' % rank
    if (
        isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr == "format"
        and const_str(arg.func.value) == "cuda:{}"
        and arg.args
    ):
        return [arg.args[0]]  # 'cuda:{}'.format(rank)
    return []
