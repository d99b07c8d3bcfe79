"""The files lint reads together: a script and the local modules it imports (beside it, or in packages beside it),
or every Python file of a folder. Guards, print filters, process-group setup and DDP factories often live in a
`utils.py`; a reviewer opens it, so lint does too. A module that cannot be read (syntax error, unreadable file) is
named in the result and skipped: it never stops the lint of the rest."""

from __future__ import annotations

import ast
import functools
import io
import os
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}
MAX_FILES = 2000  # a folder bigger than this is not one training project


@dataclass
class Project:
    root: Path  # the folder imports are resolved from (the script's own folder: sys.path[0] when it runs)
    trees: dict[Path, ast.Module] = field(default_factory=dict)  # every file read, entry scripts first
    entries: list[Path] = field(default_factory=list)  # the files the user asked about
    unread: list[str] = field(default_factory=list)  # "path: why" for each module that could not be read
    unread_paths: list[Path] = field(default_factory=list)  # their paths, in the same order

    def not_read(self, path: Path, why: str | None) -> None:
        self.unread.append(why or str(path))
        self.unread_paths.append(path)

    def unread_holding(self, words: tuple[str, ...]) -> str | None:
        """The first "path: why" of a module that could not be parsed whose text holds one of `words` (or whose
        bytes could not be read at all, None): what it says may change a finding that rests on the whole project."""
        for why, text in self._unread_texts:
            if text is None or any(w in text for w in words):
                return why
        return None

    @functools.cached_property
    def _unread_texts(self) -> list[tuple[str, str | None]]:
        """Each unparsed module's "path: why" and its text, read once for every finding that asks."""
        texts = []
        for path, why in zip(self.unread_paths, self.unread):
            try:
                texts.append((why, path.read_bytes().decode("utf-8", errors="replace")))
            except OSError:
                texts.append((why, None))
        return texts


def read(path: Path, cache: dict | None = None) -> tuple[ast.Module | None, str | None]:
    """The module's syntax tree, or why it cannot be had; `cache` keeps what was read for the next script."""
    if cache is not None and path in cache:
        return cache[path]
    result = _read(path)
    if cache is not None:
        cache[path] = result
    return result


def _read(path: Path) -> tuple[ast.Module | None, str | None]:
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, f"{path}: cannot read it ({e.strerror})"
    try:  # as Python reads a source file: a UTF-8 byte-order mark, or a `# -*- coding: latin-1 -*-` line
        encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError:  # a coding line naming no codec Python knows
        encoding = "utf-8"
    source = data.decode(encoding, errors="replace")
    try:
        return ast.parse(source, filename=str(path)), None
    except SyntaxError as e:
        where = f"{path}:{e.lineno}" if e.lineno else str(path)  # a NUL byte has no line
        return None, f"{where}: not valid Python ({e.msg})"
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes; nesting too deep for the parser
        return None, f"{path}: not valid Python ({type(e).__name__}: {e})"


# the standard library's top-level modules (Python 3.10+ lists them), and those removed since that scripts still import
STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | {"imp", "distutils", "asynchat", "asyncore", "smtpd"}


def _candidates(base: Path, dotted_name: str) -> list[Path]:
    parts = [p for p in dotted_name.split(".") if p]
    target = base.joinpath(*parts) if parts else base
    return [target.with_suffix(".py") if parts else base / "__init__.py", target / "__init__.py"]


def search_roots(script_dir: Path) -> list[Path]:
    """Where the script's imports are found: its folder (sys.path[0]), then, for a script in a sub-folder of a
    project (`scripts/train.py` of a package installed with `pip install -e .`), the folders up to the project's
    root (the first with setup.py, setup.cfg or pyproject.toml, at most 3 levels up)."""
    roots = [script_dir]
    for parent in list(script_dir.parents)[:3]:
        if any((parent / marker).is_file() for marker in ("setup.py", "setup.cfg", "pyproject.toml")):
            roots += [p for p in script_dir.parents if p != parent and parent in p.parents][:3] + [parent]
            break
    else:  # no project marker: packages (folders with __init__.py) up to 2 levels up still count
        roots += [p for p in list(script_dir.parents)[:2] if p.parent != p]
    # a script inside a package (`pkg/models/enc/train.py`, every folder with its __init__.py) imports the package
    # from the folder above its top (`python -m pkg.models.enc.train`, or that folder on PYTHONPATH)
    top = script_dir
    while (top / "__init__.py").is_file() and top.parent != top:
        top = top.parent
    return roots + ([top] if top not in roots else [])


def local_imports(path: Path, tree: ast.Module, roots: Path | list[Path], on_path: list[Path] = ()) -> list[Path]:
    """The project files this module imports: `import utils`, `from util import misc`, `from .trainer import x`,
    resolved against the script's folder (and, for relative imports, the module's own package), then the folders
    a module of the project put on sys.path (`on_path`)."""
    roots = ([roots] if isinstance(roots, Path) else roots) + [p for p in on_path if p not in roots]
    found: list[Path] = []

    def add(base: Path, name: str) -> bool:
        for candidate in _candidates(base, name):
            if candidate.is_file():
                found.append(candidate)
                return True
        return False

    from ddplab.lint.scriptread import static

    for node in static(tree)[0]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                # a standard library module is Python's own unless the script's folder shadows it (`import imp` is
                # not a stray imp.py two folders up)
                for root in roots[:1] if parts[0] in STDLIB else roots:
                    # a module of a folder above the script is found when the project root is on the path
                    # (`PYTHONPATH=. python tools/train.py`, `import utils`), as a package there is; a folder with
                    # no __init__.py is a namespace package (`import utils.misc as misc`: utils/misc.py)
                    if add(root, parts[0]) or (len(parts) > 1 and (root / parts[0]).is_dir()):
                        for i in range(2, len(parts) + 1):  # import a.b.c loads a, a.b and a.b.c
                            add(root, ".".join(parts[:i]))
                        break
        elif isinstance(node, ast.ImportFrom):
            base = path.parent
            for _ in range(max(node.level - 1, 0)):
                base = base.parent
            top = (node.module or "").split(".")[0]
            # a folder above the script without __init__.py is a namespace package when the project root is on
            # the path (`PYTHONPATH=./ python scripts/train.py`, `from utils.init import init`)
            bases = (
                [base]
                if node.level
                else [roots[0], *on_path, *(r for r in roots[1:] if (r / top).is_dir()), path.parent]
            )
            for b in bases:
                module = node.module or ""
                if module:
                    parts = module.split(".")
                    for i in range(1, len(parts)):
                        add(b, ".".join(parts[:i]))  # the packages on the way
                here = add(b, module) if module else False
                for alias in node.names:  # `from pkg import module`
                    if alias.name != "*":
                        here = add(b, f"{module}.{alias.name}" if module else alias.name) or here
                if here:
                    break
    return found


def of_script(script: Path, cache: dict | None = None) -> Project:
    """The script, then every local module it reaches through imports."""
    script = script.resolve()
    roots = search_roots(script.parent)
    project = Project(root=roots[-1], entries=[script])
    tree, why = read(script, cache)
    if tree is None:
        raise SyntaxError(why)
    project.trees[script] = tree
    queue, on_path = [script], []
    while queue and len(project.trees) < MAX_FILES:
        path = queue.pop(0)
        added = [r for r in added_to_sys_path(path, project.trees[path]) if r not in on_path]
        if added:  # the files read so far may import from there (`import _init_paths` first, then `from helpers ...`)
            on_path += added
            queue += [p for p in project.trees if p not in queue and p != path]
        for module in local_imports(path, project.trees[path], roots, on_path):
            module = module.resolve()
            if module in project.trees or any(u.startswith(f"{module}:") for u in project.unread):
                continue
            sub, why = read(module, cache)
            if sub is None:
                project.not_read(module, why)
                continue
            project.trees[module] = sub
            queue.append(module)
    return project


def added_to_sys_path(path: Path, tree: ast.Module) -> list[Path]:
    """The folders a module puts on sys.path, where its text says which (HRNet's `import _init_paths`:
    `sys.path.insert(0, osp.join(osp.dirname(__file__), '..', 'lib'))`): its imports are found there too."""
    names = {
        t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }

    def value(expr: ast.AST, depth: int = 0) -> str | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Name) and expr.id == "__file__":
            return str(path)
        if isinstance(expr, ast.Name):
            return value(names[expr.id], depth + 1) if expr.id in names and depth < 3 else None
        if not isinstance(expr, ast.Call) or not isinstance(expr.func, (ast.Attribute, ast.Name)):
            return None
        parts = [value(a, depth) for a in expr.args]
        if None in parts or not parts:
            return None
        how = expr.func.attr if isinstance(expr.func, ast.Attribute) else expr.func.id
        if how == "join":
            return os.path.join(*parts)
        if how == "dirname":
            return os.path.dirname(parts[0])
        return os.path.normpath(parts[0]) if how in ("abspath", "realpath", "normpath") else None

    def to_sys_path(n: ast.AST) -> ast.AST | None:  # what `sys.path.insert(0, X)` / `.append(X)` adds: X
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("insert", "append"):
            on = n.func.value
            if isinstance(on, ast.Attribute) and on.attr == "path" and getattr(on.value, "id", "") == "sys" and n.args:
                return n.args[-1]
        return None

    # HRNet's `def add_path(path): sys.path.insert(0, path)`, called `add_path(lib_path)`: the argument is added
    adders = {
        f.name: i
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        for n in ast.walk(f)
        if isinstance(added := to_sys_path(n), ast.Name)
        for i, a in enumerate(f.args.args)
        if a.arg == added.id
    }
    found = []
    for n in ast.walk(tree):
        added = to_sys_path(n)
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) in adders and len(n.args) > adders[n.func.id]:
            added = n.args[adders[n.func.id]]
        if added is not None and (where := value(added)) is not None:
            folder = Path(os.path.normpath(os.path.join(path.parent, where)))
            if folder.is_dir():
                found.append(folder)
    return found


def of_folder(folder: Path, cache: dict | None = None) -> Project:
    """Every Python file under the folder (not hidden folders or virtual environments); the entries are the ones no
    other file imports, or that run something as a script."""
    folder = folder.resolve()
    project = Project(root=folder)
    files = []
    for here, dirs, names in os.walk(folder):  # hidden folders, caches and virtual environments are not the project
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIP_DIRS and not os.path.exists(os.path.join(here, d, "pyvenv.cfg"))
        )
        files += [Path(here) / n for n in sorted(names) if n.endswith(".py")]
        if len(files) >= MAX_FILES:
            break
    files = files[:MAX_FILES]
    for path in files:
        tree, why = read(path, cache)
        if tree is None:
            project.not_read(path, why)
        else:
            project.trees[path] = tree
    imported: set[Path] = set()
    for path, tree in project.trees.items():
        for module in local_imports(path, tree, path.parent):
            imported.add(module)
    project.entries = [p for p, t in project.trees.items() if p not in imported or _runs_as_script(t)]
    return project


def _runs_as_script(tree: ast.Module) -> bool:
    return any(
        isinstance(n, ast.If)
        and isinstance(n.test, ast.Compare)
        and isinstance(n.test.left, ast.Name)
        and n.test.left.id == "__name__"
        for n in tree.body
    )
