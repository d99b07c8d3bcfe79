"""Who calls a function of an imported module, and on which ranks: a reviewer who finds `MNIST(download=True)` in
`utils/train.py` looks at `run.py` calling `train(args)` on every rank before judging it. A function is reached on
every rank when some call of it, in any file of the project, runs on every rank: no rank-0 test around it, not in a
branch its callers never take (`if dataset == "pretrain":` when every caller passes "caption_coco"), and in a
function that is itself reached on every rank (or in the script, or handed to mp.spawn)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from ddplab.lint.scriptread import (
    ANY_RANK0,
    SPAWN_CALLS,
    UNIQUE_NAMES,
    ScriptReader,
    dotted,
    given_for,
    is_main_block,
    last,
    leading_text,
    method_reached,
    subclass_of,
    walk_same_function,
)

CLOCK_NAMES = {"now", "utcnow", "today", "strftime", "time", "time_ns", "localtime", "gmtime", "ctime"}

MAX_DEPTH = 6


def by_name_prefix(getattrs: list[ast.Call], parent: dict) -> list[tuple[ast.Call, str, str]]:
    """The calls of a function looked up by a name built at run time, `getattr(module, "init_dist_%s" % x)(...)`
    (OpenPCDet's launcher switch), among these getattr() calls: (the call, the module's name, the text every name it
    can build starts with)."""
    found = []
    for c in getattrs:
        call = parent.get(c)
        prefix = leading_text(c.args[1]) if len(c.args) >= 2 and not isinstance(c.args[1], ast.Constant) else None
        prefix = re.split(r"[%{]", prefix)[0] if prefix else ""  # "init_dist_%s" % x, "init_dist_{}".format(x)
        if isinstance(call, ast.Call) and call.func is c and prefix and dotted(c.args[0]):
            found.append((call, dotted(c.args[0]), prefix))
    return found


def registries(trees: list[ast.Module], classes: set[str]) -> dict[str, set[str]]:
    """The project's module-level dicts of its own classes (`_trainer_dict = {"UNet2d": BaseTrainer}`; `classes`:
    Facts.classes) by name: a key picked from one at run time constructs one of them."""
    found: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Dict)
                and node.value.values
                and all(isinstance(v, ast.Name) and v.id in classes for v in node.value.values)
            ):
                for target in node.targets:
                    found.setdefault(dotted(target), set()).update(v.id for v in node.value.values)
    return found


class Callers:
    def __init__(self, readers: dict[Path, ScriptReader], entries: list[Path]):
        self.readers = readers
        self.entries = set(entries)
        self._memo: dict[tuple[Path, int], ast.Call | None] = {}
        self._star_direct: dict[str, set[str]] | None = None  # module -> modules it star-imports (_stars)
        self._star_memo: dict[str, set[str]] = {}
        self._owner = {
            id(f): c for r in readers.values() for c in r.nodes if isinstance(c, ast.ClassDef) for f in c.body
        }

    def every_rank(self, path: Path, func: ast.AST, depth: int = 0, node: ast.AST | None = None) -> ast.Call | None:
        """A call of `func` (a function or method of `path`) that runs on every rank, or None; with `node`, one
        that also opens the branches of `func` around it (`checkpoint(cfg)`, passing no model, never reaches
        `if model is not None: torch.save(...)`)."""
        key = (path, id(func), id(node) if node is not None else None)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # a recursion back here finds nothing new
        found = (
            None
            if depth > MAX_DEPTH
            else next(
                (
                    site
                    for where, site in self.sites(path, func)
                    if (node is None or self.readers[path].branch_open(node, func, site))
                    and self._site_every_rank(where, site, depth)
                ),
                None,
            )
        )
        # handed by the script to mp.spawn (`mp.spawn(main, ...)`, main imported): every worker runs it, whatever
        # its direct calls do (the one-process fallback `else: main(0, 1)`)
        found = found or self._handed_by_script(path, func)
        self._memo[key] = found
        return found

    def called_by_script(self, path: Path, func: ast.AST, depth: int = 0) -> ast.Call | None:
        """A call of `func` written in the script itself that runs on every rank: the script decides who runs it
        (a print in a logger or meter of another module is the library's own business). Or a call under no `if`
        in a function of `func`'s own module that the script calls so, up to two calls down (a dataset's __init__
        calling `self.load()`, which prints; a helper calling its module's other helper): that call then."""
        found = next(
            (
                site
                for where, site in self.sites(path, func)
                if where in self.entries and self._site_every_rank(where, site, 0)
            ),
            None,
        )
        found = found or self._handed_by_script(path, func)
        if found is not None or depth >= 2:
            return found
        for where, site in self.sites(path, func):
            outer = self.readers[where].enclosing_function(site)
            if where == path and outer not in (None, func) and where not in self.entries and self.unconditional(site):
                up = self.called_by_script(path, outer, depth + 1)
                if up is not None and self.unconditional(up):
                    return site
        return None

    def _handed_by_script(self, path: Path, func: ast.AST, depth: int = 0, every: bool = True) -> ast.Call | None:
        """The call that hands `func` over (`mp.spawn(ddp_main, ...)`): the script's own, with ddp_main imported from
        `path`, or one in `path` itself inside a function the script reaches (`train()` of an imported module that
        spawns its `worker`), when it runs beyond rank 0 alone: the workers run `func` on every rank."""
        module = path.parent.name if path.stem == "__init__" else path.stem
        for where in dict.fromkeys([*self.entries, path]):  # (an entry that is `path` itself, once)
            reader = self.readers.get(where)
            if reader is None or func.name not in reader.passed:
                continue
            if where != path and module not in reader.resolve(func.name).split("."):
                continue
            for call in reader.calls:
                handed = [
                    a.id if isinstance(a, ast.Name) else a.attr
                    for a in [*call.args, *(k.value for k in call.keywords)]
                    if isinstance(a, (ast.Name, ast.Attribute))
                ]
                if func.name not in handed or reader.runs_on_rank0_only(call, ANY_RANK0 - {"single"}):
                    continue
                outer = reader.enclosing_function(call)
                # a spawn starts the ranks wherever it runs, once (a launcher); a thread runs where its call runs
                spawned = reader.callee(call) in SPAWN_CALLS
                if (
                    where in self.entries
                    or outer is not None
                    and outer is not func
                    and self._runs(where, outer, depth, every and not spawned)
                ):
                    return call
        return None

    def _runs(self, path: Path, func: ast.AST, depth: int, every: bool) -> bool:
        """`func` runs on every rank (every), or at all."""
        if every:
            return self.every_rank(path, func, depth + 1) is not None
        return self.reached(path, func, depth + 1)

    def reached(self, path: Path, func: ast.AST, depth: int = 0) -> bool:
        """Some chain of calls from the script (or from a module's top level, or a function handed to another
        call) reaches `func`, on any rank: the code runs at all."""
        if depth > MAX_DEPTH:
            return False
        if self._handed_by_script(path, func, depth, every=False) is not None:
            return True  # a worker the script's spawn starts, or one spawned by a function the script reaches
        for where, site in self.sites(path, func):
            reader = self.readers[where]
            outer = reader.enclosing_function(site)
            if (
                where in self.entries
                or outer is None
                or self._handed_over(where, outer)
                or self.reached(where, outer, depth + 1)
            ):
                return True
        return False

    def _handed_over(self, path: Path, func: ast.AST) -> bool:
        """`func` is handed to another call (mp.spawn(ddp_main, ...)) in its own file, or in a file that imports it
        from its module (`from ddp.ddp_main import ddp_main` in the script): it runs where that call runs it."""
        module = path.parent.name if path.stem == "__init__" else path.stem
        return any(
            func.name in reader.passed and (where == path or module in reader.resolve(func.name).split("."))
            for where, reader in self.readers.items()
        )

    def passed_per_rank(self, path: Path, func: ast.AST, param: str) -> bool | None:
        """What the callers of `func` give for `param`: False when every call passes a value that is the same on
        every rank (a constant, a config lookup: `config["ann_root"]`, `args.root`), True when one passes something
        built elsewhere (a variable, a path joined from another parameter), None when no call is seen."""
        sites = self.sites(path, func)
        if not sites:
            return None
        for where, call in sites:
            value = given_for(call, func, param)
            if value is None:
                continue  # the parameter's default
            if not self._same_everywhere(self.readers[where], value, call):
                return True
        return False

    def _same_everywhere(self, reader: ScriptReader, value: ast.AST, at: ast.AST, depth: int = 0) -> bool:
        """`value` is the same on every rank, by data flow in the caller's function: each name in it is assigned
        there (before `at`) only from config fields (`args.result_path`), constants, and calls of rank-free
        arguments (`os.path.join(...)`, a project helper `setup_logging(save_path=..., run_name=...)` whose body
        draws no rank, process id, uuid or clock). A parameter of the caller, a rank, a fresh name: not known."""
        if depth > 3:
            return False
        func = reader.enclosing_function(at)
        for n in ast.walk(value):
            if isinstance(n, ast.Call) and not self._call_same_everywhere(reader, n):
                return False
            if isinstance(n, (ast.Name, ast.Attribute)) and reader.rank_kind(n):
                return False
            if not isinstance(n, ast.Name):
                continue
            parent = reader.parent.get(n)
            if isinstance(parent, ast.Call) and parent.func is n or n.id == "__file__":
                continue  # the callee: judged as a call; the script's own path, the same for every rank
            assigned = [
                a
                for a in walk_same_function(func.body if func else reader.tree.body)
                if isinstance(a, ast.Assign)
                and a.lineno < at.lineno
                and any(isinstance(t, ast.Name) and t.id == n.id for t in a.targets)
            ]
            if assigned:
                if not all(self._same_everywhere(reader, a.value, a, depth + 1) for a in assigned):
                    return False
            elif not (isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is n):
                return False  # a bare parameter of the caller, or a name lint cannot follow
        return True

    def _call_same_everywhere(self, reader: ScriptReader, call: ast.Call) -> bool:
        name = reader.callee_last(call)
        if name in UNIQUE_NAMES or name in CLOCK_NAMES or reader.rank_kind(call):
            return False
        if not hasattr(self, "_defs"):
            self._defs: dict[str, list] = {}
            for p, r in self.readers.items():
                for f in r.nodes:
                    if isinstance(f, ast.FunctionDef):
                        self._defs.setdefault(f.name, []).append((p, f))
        for p, f in self._defs.get(name, []):  # a project helper: its own body must draw nothing per process
            r = self.readers[p]
            if any(
                isinstance(c, ast.Call) and (r.callee_last(c) in UNIQUE_NAMES | CLOCK_NAMES or r.rank_kind(c))
                for c in ast.walk(f)
            ) or any(isinstance(x, (ast.Name, ast.Attribute)) and r.rank_kind(x) for x in ast.walk(f)):
                return False
        return True

    def where(self, site: ast.Call) -> Path | None:
        return next((p for p, r in self.readers.items() if site in r.parent), None)

    def unconditional(self, site: ast.Call) -> bool:
        """The call runs wherever its function does: no `if` around it there (but `if __name__ == "__main__":`).
        Under one (`if args.ssl_train: ssl_setting(...)`), whether that branch is the one launched shows in a run."""
        reader = self.readers[self.where(site)]
        return not any(isinstance(a, ast.If) and not is_main_block(a) for a in reader.ancestors(site))

    def sites(self, path: Path, func: ast.AST) -> list[tuple[Path, ast.Call]]:
        """Calls of `func` by name: in its own file any (not from its own body), in another file only those that
        import it from its module (`from utils.train import train`, `utils.train(...)`). `__init__` is called by
        its class's name."""
        owner = self._owner.get(id(func))
        name = owner.name if owner is not None and func.name == "__init__" else func.name
        module = path.parent.name if path.stem == "__init__" else path.stem
        if owner is not None and func.name == "__call__":
            return self._instance_calls(path, func, owner, module)
        found = []
        for where, reader in self.readers.items():
            # a method is called through instances of its class, or of a subclass, where the file imports one
            known = owner is not None and any(
                cls in reader.aliases or cls in self._registered(reader) for cls in self._family(owner)
            )
            # `from src.msn_train import main as msn`, then `msn(params)`: the function under the name it was given
            renamed = [a for a, full in reader.aliases.items() if a != name and full.endswith(f".{name}")]
            for call in [c for n in [name, *renamed] for c in reader.calls_by_name.get(n, [])]:
                if (
                    reader.enclosing_function(call) is func
                    or self._main_of_import(where, reader, call)
                    or owner is not None
                    and not method_reached(reader, call, owner, self._classes, self._built)
                ):
                    continue
                if (
                    where != path
                    and module not in reader.callee(call).split(".")[:-1]
                    and not (isinstance(call.func, ast.Attribute) and (known or self._in_a_base(reader, call, owner)))
                    and not (isinstance(call.func, ast.Name) and module in self._stars(str(where)))
                    # `distributed.init()` where the package distributed re-exports backend's names in its __init__
                    and not any(module in self._stars(part) for part in reader.callee(call).split(".")[:-1])
                ):
                    continue  # another file's function of the same name (a method: its class imported there)
                found.append((where, call))
            if owner is None:  # `getattr(common_utils, "init_dist_%s" % launcher)(...)`: each init_dist_* may run
                found += [
                    (where, c)
                    for c, held, prefix in self._by_name_prefix(reader)
                    if func.name.startswith(prefix) and (where == path or module in reader.resolve(held).split("."))
                ]
            if owner is not None and func.name == "__init__":  # `TRAINERS[name](args)`: a class of the registry
                found += [
                    (where, c)
                    for c in reader.calls
                    if isinstance(c.func, ast.Subscript)
                    and owner.name in self._registries.get(dotted(c.func.value), ())
                    and (where == path or dotted(c.func.value) in reader.aliases)
                ]
        return found

    def _in_a_base(self, reader: ScriptReader, call: ast.Call, owner: ast.ClassDef | None) -> bool:
        """`self.m()` in a class `owner` inherits from (in another file): dispatched to owner's m."""
        caller = next((p for p in reader.ancestors(call) if isinstance(p, ast.ClassDef)), None)
        return (
            owner is not None
            and caller is not None
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "self"
            and subclass_of(owner, caller.name, self._classes)
        )

    def _family(self, owner: ast.ClassDef) -> list[str]:
        """`owner`'s name and its subclasses' in the project (their instances run its methods they inherit)."""
        return [
            owner.name,
            *(n for n, c in self._classes.items() if c is not owner and subclass_of(c, owner.name, self._classes)),
        ]

    @functools.cached_property
    def _built(self) -> set[str]:
        """The project's classes it constructs by name, in any file."""
        return {r.callee_last(c) for r in self.readers.values() for c in r.calls} & set(self._classes)

    @functools.cached_property
    def _classes(self) -> dict[str, ast.ClassDef]:
        """The project's classes by name (a name two files define: neither)."""
        found: dict = {}
        for reader in self.readers.values():
            for name, cls in reader.classes.items():
                found[name] = None if name in found else cls
        return {name: cls for name, cls in found.items() if cls is not None}

    @staticmethod
    def _by_name_prefix(reader: ScriptReader) -> list[tuple[ast.Call, str, str]]:
        return by_name_prefix(reader.calls_by_name.get("getattr", []), reader.parent)

    @functools.cached_property
    def _registries(self) -> dict[str, set[str]]:
        readers = list(self.readers.values())
        return registries([r.tree for r in readers], readers[0].facts.classes if readers else set())

    def _registered(self, reader: ScriptReader) -> set[str]:
        """The classes of the registries this file imports: their methods are called through their instances."""
        return {c for name, held in self._registries.items() if name in reader.aliases for c in held}

    def _instance_calls(
        self, path: Path, func: ast.AST, owner: ast.ClassDef, module: str
    ) -> list[tuple[Path, ast.Call]]:
        """Calls of `owner.__call__`: an instance called (`callback = CallBackModelCheckpoint(rank)`, then
        `callback(step, model)`; `self.cb = Cls()`, then `self.cb(...)`), where the class is defined or imported."""
        found = []
        for where, reader in self.readers.items():
            if where != path and module not in reader.resolve(owner.name).split(".")[:-1]:
                continue
            made = {
                dotted(t)
                for n in reader.nodes
                if isinstance(n, ast.Assign)
                and isinstance(n.value, ast.Call)
                and reader.callee_last(n.value) == owner.name
                for t in n.targets
            } - {""}
            found += [
                (where, c)
                for c in reader.calls
                if dotted(c.func) in made
                and reader.enclosing_function(c) is not func
                and not self._main_of_import(where, reader, c)
            ]
        return found

    def _main_of_import(self, where: Path, reader: ScriptReader, call: ast.Call) -> bool:
        """`call` sits in the `if __name__ == "__main__":` block of a module the script imports: importing it does
        not run that block (`from supervised import evaluate` never runs supervised.py's `main()`)."""
        return where not in self.entries and any(is_main_block(a) for a in reader.ancestors(call))

    def _stars(self, where: str) -> set[str]:
        """The project modules whose names `where` (a file's path, or a module's name) takes with `from m import *`,
        also through a package that does the same in its __init__ (`from src import *`, src/__init__.py: `from
        .train_utils import *`), or names them there (`from .launch import launch`: `launcher.launch(...)`)."""
        if self._star_direct is None:
            direct: dict[str, set[str]] = {}  # module name -> the module names it star-imports (re-exports)
            for p, r in self.readers.items():
                name = p.parent.name if p.stem == "__init__" else p.stem
                direct.setdefault(str(p), set()).update(
                    n.module.rsplit(".", 1)[-1]
                    for n in r.nodes
                    if isinstance(n, ast.ImportFrom)
                    and n.module
                    and (any(a.name == "*" for a in n.names) or p.stem == "__init__" and n.level > 0)
                )
                direct.setdefault(name, set()).update(direct[str(p)])
            self._star_direct = direct
        if where not in self._star_memo:
            found, todo = set(), list(self._star_direct.get(where, ()))
            while todo:
                m = todo.pop()
                if m not in found:
                    found.add(m)
                    todo += self._star_direct.get(m, ())
            self._star_memo[where] = found
        return self._star_memo[where]

    def _site_every_rank(self, where: Path, site: ast.Call, depth: int) -> bool:
        reader = self.readers[where]
        if (
            reader.runs_on_rank0_only(site, ANY_RANK0)
            or self._branch_not_taken(where, reader, site)
            or self._rank0_first(reader, site)
        ):
            return False
        func = reader.enclosing_function(site)
        if func is None or self._handed_over(where, func):
            return True  # module level (the script, or an import every rank runs), or handed to mp.spawn
        if self.every_rank(where, func, depth + 1) is not None:
            return True
        # a function of the script itself that nothing calls by name (a `main` a framework calls) runs everywhere
        return where in self.entries and not self.sites(where, func)

    def _rank0_first(self, reader: ScriptReader, site: ast.Call) -> bool:
        """Inside `with torch_distributed_zero_first(rank):` (YOLOv5/v7) or `with args.main_process_first():`
        (transformers), or between `if rank not in [-1, 0]: barrier()` and `if rank == 0: barrier()`: rank 0
        runs the block first and the others after it, to find its work done (the labels' cache written, the data
        set downloaded). Not every rank at once: whether the others write again is known in a run."""
        if reader.after_rank0_barrier(site):
            return True  # `if rank not in [-1, 0]: barrier()` before it, `if rank == 0: barrier()` after it
        for parent in reader.ancestors(site):
            if isinstance(parent, (ast.With, ast.AsyncWith)) and any(
                isinstance(item.context_expr, ast.Call) and self._runs_one_first(reader.callee_last(item.context_expr))
                for item in parent.items
            ):
                return True
        return False

    def _runs_one_first(self, name: str) -> bool:
        """A context manager that lets one rank through first: named so (a library's), or a project's generator
        under @contextmanager that calls barrier() (the ranks wait for one another around its `yield`)."""
        if name.endswith(("zero_first", "main_process_first")):
            return True
        for reader in self.readers.values():
            func = reader.functions.get(name)
            if func is not None and any(last(dotted(d)) == "contextmanager" for d in func.decorator_list):
                body = list(walk_same_function(func.body))
                if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in body) and any(
                    isinstance(n, ast.Call) and reader.callee_last(n) == "barrier" for n in body
                ):
                    return True
        return False

    def _branch_not_taken(self, where: Path, reader: ScriptReader, site: ast.Call) -> bool:
        """Inside `if param == "x":` (or `if flag:`, or their else) where every caller of the function passes a
        constant that takes the other branch: that branch never runs."""
        func = reader.enclosing_function(site)
        callers = self.sites(where, func) if func is not None else []
        return bool(callers) and not any(reader.branch_open(site, func, call) for _, call in callers)
