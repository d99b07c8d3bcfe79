"""What the lint tests share: the heads put before a snippet, the ways a snippet is linted, project folders.

The tests were written one evaluation round at a time (issue 28), each file with its own `names`, `rules`, `HEAD`,
`write` and `found`; grouped by rule they meet in one file, so each variant has one name here, and a test file
imports the variants its tests use under the names they were written with.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from ddplab.lint import AT_RUN
from ddplab.lint import lint_file as _lint_file
from ddplab.lint import lint_source as _lint_source
from ddplab.lint.rules import by_id


def _as_read(result, show_all: bool):
    """The tests judge each rule's reading: a finding made possible only by the rule's kind (opt-in, or judged in a
    run when it is in a module: rules/__init__.py; tests/lint/test_engine.py tests those) counts as its rule found
    it sure."""
    if not show_all:
        full = [f for f in result.full if f.confidence == "sure" or f.why in (by_id()[f.rule].opt_in, AT_RUN)]
        result.findings = full
    return result


def lint_source(source: str, script: str = "<script>", show_all: bool = False):
    result = _lint_source(source, script, show_all=True)
    result.full = result.findings
    return _as_read(result, show_all)


def lint_file(path, show_all: bool = False):
    result = _lint_file(path, show_all=True)
    result.full = result.findings
    return _as_read(result, show_all)


HERE = Path(__file__).parents[1]  # tests/
SCRIPTS = HERE / "scripts"

HEAD = "import os\nimport torch\nimport torch.distributed as dist\n"
HEAD_TIME = "import os\nimport time\nimport torch\nimport torch.distributed as dist\n"  # snippets that time steps
# A gloo group made and destroyed; PG_OPEN leaves the end to the snippet (END, or none: no-destroy).
PG = (
    "import os\nimport torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
    "dist.destroy_process_group()\n"
)
PG_OPEN = "import os\nimport torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"
NCCL = (
    "import os\nimport torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"
    "dist.destroy_process_group()\n"
)
GPU = (
    PG_OPEN.replace("'gloo'", "'nccl' if torch.cuda.is_available() else 'gloo'")
    + "from torch.nn.parallel import DistributedDataParallel as DDP\n"
)
END = "\ndist.destroy_process_group()\n"
SETUP = """
dist.init_process_group("gloo")
rank = int(os.environ["LOCAL_RANK"])
"""


def expected(path: Path) -> set[tuple[int, str]]:
    """(line, rule) for every `# expect: RULE [RULE...]` comment in the file."""
    found = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"# expect: ([a-z0-9-]+(?: [a-z0-9-]+)*)\s*$", line)
        if m:
            found |= {(number, rule) for rule in m.group(1).split()}
    return found


# ------------------------------------------------------------------------------------------- one snippet


def names(source: str, show_all: bool = False) -> list[str]:
    """The rule of each finding; the source is dedented and put after HEAD."""
    return sorted(f.rule for f in lint_source(HEAD + textwrap.dedent(source), show_all=show_all).findings)


def names_time(source: str, show_all: bool = False) -> list[str]:
    """The rule of each finding; the source is dedented and put after HEAD_TIME."""
    return sorted(f.rule for f in lint_source(HEAD_TIME + textwrap.dedent(source), show_all=show_all).findings)


def line_rules(source: str, show_all: bool = False) -> list[tuple[int, str]]:
    """(line, rule) of each finding; the source after HEAD is dedented (HEAD + an indented block)."""
    head = HEAD if source.startswith(HEAD) else ""
    source = head + textwrap.dedent(source[len(head) :])
    return sorted((f.line, f.rule) for f in lint_source(source, show_all=show_all).findings)


def line_names(source: str, show_all: bool = False) -> list[str]:
    return sorted(r for _, r in line_rules(source, show_all))


def rules_after(setup: str, source: str) -> list[str]:
    return [f.rule for f in lint_source(setup + textwrap.dedent(source)).findings]


# Each pattern twice: the true alarm, then the same code written right (the false alarm lint must not raise).
def pair(true_alarm: str, false_alarm: str, setup: str = PG_OPEN) -> tuple[list[str], list[str]]:
    return (
        rules_after(setup, textwrap.dedent(true_alarm) + END),
        rules_after(setup, textwrap.dedent(false_alarm) + END),
    )


def rules_but_nccl(source: str, setup: str = PG, show_all: bool = False) -> list[str]:
    return sorted(
        f.rule
        for f in lint_source(setup + textwrap.dedent(source), show_all=show_all).findings
        if f.rule not in ("nccl-hardcoded",)
    )


def rules_after_pg(source: str) -> list[str]:
    return sorted(f.rule for f in lint_source(PG + textwrap.dedent(source)).findings)


# ------------------------------------------------------------------------------------------- a project folder


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return folder / next(iter(files))


def found(path: Path, show_all: bool = False) -> set[tuple[str | None, int, str]]:
    return {(f.path and Path(f.path).name, f.line, f.rule) for f in lint_file(path, show_all).findings}


def write_flat(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder / next(iter(files))


def found_by_name(path: Path) -> set[tuple[str, str]]:
    return {(Path(f.path).name if f.path else path.name, f.rule) for f in lint_file(path).findings}


def write_train(folder, files):
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text))
    return folder / "train.py"
