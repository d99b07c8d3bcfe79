"""The layers stay layers: imports point downward, ranks start in one place, commands stay thin.

Layers, lowest first; a module may import from its own layer or a lower one, never a higher one:
  runtime    ddplab.dist, errors, faults, compat, ports, report, envinfo, data, discover, resume, ckptfile, statedict,
             afterimport: what every process may need (users' scripts import ddplab.dist and ddplab.resume by these
             names; the ranks' start-up hooks reach torch through afterimport)
  diagnosis  four packages that know about failures and start no process, none importing another (SIBLINGS):
             explain (log reading, the rule table, exit codes), lint (the static analyser), flight (the Flight
             Recorder's reader and the dump thread each rank runs), sanitize (what each rank did in its first steps,
             observed by hooks each rank runs, and the findings read from it)
  launcher   starting, watching and ending ranks (uses explain to name a root cause, flight to say where ranks wait)
  library    checks, train, recipes, perf, observe, userscript, engines: what the commands do; inside it, perf predicts and
             measures train's runs, so perf may import train and train never imports perf (ONE_WAY)
  commands   one module per subcommand, and cliargs (the CLI's shared argument types)
  entry      the entry points: the CLI (cli, __main__) and boot/sitecustomize.py, which every rank of a user's script
             runs at start-up to install flight's dump thread, --profile's hook (perf.profhook) and the sanitizer
"""

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "ddplab"
LAYERS = {
    "runtime": [
        "ddplab",
        "ddplab.dist",
        "ddplab.errors",
        "ddplab.faults",
        "ddplab.compat",
        "ddplab.ports",
        "ddplab.report",
        "ddplab.envinfo",
        "ddplab.data",
        "ddplab.discover",
        "ddplab.resume",
        "ddplab.ckptfile",
        "ddplab.statedict",
        "ddplab.afterimport",
    ],
    "diagnosis": ["ddplab.explain", "ddplab.lint", "ddplab.flight", "ddplab.sanitize"],
    "launcher": ["ddplab.launcher"],
    "library": [
        "ddplab.checks",
        "ddplab.train",
        "ddplab.recipes",
        "ddplab.perf",
        "ddplab.observe",
        "ddplab.userscript",
        "ddplab.templates",
        "ddplab.engines",
    ],
    "commands": ["ddplab.commands", "ddplab.cliargs"],
    "entry": ["ddplab.cli", "ddplab.__main__", "ddplab.boot"],
}
ORDER = list(LAYERS)
# Packages of one layer whose dependency points one way: (package, the package it never imports).
ONE_WAY = [("ddplab.train", "ddplab.perf")]
# Packages of one layer that import nothing of each other.
SIBLINGS = ["ddplab.explain", "ddplab.lint", "ddplab.flight", "ddplab.sanitize"]
# Basenames that two modules of different jobs still share (left by issue 38, which renamed lint's rules.py,
# reading.py and result.py): the list only shrinks; a new pair fails the test, and so does a pair that is gone.
SHARED_BASENAMES = {
    "memory.py": {"train", "perf"},
    "progress.py": {"launcher", "train"},
    "worker.py": {"checks", "launcher"},
}
# Statements, not lines: the formatter lays a call out one argument a line when it does not fit, which says nothing of
# how much a command does. 190 is where the commands were at 250 lines before `ruff format`.
COMMAND_MAX_STATEMENTS = 190


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> str:
    best = max(
        (
            prefix
            for names in LAYERS.values()
            for prefix in names
            if module == prefix or module.startswith(prefix + ".")
        ),
        key=len,
    )
    return next(layer for layer, names in LAYERS.items() if best in names)


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        yield _module_name(path), ast.parse(path.read_text(), str(path)), path


def _imports(tree: ast.AST, module: str) -> set[str]:
    """Every ddplab module imported anywhere in the file, lazy imports inside functions included."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ddplab")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ddplab"):
            found.add(node.module)
            found |= {
                f"{node.module}.{a.name}"
                for a in node.names
                if (SRC.parent / node.module.replace(".", "/") / f"{a.name}.py").exists()
            }
    return found


def test_every_module_has_a_layer():
    for name, _, _ in _modules():
        assert _layer(name) in ORDER, name


def test_imports_point_downward():
    wrong = []
    for name, tree, _ in _modules():
        mine = ORDER.index(_layer(name))
        for imported in _imports(tree, name):
            if ORDER.index(_layer(imported)) > mine:
                wrong.append(f"{name} ({_layer(name)}) imports {imported} ({_layer(imported)})")
    assert not wrong, "\n".join(wrong)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_library_packages_depend_one_way():
    """train's loop measures its own memory (train/memory.py) and MFU (train/peaks.py); perf's cost, memory and scale
    models import those, and train imports nothing of perf, not even lazily inside a function."""
    wrong = [
        f"{name} imports {imported}"
        for name, tree, _ in _modules()
        for package, never in ONE_WAY
        if _within(name, package)
        for imported in _imports(tree, name)
        if _within(imported, never)
    ]
    assert not wrong, "\n".join(wrong)


def test_sibling_packages_import_nothing_of_each_other():
    """explain, lint and flight were one package (diagnose/) that mixed three kinds of code; apart they stay apart,
    and so does sanitize, the fourth."""
    wrong = [
        f"{name} imports {imported}"
        for name, tree, _ in _modules()
        for package in SIBLINGS
        if _within(name, package)
        for imported in _imports(tree, name)
        if any(_within(imported, other) for other in SIBLINGS if other != package)
    ]
    assert not wrong, "\n".join(wrong)


def test_no_two_modules_share_a_basename():
    """A module's file name says what it is, wherever it is read (a traceback, a grep, an editor tab): two rules.py
    with different jobs is what issue 38 undid. __init__.py and __main__.py are exempt, and so is a command's module:
    commands/NAME.py is named after its subcommand and may share that name with the one library module it fronts."""
    where = defaultdict(set)
    for path in SRC.rglob("*.py"):
        folder = path.relative_to(SRC).parent
        if path.name not in ("__init__.py", "__main__.py") and folder.parts[:1] != ("commands",):
            where[path.name].add(folder.as_posix())
    shared = {name: folders for name, folders in where.items() if len(folders) > 1}
    assert shared == SHARED_BASENAMES, f"shared basenames (rename the new one after what it holds): {shared}"


def test_no_command_imports_another_command_or_the_cli():
    wrong = []
    for name, tree, _ in _modules():
        if name.startswith("ddplab.commands."):
            for imported in _imports(tree, name):
                if (imported.startswith("ddplab.commands.") or imported == "ddplab.cli") and imported != name:
                    wrong.append(f"{name} imports {imported}")
    assert not wrong, "\n".join(wrong)


def test_one_elastic_launch_call_site_in_the_agent():
    calls = [
        f"{name}:{node.lineno}"
        for name, tree, _ in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "elastic_launch"
    ]
    assert calls == [calls[0]] and calls[0].startswith("ddplab.launcher.agent:"), calls


def test_one_root_cause_rule():
    defined = [
        name
        for name, tree, _ in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "root_cause"
    ]
    assert defined == ["ddplab.launcher.outcome"]


def test_commands_stay_thin():
    fat = []
    for path in sorted((SRC / "commands").glob("*.py")):
        statements = sum(isinstance(node, ast.stmt) for node in ast.walk(ast.parse(path.read_text())))
        if statements > COMMAND_MAX_STATEMENTS:
            fat.append(f"{path.name}: {statements} statements")
    assert not fat, f"command modules over {COMMAND_MAX_STATEMENTS} statements (move the logic to the library): {fat}"


def test_recipe_names_are_written_once():
    """Recipes are discovered from the package; no list anywhere spells them out again. ddplab.recipes.ORDER is a
    display order for help (simplest first), not a registry: a new module is listed without editing it."""
    from ddplab.recipes import names

    NAMES = names()

    assert set(NAMES) >= {"linear", "mlp", "gpt"}
    spelled = []
    for name, tree, _ in _modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                strings = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if strings >= set(NAMES) and not (name == "ddplab.recipes" and _assigned_to(tree, node, "ORDER")):
                    spelled.append(f"{name}:{node.lineno}")
    assert not spelled, f"recipe names spelled out again: {spelled}"


def _assigned_to(tree: ast.AST, value: ast.AST, target: str) -> bool:
    return any(
        isinstance(n, ast.Assign) and n.value is value and any(getattr(t, "id", None) == target for t in n.targets)
        for n in ast.walk(tree)
    )


def test_workers_import_no_process_machinery():
    """A rank imports the progress mark, not psutil or subprocess: every rank pays for what it imports."""
    import subprocess
    import sys

    code = (
        "import sys, ddplab.launcher.progress, ddplab.launcher.worker; "
        "print(sorted(m for m in ('psutil', 'subprocess', 'rich') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
