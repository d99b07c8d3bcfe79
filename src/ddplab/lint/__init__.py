"""Static checks of a DDP training script (Python ast): the mistakes that make multi-GPU runs hang, crash, or train
on the wrong data without saying so. Each finding has a line, a rule id, a level, a message and a fix.

Errors break or hang a distributed run for certain; warnings are mistakes with a cost (wrong data, lost or
unloadable checkpoints, a script that runs on GPUs only). Checks are heuristics over names and one file: scriptread.py
follows rank guards as a reader does, checks.py holds the checks; docs/lint.md lists them and how often they are
right on public scripts.
"""

from __future__ import annotations

import ast
import functools
import gc
import os
from dataclasses import dataclass
from pathlib import Path

from ddplab.errors import DdplabError
from ddplab.lint import launches as launch_texts
from ddplab.lint import project as projects
from ddplab.lint import vocabulary
from ddplab.lint.callers import Callers, by_name_prefix, registries
from ddplab.lint.checks import BATCHNORM_MODELS, BUFFER_LAYERS, SEED_CALLS, Checks
from ddplab.lint.findings import ERROR, POSSIBLE, SURE, WARNING, Finding, LintResult
from ddplab.lint.launches import Launches
from ddplab.lint.rules import by_id
from ddplab.lint.rules import passes as rule_passes
from ddplab.lint.scriptread import (
    DDP_NAMES,
    Facts,
    _kind_by_name,
    const_str,
    default_of,
    dotted,
    forget_trees,
    function_locals,
    is_main_block,
    keyword,
    last,
    passed,
    static,
)

RANK_SPAWNERS = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}
# why a finding of a run-time rule (Rule.modules_at_run) in an imported module is possible
AT_RUN = "in an imported module: whether every rank runs it, on one path, shows in a run"

__all__ = ["ERROR", "POSSIBLE", "SURE", "WARNING", "Finding", "LintResult", "lint_file", "lint_source"]


def _without_cycle_collection(lint):
    """A project's syntax trees are a few million small objects that reference counting alone frees (a tree and
    the maps over it hold no cycles); Python's cycle collector would walk them all again each time enough new ones
    are made: a quarter of the time on a 100-file project (benchmarks/lint_speed.py). Paused for the lint."""

    @functools.wraps(lint)
    def paused(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return lint(*args, **kwargs)
        finally:
            forget_trees()  # this lint's trees go now, freed by their counts, before the collector is back
            if was:
                gc.enable()

    return paused


def lint_file(path: str | Path, show_all: bool = False) -> LintResult:
    """Lint a script with the local modules it imports, or every Python file of a folder, with the names its
    project adds in pyproject.toml ([tool.ddplab.lint], vocabulary.py)."""
    path = Path(path)
    if not path.exists():
        raise DdplabError(f"{path}: no such file or folder: pass the path of a Python training script or its folder")
    added, note = vocabulary.read(path if path.is_dir() else path.parent)
    with vocabulary.extended(added):
        result = _lint_path(path, show_all)
    if note:
        result.notes.append(note)
    return result


@_without_cycle_collection
def _lint_path(path: Path, show_all: bool) -> LintResult:
    if path.is_dir():
        return lint_folder(path, show_all)
    if path.is_file():
        try:
            project = projects.of_script(path)
        except SyntaxError as e:
            raise DdplabError(f"{e.args[0]}: fix the syntax, then lint again") from None
        except (OSError, ValueError) as e:
            raise DdplabError(f"{path}: cannot read it ({e}): check its permissions") from None
    else:
        raise DdplabError(f"{path}: no such file or folder: pass the path of a Python training script or its folder")
    return lint_project(project, str(path), show_all)


def lint_folder(folder: Path, show_all: bool = False) -> LintResult:
    """Each script of the folder read with its own imports (scripts side by side do not share their setup); a module
    no script imports is read on its own. One result, every finding naming its file."""
    cache: dict = {}
    whole = projects.of_folder(folder, cache)
    if not whole.trees and not whole.unread:
        raise DdplabError(f"{folder}: no Python file in this folder: pass a training script or its folder")
    findings: dict[tuple, Finding] = {}
    hidden: set[tuple] = set()
    hidden_rules: set[str] = set()
    backend = backend_line = None
    for entry in whole.entries:
        project = projects.of_script(entry, cache)
        result = lint_project(project, str(folder), show_all=True, shown_from=(folder, whole.root))
        backend, backend_line = backend or result.backend, backend_line or result.backend_line
        for f in result.findings:
            key = (f.path, f.line, f.rule)
            if f.confidence == SURE or show_all:
                findings.setdefault(key, f)
            else:
                hidden.add(key)
                hidden_rules.add(f.rule)
    ordered = sorted(findings.values(), key=lambda f: (f.path or "", f.line, f.rule))
    errors = sum(f.level == ERROR for f in ordered)
    return LintResult(
        script=str(folder),
        findings=ordered,
        errors=errors,
        warnings=len(ordered) - errors,
        backend=backend,
        backend_line=backend_line,
        ok=errors == 0,
        possible=len(hidden - set(findings)),
        possible_rules=sorted(hidden_rules),
        files=len(whole.trees),
        unread=whole.unread,
    )


@_without_cycle_collection
def lint_source(source: str, script: str = "<script>", show_all: bool = False) -> LintResult:
    try:
        tree = ast.parse(source, filename=script)
    except SyntaxError as e:
        where = f"{script}:{e.lineno}" if e.lineno else script  # a NUL byte has no line
        raise DdplabError(f"{where}: not valid Python ({e.msg}): fix the syntax, then lint again") from None
    entry = Path(script)
    return lint_project(projects.Project(root=entry.parent, trees={entry: tree}, entries=[entry]), script, show_all)


def gather(trees: dict[Path, ast.Module]) -> Facts:
    """What every file says about the run: read once, used by the checks of each file."""
    facts = Facts()
    readers = [Checks(tree) for tree in trees.values()]
    # names some file uses (loads, attributes): a function named nowhere is never called (`def cleanup():
    # dist.destroy_process_group()` that nothing calls destroys nothing); read only when a destroy sits in a function
    used = (
        {
            n.id if isinstance(n, ast.Name) else n.attr
            for r in readers
            for n in r.nodes
            if isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load)
        }
        if any(
            r.calls_by_name.get("destroy_process_group") and any(is_main_block(n) for n in r.tree.body) for r in readers
        )
        else set()
    )
    spawn_flags = {flag for reader in readers for flag in reader.spawn_flags()}
    for reader in readers:
        facts.replaces_print |= reader.replaces_print_here(spawn_flags)
        facts.sets_device |= reader.sets_device_here()
        facts.destroys |= reader.destroys_group(used)
        facts.distributed |= reader.distributed
        facts.ddp |= any(reader.callee_last(c) in DDP_NAMES for c in reader.calls)
        facts.classes |= {n.name for n in reader.nodes if isinstance(n, ast.ClassDef)}
        facts.sharding_datasets |= {  # a data set whose items come from loaders it shards itself (deepmd's loader set)
            n.name
            for n in reader.nodes
            if isinstance(n, ast.ClassDef)
            and any(isinstance(f, ast.FunctionDef) and f.name in ("__getitem__", "__iter__") for f in n.body)
            and any(isinstance(c, ast.Call) and reader.callee_last(c) == "DistributedSampler" for c in ast.walk(n))
        }
        facts.spawns |= reader.spawns
        facts.visible_per_process |= reader.visible_per_process_here()
        facts.no_sync |= any(
            isinstance(n, ast.Attribute) and n.attr in ("no_sync", "require_backward_grad_sync") for n in reader.nodes
        )
        facts.reads_local_rank_env |= _reads_local_rank(reader)
        facts.sampler |= any(reader.callee_last(c) == "DistributedSampler" for c in reader.calls)
        facts.local_rank_flags |= {dest for _, dest in reader.local_rank_flags()}
        for n in reader.nodes:
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                v = reader.parent[n].value if isinstance(reader.parent[n], ast.Assign) else None  # x.A's A, =, ?
                facts.stored_attrs.setdefault(n.attr, set()).add(_stored_kind(reader, v))
        reader.check_backend()
        facts.backend_nccl |= reader.backend == "nccl"
        tests, values, factories = reader.helper_results()
        facts.rank_tests.update(tests)
        facts.rank_values.update(values)
        facts.ddp_factories |= factories
        facts.sum_returners.update(reader.sum_returners())
        facts.plain_loader_makers |= reader.plain_loader_makers()
        facts.loader_branches.update(reader.loader_branches())
        facts.rank0_decorators |= reader.rank0_decorators()
        facts.set_epoch |= bool(reader.calls_by_name.get("set_epoch"))
        facts.seeded |= any(reader.callee_last(c) in SEED_CALLS for c in reader.calls)
        facts.reduce_returners.update(reader.reduce_returners())
        facts.meter_classes |= reader.meter_classes()
    for reader in readers:  # with the project's DDP factories known: `model = model_cuda(model, gpu)` wraps too
        reader.facts.ddp_factories = facts.ddp_factories
        facts.gpu_training |= reader.trains_on_gpus_only()
    for _ in range(3):  # a helper returning another helper's test (`return is_global_primary(args)`): known next round
        known = dict(facts.rank_tests)
        for reader in readers:
            reader.facts.rank_tests = known
            facts.rank_tests.update(reader.helper_results()[0])
        if facts.rank_tests == known:
            break
    for reader in readers:  # `self.is_primary = is_primary()`, a helper's rank test stored: known now
        if reader.calls_by_name.keys() & facts.rank_tests.keys():
            reader.learn_assignments()
    facts.attr_tests = _attribute_tests(readers)
    for reader in readers:  # what the project's helpers return, known now: `self.device = self._acquire_device()`
        reader.facts.rank_values = facts.rank_values
    facts.attr_ranks = _attribute_ranks(readers)
    facts.buffer_classes = _buffer_classes(readers)
    facts.buffer_factories = {
        name for r in readers for name in r.buffer_factories(facts.ddp_factories, facts.buffer_classes)
    }
    defs, calls = _definitions(readers)
    facts.attr_truths = _attribute_truths(readers, defs, calls)
    sinks = _rank_sinks(readers, defs, calls)
    for _ in range(3):  # a rank handed down several calls (main(rank) -> setting(rank) -> Trainer(gpu_id=rank))
        found = _rank_parameters(defs, calls)
        found = ({**sinks, **found[0]}, found[1])
        if found == (facts.param_ranks, facts.param_tests):
            break
        facts.param_ranks, facts.param_tests = found
        named = {name.split(".")[0] for name, _ in [*found[0], *found[1]]}
        for reader in readers:
            reader.facts.param_ranks, reader.facts.param_tests = found
            if named & (set(reader.functions) | {n.name for n in reader.nodes if isinstance(n, ast.ClassDef)}):
                reader.learn_assignments()  # `self.gpu_id = gpu_id` now holds what the callers pass
    # functions that report on rank 0 only (`def log_info(self, s): if self.is_primary: print(s)`), read with every
    # stored rank test known
    facts.rank0_printers = {name for reader in readers for name in reader.rank0_printers_here}
    calls: dict[str, set[str]] = {}
    facts.print_installers = _print_installers(readers, calls)
    facts.group_makers = _group_makers(calls)
    facts.spawners = _with_callers(_spawning(readers), calls)
    facts.replaces_print = facts.replaces_print and _filter_installed(readers, facts.print_installers)
    return facts


def _definitions(readers: list) -> tuple[dict, dict]:
    """The project's functions by the name that calls them (a class's name calls its __init__), and the calls of
    each such name: (reader, call)."""
    defs: dict[str, list] = {}
    for reader in readers:
        for node in reader.nodes:
            if isinstance(node, ast.ClassDef):
                defs.setdefault(node.name, []).extend(
                    f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"
                )
            elif isinstance(node, ast.FunctionDef) and node.name != "__init__":
                defs.setdefault(node.name, []).append(node)
    calls: dict[str, list] = {}
    for reader in readers:
        for name, found in reader.calls_by_name.items():
            if name in defs:
                calls.setdefault(name, []).extend((reader, c) for c in found)
    return defs, calls


def _rank_parameters(defs: dict, calls: dict) -> tuple[dict, dict]:
    """Parameters every call in the project fills with a rank (`setup_logger(name, dir, get_rank())`: the
    parameter is the global rank) or with a rank-0 test (`parse_args(rank == 0)`, or False: `if verbose: print`
    runs on rank 0 only): (function, parameter) -> kind, and -> (kind, rank0). `defs`, `calls`: _definitions."""
    kinds: dict = {}
    tests: dict = {}
    for name, funcs in defs.items():
        sites = [(r, c) for r, c in calls.get(name, []) if r.enclosing_function(c) not in funcs]
        if not funcs or not sites or len({tuple(a.arg for a in f.args.args) for f in funcs}) != 1:
            continue  # never called, or namesakes with other parameters
        params = [a.arg for a in funcs[0].args.args]
        for param in params:
            if param in ("self", "cls"):
                continue
            given = [(reader, passed(call, funcs[0], param), call) for reader, call in sites]
            if any(v is None for _, v, _ in given):
                continue
            found = {r.rank_kind(v) for r, v, _ in given}
            key = (funcs[0].name, param) if funcs[0].name != "__init__" else (f"{name}.__init__", param)
            if len(found) == 1 and None not in found:
                kinds[key] = found.pop()
                continue
            falsy = any(isinstance(v, ast.Constant) and v.value in (False, None) for _, v, _ in given)
            found_tests = {_test_given(r, v, call, falsy) for r, v, call in given}
            rank0 = {t for t in found_tests if t}
            if rank0 and all(t is False or t and t[1] for t in found_tests) and len({t[0] for t in rank0}) == 1:
                tests[key] = (rank0.pop()[0], True)
    return kinds, tests


def _rank_sinks(readers: list, defs: dict, calls: dict) -> dict:
    """Parameters that end as init_process_group's `rank=`, however named (`def train(dev): setup_dist(dev, ...)`,
    `def setup_dist(rank, ...): init_process_group(rank=rank)`): the global rank, so `dev == 0` is a rank-0 test.
    Followed up through the project's calls; a parameter whose own name says another kind (`gpu`) keeps it."""
    sinks: dict = {}
    for reader in readers:
        for call in reader.calls:
            given = keyword(call, "rank")
            func = reader.enclosing_function(call)
            if reader.callee_last(call) == "init_process_group" and isinstance(given, ast.Name) and func is not None:
                if given.id in {a.arg for a in func.args.args}:
                    sinks[(func.name, given.id)] = "global"
    for _ in range(3):  # up the calls: whoever hands its own parameter to such a parameter
        grown = dict(sinks)
        for (name, param), kind in sinks.items():
            for reader, call in calls.get(name, []):
                outer, value = reader.enclosing_function(call), passed(call, defs[name][0], param)
                if isinstance(value, ast.Name) and outer is not None and value.id in {a.arg for a in outer.args.args}:
                    grown.setdefault((outer.name, value.id), kind)
        if grown == sinks:
            break
        sinks = grown
    return {key: kind for key, kind in sinks.items() if _kind_by_name(key[1].lower()) is None}


def _test_given(reader, value: ast.AST, call: ast.Call, falsy: bool):
    """The rank test a call's argument amounts to: a test itself (`verbose=rank == 0`); False for False or None
    (falsy on the ranks that pass it); and, where other calls pass False or None, whatever a call made on rank 0
    only passes (`Trainer(logger=logger, save_path=p)` under `if rank == 0:`, `Trainer()` elsewhere: the
    parameter is set on rank 0 only, so `if self.save_path is None: return` leaves the other ranks)."""
    if isinstance(value, ast.Constant) and value.value in (False, None):
        return False
    test = reader.rank_test(value)
    if test or not falsy or isinstance(value, ast.Constant) and not value.value:
        return test
    return next(
        ((kind, True) for kind in ("global", "local", "device") if reader.runs_on_rank0_only(call, frozenset({kind}))),
        None,
    )


def _attribute_tests(readers: list[Checks]) -> dict[str, tuple]:
    """Attribute names that every store in the project assigns the same rank test (`args.should_save = bool(args.logs)
    and is_master(args)` in main.py): `if args.should_save:` in another module is that test. A name also given a
    rank itself, or anything else, is left out."""
    return _every_store(readers, lambda reader, value: None if reader.rank_kind(value) else reader.rank_test(value))


def _attribute_ranks(readers: list[Checks]) -> dict[str, str]:
    """Attribute names that every store in the project assigns a rank of one kind (`self.device =
    self._acquire_device()`, which returns LOCAL_RANK, in a base class's module): `if self.device == 0:` in a
    subclass's module tests that rank. A name also given anything else is left out; a store of what a caller hands
    over (`self.device = device`: EarlyStopping(device=self.device)) counts neither way."""
    return _every_store(readers, lambda reader, value: reader.rank_kind(value), skip=_handed_through)


def _every_store(readers: list[Checks], fact, skip=None) -> dict:
    """Attribute name -> what `fact(reader, value)` says of every value the project stores in it, where that is the
    same for all (and not None); stores `skip(reader, target, value)` passes over do not count."""
    found: dict = {}
    other: set[str] = set()
    for reader in readers:
        for n in reader.nodes:
            if not (isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)):
                continue
            stmt = reader.parent.get(n)
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
            if skip is not None and skip(reader, n, value):
                continue
            known = None if value is None else fact(reader, value)
            if known is None or found.setdefault(n.attr, known) != known:
                other.add(n.attr)
    return {name: known for name, known in found.items() if name not in other}


def _handed_through(reader: Checks, target: ast.Attribute, value: ast.AST | None) -> bool:
    """`self.A = A` in a function whose parameter A defaults to None (or to nothing): it holds what a caller hands
    over, not a value of its own."""
    func = reader.enclosing_function(target)
    if not (isinstance(value, ast.Name) and value.id == target.attr and func is not None):
        return False
    default = default_of(func, value.id)
    return value.id in {a.arg for a in [*func.args.args, *func.args.kwonlyargs]} and (
        default is None or isinstance(default, ast.Constant) and default.value is None
    )


def _attribute_truths(readers: list[Checks], defs: dict, calls: dict) -> dict[str, bool]:
    """Attribute names whose every store in the project gives them one truth: a constant (`self.stop_training =
    False  # set True to interrupt training`, which nothing sets) or a constructor's parameter that every construction
    of its class fills with a constant of that truth (`Trainer(model, multi_gpus=True)`, `self.multi_gpus =
    multi_gpus`): a branch on the other truth never runs, unless code outside the project sets it. Any other store
    (another value, +=, a for target, setattr) keeps the name out. `defs`, `calls`: _definitions."""
    truths: dict[str, set] = {}
    other: set = set()
    # class names used otherwise than called (a base class, a registry's value, a class handed on): built elsewhere
    loose = {
        n.id if isinstance(n, ast.Name) else n.attr
        for reader in readers
        for n in reader.nodes
        if isinstance(n, (ast.Name, ast.Attribute))
        and isinstance(n.ctx, ast.Load)
        and not (isinstance(reader.parent.get(n), ast.Call) and reader.parent[n].func is n)
    }
    for reader in readers:
        known = set()
        for n in reader.nodes:
            if (
                isinstance(n, (ast.Assign, ast.AnnAssign))
                and (truth := _stored_truth(reader, n, defs, calls, loose)) is not None
            ):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    if isinstance(t, ast.Attribute):
                        known.add(id(t))
                        truths.setdefault(t.attr, set()).add(truth)
        for n in reader.nodes:
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, (ast.Store, ast.Del)) and id(n) not in known:
                other.add(n.attr)
            elif isinstance(n, ast.Call) and reader.callee_last(n) == "setattr" and len(n.args) > 1:
                other.add(const_str(n.args[1]) or "")
    return {attr: found.pop() for attr, found in truths.items() if len(found) == 1 and attr not in other}


def _reads_local_rank(reader: Checks) -> bool:
    """The file reads LOCAL_RANK: the name anywhere but where it is only written or tested for (PoinTr's `if
    "LOCAL_RANK" not in os.environ: os.environ["LOCAL_RANK"] = str(args.local_rank)` reads the flag, not it)."""
    for n in reader.nodes:
        if isinstance(n, ast.Constant) and n.value == "LOCAL_RANK":
            up = reader.parent.get(n)
            written = isinstance(up, ast.Subscript) and isinstance(up.ctx, ast.Store)
            tested = isinstance(up, ast.Compare) and up.left is n and isinstance(up.ops[0], (ast.In, ast.NotIn))
            if not (written or tested):
                return True
    return False


def _stored_kind(reader: Checks, value: ast.AST | None) -> str:
    """What an attribute is assigned, for Facts.stored_attrs: `x.A`'s A, "=" for a constant, "?" for anything else;
    a parameter every call of its function here fills with `x.A` is A too (`args.local_rank = local_rank` in
    `main_worker(local_rank, args)`, called `main_worker(args.local_rank, args)`: the flag's value stored back)."""
    if (
        isinstance(value, ast.Name)
        and reader._parameter(value)
        and value.id not in reader.stores(func := reader.enclosing_function(value))
    ):
        given = {getattr(passed(site, func, value.id), "attr", "?") for site in reader.call_sites(func)}
        return given.pop() if len(given) == 1 else "?"
    return getattr(value, "attr", "=" * isinstance(value, ast.Constant) or "?")


def _stored_truth(reader: Checks, store: ast.AST, defs: dict, calls: dict, loose: set) -> bool | None:
    """The truth `store` gives its target: a constant's (False, None, 0 or True), or that of the constant every
    construction of the class passes for the __init__ parameter it stores (the class built by its name alone: not
    subclassed, kept in a registry or handed on); None when not known."""
    value = store.value
    if isinstance(value, ast.Constant):
        return bool(value.value) if value.value in (False, None, 0) or value.value is True else None
    func = reader.enclosing_function(store)
    cls = reader.parent.get(func) if func is not None else None
    if not (isinstance(value, ast.Name) and isinstance(cls, ast.ClassDef) and func.name == "__init__"):
        return None
    if value.id not in {a.arg for a in func.args.args[1:]} or value.id in reader.stores(func):
        return None
    sites = calls.get(cls.name, [])
    if not sites or defs.get(cls.name) != [func] or cls.name in loose:
        return None
    given = [passed(call, func, value.id) for _, call in sites]
    found = {bool(v.value) if isinstance(v, ast.Constant) else None for v in given}
    return found.pop() if len(found) == 1 else None


def _group_makers(calls: dict[str, set[str]]) -> set[str]:
    """Functions of the project that make the process group: call init_process_group, or a function that does
    (`calls`: each function's callees, as _print_installers gathered them)."""
    return _with_callers({name for name, called in calls.items() if "init_process_group" in called}, calls)


def _spawning(readers: list) -> set[str]:
    """Functions of the project that start the ranks themselves (`mp.spawn(run, ...)` in SlowFast's `launch_job`);
    not a `multiprocessing.Process` (open_clip's remote-sync process is no rank)."""
    return {
        func.name
        for reader in readers
        for c in reader.calls
        if reader.callee(c) in RANK_SPAWNERS and (func := reader.enclosing_function(c)) is not None
    }


def _with_callers(found: set[str], calls: dict[str, set[str]]) -> set[str]:
    """`found` and the functions that call one of them, up to four calls away (`calls`: each function's callees)."""
    for _ in range(4):
        grown = {name for name, called in calls.items() if called & found} - found
        if not grown:
            break
        found |= grown
    return found


def _filter_installed(readers: list, installers: set[str]) -> bool:
    """The print filter is installed somewhere that runs: `builtins.print = ...` at a module's top level, or a call
    of an installer from outside the installers (init_distributed_mode -> setup_for_distributed, called by the
    script). DETR's util/misc.py copied into a project whose script never calls init_distributed_mode filters
    nothing."""
    for reader in readers:
        for n in reader.nodes:
            if reader.sets_print(n) and reader.enclosing_function(n) is None:
                return True
            if (
                isinstance(n, ast.Call)
                and reader.function_called(n) in installers
                and ((func := reader.enclosing_function(n)) is None or func.name not in installers)
            ):
                return True
            if (  # handed over to be called: `parser.set_defaults(func=ssl)` then `args.func(args)`, mp.spawn(main)
                isinstance(n, (ast.Name, ast.Attribute))
                and isinstance(n.ctx, ast.Load)
                and (n.id if isinstance(n, ast.Name) else n.attr) in installers
                and not (isinstance(reader.parent.get(n), ast.Call) and reader.parent[n].func is n)
                and ((func := reader.enclosing_function(n)) is None or func.name not in installers)
            ):
                return True
    return False


def _conditional(reader, node: ast.AST, stop: ast.AST) -> bool:
    """`node` sits under an `if` (or a conditional expression) inside `stop`."""
    parent = reader.parent.get(node)
    while parent is not None and parent is not stop:
        if isinstance(parent, (ast.If, ast.IfExp)):
            return True
        parent = reader.parent.get(parent)
    return False


def _print_installers(readers: list, calls: dict[str, set[str]]) -> set[str]:
    """Functions that install the print filter (`builtins.print = ...`), or call one that does; fills `calls` with
    each function's callees on the way."""
    found: set[str] = set()
    for reader in readers:
        for n in reader.nodes:  # each call and print assignment counts for every function it is in (one walk up)
            if isinstance(n, ast.FunctionDef):
                calls.setdefault(n.name, set())
            call, sets = isinstance(n, ast.Call), reader.sets_print(n)
            if not (call or sets):
                continue
            outer = reader.parent.get(n)
            while outer is not None:
                if isinstance(outer, ast.FunctionDef):
                    # a call of a function by name or through a module, or of a method of this object: not
                    # `model.train()`, which is no call of the script's `def train()`
                    if call and (reader.function_called(n) or dotted(n.func).split(".")[0] in ("self", "cls")):
                        calls.setdefault(outer.name, set()).add(reader.callee_last(n))
                    if sets:
                        found.add(outer.name)
                outer = reader.parent.get(outer)
    return _with_callers(found, calls)


def _buffer_classes(readers: list) -> set[str]:
    """Classes of the project whose modules hold buffers: a BatchNorm layer or register_buffer in the class, a
    torchvision network with BatchNorm, or another such class of the project (`class Net: self.block = Block()`)."""
    uses: dict[str, set[str]] = {}
    buffered: set[str] = set()
    for reader in readers:
        for cls in (n for n in reader.nodes if isinstance(n, ast.ClassDef)):
            calls = [c for c in ast.walk(cls) if isinstance(c, ast.Call)]
            uses.setdefault(cls.name, set()).update(reader.callee_last(c) for c in calls)
            # a buffer made only under a condition (nanoGPT: `if not self.flash: self.register_buffer(...)`, no
            # buffer on torch >= 2) is no evidence
            if any(
                (
                    BUFFER_LAYERS.fullmatch(reader.callee_last(c))
                    or reader.callee(c).startswith("torchvision.models.")
                    and BATCHNORM_MODELS.fullmatch(reader.callee_last(c))
                )
                and not _conditional(reader, c, cls)
                for c in calls
            ):
                buffered.add(cls.name)
    return _with_callers(buffered, uses)  # a class built from buffered classes holds their buffers


def _references(tree: ast.Module) -> dict[str, list[int]]:
    """Each name the file uses (called, passed on, looked up as an attribute, imported) -> the lines it is used on."""
    refs: dict[str, list[int]] = {}
    nodes = static(tree)[0]
    modules = {a.asname or a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
    shadowed = function_locals(nodes)  # `run = wandb.init()` in a function: its `run` is not the module's run()
    for n in nodes:
        if isinstance(n, ast.Name):
            if id(n) not in shadowed:
                refs.setdefault(n.id, []).append(n.lineno)
        elif isinstance(n, ast.Attribute):
            root = n.value
            while isinstance(root, ast.Attribute):
                root = root.value
            # `utils.train.save_checkpoint(...)`: a name of that module, not of this file (`module:`, see _uses);
            # `sampler.sample(...)`: an attribute of some object (`.sample`), a method's name or another file's
            # function, never this file's own top-level `sample()`
            key = f"module:{n.attr}" if isinstance(root, ast.Name) and root.id in modules else f".{n.attr}"
            refs.setdefault(key, []).append(n.lineno)
            if isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"):  # a method called by its class
                refs.setdefault(f"self.{n.attr}", []).append(n.lineno)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                refs.setdefault(a.name.rsplit(".", 1)[-1], []).append(n.lineno)
    return refs


def _named_at_run_time(
    trees: dict[Path, ast.Module], refs: dict[Path, dict[str, list[int]]], classes: set[str]
) -> dict:
    """`refs` with the names a file picks at run time: every class of a registry it names (`TRAINERS[name](args)`),
    every function `getattr(utils, "init_dist_%s" % x)` can build (`init_dist_pytorch`, `init_dist_slurm`)."""
    for name, held in registries(list(trees.values()), classes).items():
        for found in refs.values():
            lines = found.get(name, []) + found.get(f"module:{name}", []) + found.get(f".{name}", [])
            for cls in held if lines else ():
                found.setdefault(cls, []).extend(lines)
    built = {
        path: by_name_prefix([n for n in nodes if isinstance(n, ast.Call) and dotted(n.func) == "getattr"], parent)
        for path, (nodes, parent) in ((p, static(t)) for p, t in trees.items())
    }
    if any(built.values()):  # the project's function names, only where some getattr builds one (few projects)
        functions = {n.name for t in trees.values() for n in static(t)[0] if isinstance(n, ast.FunctionDef)}
        for path, calls in built.items():
            for call, _, prefix in calls:
                for name in (f for f in functions if f.startswith(prefix)):
                    refs[path].setdefault(name, []).append(call.lineno)
    return refs


def _uncalled_spans(
    tree: ast.Module, methods_only: bool, refs: dict[Path, dict[str, list[int]]], path: Path
) -> list[tuple[int, int]]:
    """Line spans of functions nothing in the project calls: code that does not run in the training processes (in
    the script itself only methods: a function of the script is read as a reviewer reads it, called or not). A
    method counts as called where its class is named too (GPT.from_pretrained, not another library's), and not
    from its own body."""
    nodes = static(tree)[0]
    owner = {id(f): c.name for c in nodes if isinstance(c, ast.ClassDef) for f in c.body}
    spans = []
    for n in nodes:
        if (
            not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            or (methods_only and id(n) not in owner)
            or n.name.startswith("__")
            or n.name == "forward"
            or any(  # called by Python, torch, or a registry
                dotted(d) not in ("classmethod", "staticmethod", "property") for d in n.decorator_list
            )
        ):
            continue
        span = range(n.lineno, (n.end_lineno or n.lineno) + 1)
        if id(n) in owner:
            needed = (n.name, owner[id(n)])
            if any(
                all(any(line not in span or p != path for line in _uses(r, name, p, path, True)) for name in needed)
                for p, r in refs.items()
            ) or any(line not in span for line in refs[path].get(f"self.{n.name}", [])):
                continue
        elif any(any(line not in span or p != path for line in _uses(r, n.name, p, path)) for p, r in refs.items()):
            continue
        spans.append((n.lineno, n.end_lineno or n.lineno))
    return spans


def _uses(refs: dict[str, list[int]], name: str, where: Path, path: Path, attribute: bool = False) -> list[int]:
    """The lines of file `where` that use `name` of file `path`: through a module it imports (`utils.f`) only when
    `where` is another file (a call of an imported module's `f` is not one of this file's own `f`); as an attribute
    of some object (`x.f`) where `where` is another file, or the name is a method's or a class's (`attribute`)."""
    found = refs.get(name, []) + (refs.get(f".{name}", []) if attribute or where != path else [])
    return found + (refs.get(f"module:{name}", []) if where != path else [])


def _data_parallel_spans(reader: Checks) -> list[tuple[int, int]]:
    """The body of `if isinstance(model, nn.DataParallel):` in a project that builds no DataParallel: a DDP wrapper
    is not one (nor a subclass of it), so that branch does not run in its training (a save helper's other branch
    does, and is read)."""
    spans = []
    for n in reader.nodes:
        test = n.test if isinstance(n, ast.If) else None
        if (
            isinstance(test, ast.Call)
            and reader.callee_last(test) == "isinstance"
            and len(test.args) == 2
            and last(dotted(test.args[1])) == "DataParallel"
        ):
            spans.append((n.body[0].lineno, n.body[-1].end_lineno or n.body[-1].lineno))
    return spans


def statement_at(reader: Checks, line: int) -> ast.AST | None:
    """The innermost statement that starts at this line (a finding's line is its statement's first)."""
    found = [n for n in reader.nodes if isinstance(n, ast.stmt) and n.lineno == line]
    return max(found, key=lambda n: n.col_offset) if found else None


def function_at(reader: Checks, line: int) -> ast.AST | None:
    """The innermost function (or method) holding this line."""
    around = [
        n
        for n in reader.nodes
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line <= (n.end_lineno or 0)
    ]
    return max(around, key=lambda n: n.lineno, default=None)


@dataclass
class Seen:
    """What the engine knows around a finding, for a rule's refine(): the file's reader, whether it is the script,
    the other files' readers, who calls what, what the whole project does, the spans of code that never runs."""

    path: Path
    entry: bool
    checks: Checks
    readers: dict
    callers: Callers
    facts: Facts
    spans: list
    launches: Launches  # what the project's own launch commands say (launcher, machines)


def lint_project(
    project: projects.Project, script: str, show_all: bool = False, shown_from: tuple[Path, Path] | None = None
) -> LintResult:
    """Lint the entry script of `project` with what its modules say. Paths are shown as the user typed them: from
    the script's folder, or (shown_from: the folder typed and where it is) from a folder."""
    facts = gather(project.trees)
    refs = _named_at_run_time(project.trees, {p: _references(t) for p, t in project.trees.items()}, facts.classes)
    typed, base = shown_from or (Path(script).parent, project.entries[0].parent)
    findings: list[Finding] = []
    backend = backend_line = None
    readers = {path: Checks(tree, facts) for path, tree in project.trees.items()}
    callers = Callers(readers, project.entries)
    launches = launch_texts.of_script(project.entries[0])
    rules, passes = by_id(), rule_passes()
    builds_data_parallel = any(r.callee_last(c) == "DataParallel" for r in readers.values() for c in r.calls)
    for rule in rules.values():
        if rule.across is not None:  # what a rule finds across files, before each file's own passes
            rule.across(readers, callers, project.entries)
    for path, tree in project.trees.items():
        checks = readers[path]
        checks.run(passes)
        entry = path in project.entries
        if entry and backend is None and checks.backend:
            backend, backend_line = checks.backend, checks.backend_line
        # the script's own functions count as uncalled only when it has a `__main__` block: then how it runs is
        # written down, and a function nothing reaches is dead code (a loader kept for later); without one they
        # are read as a reviewer reads them, called or not
        spans = _uncalled_spans(tree, entry and not any(is_main_block(n) for n in tree.body), refs, path)
        if not entry:  # an imported module's `__main__` block (its own demo or test) does not run on import
            spans += [(n.lineno, n.end_lineno or n.lineno) for n in tree.body if is_main_block(n)]
        if not builds_data_parallel:
            spans += _data_parallel_spans(checks)
        seen = Seen(path, entry, checks, readers, callers, facts, spans, launches)
        for f in checks.findings:
            rule = rules[f.rule]
            f.severity = rule.severity
            if not entry and not rule.in_modules:
                continue
            if rule.refine is not None and not rule.refine(f, seen):
                continue
            if any(a <= f.line <= b for a, b in spans):
                continue
            if shown_from is None and path == project.entries[0]:
                f.path = None
            else:
                f.path = os.path.normpath(typed / os.path.relpath(path, base))
            called_by_script = False  # the entry script itself calls the finding's function on every rank
            if not entry and f.confidence == SURE and (func := function_at(checks, f.line)) is not None:
                if rule.callers_guard:
                    site = callers.every_rank(path, func, node=statement_at(checks, f.line))
                    if site is None:
                        f.confidence = POSSIBLE
                        f.why = "in a function of an imported module that no caller is seen running on every rank"
                    else:
                        where = callers.where(site)
                        called_by_script = rule.script_call_sure and where in project.entries
                        f.why = f"called on every rank ({os.path.relpath(where, base) if where else '?'}:{site.lineno})"
                if rule.setup and not callers.reached(path, func):
                    f.confidence, f.why = (
                        POSSIBLE,
                        f"in {func.name}(), which no call seen from the script reaches "
                        "(another launcher's setup, or one called in a way lint does not follow)",
                    )
            if not entry and rule.modules_at_run and f.confidence == SURE and not called_by_script:
                f.confidence = POSSIBLE
                f.why = AT_RUN
            if rule.opt_in and f.confidence == SURE:
                f.confidence, f.why = POSSIBLE, rule.opt_in
            if rule.doubt is not None and f.confidence == SURE and (doubt := rule.doubt(f, seen)):
                f.confidence, f.why = POSSIBLE, doubt
            if rule.whole_project and f.confidence == SURE and (unread := project.unread_holding(rule.whole_project)):
                f.confidence, f.why = POSSIBLE, f"could not read {unread.split(': ')[0]}, which may change this"
            findings.append(f)
    findings.sort(key=lambda f: (f.path is not None, f.path or "", f.line, f.rule))
    # a rule that is one mistake however many files show it (one --local_rank flag, read by each file that picks a
    # device from it): the first finding (the script's) speaks for all, a sure one before a possible one
    said: set[str] = set()
    first = sorted(findings, key=lambda f: f.confidence != SURE)  # stable: in file order within each
    kept = {id(f) for f in first if not rules[f.rule].once or (f.rule not in said and not said.add(f.rule))}
    findings = [f for f in findings if id(f) in kept]
    shown = findings if show_all else [f for f in findings if f.confidence == SURE]
    errors = sum(f.level == ERROR for f in shown)
    return LintResult(
        script=script,
        findings=shown,
        errors=errors,
        warnings=len(shown) - errors,
        backend=backend,
        backend_line=backend_line,
        ok=errors == 0,
        possible=len(findings) - len(shown),
        possible_rules=sorted({f.rule for f in findings if f not in shown}),
        files=len(project.trees),
        unread=project.unread,
    )
