"""docs/guide.md runs as printed: every command block, pasted into a shell from the repository root, exits as shown,
prints the key lines the guide shows, and leaves no ddplab folder in /tmp that the user was not told about.

The blocks run through docs/make_guide.py's own functions, so a guide the generator writes is a guide this passes."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"
sys.path.insert(0, str(DOCS))
import make_guide  # noqa: E402  (docs/ is not a package)


def blocks() -> list[make_guide.Block]:
    return [make_guide.parse(m) for m in make_guide.BLOCK.finditer(make_guide.GUIDE.read_text())]


def shown_output(command: str) -> str:
    for match in make_guide.BLOCK.finditer(make_guide.GUIDE.read_text()):
        if match.group("cmd") == command:
            return match.group(0).split("```console\n", 1)[1].split("\n", 1)[1]
    raise KeyError(command)


def run_in_order(selected, sandbox) -> list[str]:
    failures = []
    for block in selected:
        outcome = make_guide.run_block(block, sandbox)
        found = make_guide.problems(block, outcome) + make_guide.strays(block, outcome)
        if found:
            said = f"{outcome.output[-3000:]}\n{make_guide.evidence(block, outcome, sandbox)}"
            failures += [f"`{block.command}` {p}" for p in found[:-1]] + [f"`{block.command}` {found[-1]}\n{said}"]
    return failures


def test_every_block_is_complete_as_printed():
    """What a reader pastes is all there is: no variable the guide never sets, no environment in an HTML comment,
    every file it names shipped with the project or written by an earlier block; and the output the guide shows
    has the key lines the test later demands of a real run."""
    found = blocks()
    assert len(found) >= 15
    written: set[str] = set()
    for block in found:
        assert not re.search(r"\$(?!!)[A-Za-z_{]", block.command), f"a variable the guide never sets: {block.command}"
        written.update(re.findall(r"(?:ddplab new |2> |> )([\w./-]+)", block.command))
        for path in re.findall(
            r"(?<![\w/.-])((?:docs|src|tests)/[\w./-]+\.\w+|[\w-]+\.(?:py|log|pt))\b", block.command
        ):
            assert (make_guide.ROOT / path).is_file() or path in written, f"{path} in `{block.command}`"
        shown = " ".join(shown_output(block.command).split())
        assert block.shows or block.exit, f'say what the output must show (shows="..."): {block.command}'
        for text in block.shows:
            assert " ".join(text.split()) in shown, f"the guide's own output lacks {text!r}: {block.command}"
        assert make_guide.TRACEBACK not in shown, block.command


def test_a_hidden_environment_is_refused():
    match = make_guide.BLOCK.search("<!-- run env=DDPLAB_FAULT=x: ddplab check -->\n```console\n$ x\n```")
    with pytest.raises(ValueError, match="inline"):
        make_guide.parse(match)


def test_a_block_fails_when_its_run_differs_from_the_guide(tmp_path):
    """Each way a real run can differ from the guide, made to happen with bash."""
    sandbox = make_guide.Sandbox(tmp_path)

    def check(command: str, exit: int = 0, shows=()) -> list[str]:
        block = make_guide.Block(command, exit, False, list(shows))
        outcome = make_guide.run_block(block, sandbox, timeout=60)
        return make_guide.problems(block, outcome) + make_guide.strays(block, outcome)

    assert check("echo 'verdict:   READY'", shows=["verdict: READY"]) == []  # white space folded
    assert check("echo READY; exit 3", exit=0) == ["exited 3, the guide says 0"]
    assert check("echo NOT READY", shows=["verdict: READY"]) == ["does not show 'verdict: READY'"]
    assert check("echo 'Traceback (most recent call last):' >&2") == ["printed a Python traceback"]
    finding = "echo '  sanitizer (ranks 0 and 1, optimizer steps 1-50 watched): 1 DDP mistake seen'"
    assert check(finding) == ["the sanitizer saw a DDP mistake the guide does not show"]
    assert check(finding, shows=["steps 1-50 watched): 1 DDP mistake seen"]) == []  # one the guide teaches
    assert check("echo $DOCS/examples") == []  # the old guide's variable is not set for the commands
    assert check("mkdir $TMPDIR/ddplab-run-x") == ["left /tmp/ddplab-run-x behind"]
    assert check("mkdir $TMPDIR/ddplab-launch-y; exit 3", exit=3) == [
        "left /tmp/ddplab-launch-y behind without naming it in its output"
    ]
    assert check("mkdir $TMPDIR/ddplab-launch-z; echo logs: $TMPDIR/ddplab-launch-z; exit 3", exit=3) == []
    assert check("sleep 30 > /dev/null 2>&1 &") == ["left a process running after it ended"]  # and it was ended
    block = make_guide.Block("sleep 30 & wait", 0)
    outcome = make_guide.run_block(block, sandbox, timeout=1)
    assert outcome.code == -1 and make_guide.problems(block, outcome) == [
        "overstayed its deadline (exit code 0 expected)"
    ]
    assert (sandbox.root / "docs").resolve() == make_guide.ROOT / "docs"  # the stand-in links the checkout's


def test_a_failed_block_shows_what_its_background_runs_wrote(tmp_path):
    """A block's run in the background writes to a file (`> runs/check.log`), a failed run keeps its logs: when the
    block fails, both are part of the failure, since the block's own output lacks them (CI showed nothing else)."""
    sandbox = make_guide.Sandbox(tmp_path)
    command = (
        "mkdir -p runs $TMPDIR/ddplab-run-q && echo 'the agent ended: why' > runs/check.log 2>&1 & wait; "
        "echo 'rank 1 said so' > $TMPDIR/ddplab-run-q/rank1.log; exit 3"
    )
    block = make_guide.Block(command, 0)
    outcome = make_guide.run_block(block, sandbox, timeout=60)
    said = make_guide.evidence(block, outcome, sandbox)
    assert "--- runs/check.log" in said and "the agent ended: why" in said
    assert "--- ddplab-run-q/rank1.log" in said and "rank 1 said so" in said


def test_paths_in_the_output_are_the_projects_not_this_machines(tmp_path):
    """A real command's output, as the generator writes it: no absolute path of this machine is left."""
    sandbox = make_guide.Sandbox(tmp_path)
    outcome = make_guide.run_block(
        make_guide.Block(
            'python -c "import os, sys, tempfile, torch, ddplab; print(torch.__file__, ddplab.__file__, sys.executable, '
            "os.__file__, os.getcwd(), os.path.realpath('docs/guide.md'), tempfile.mkdtemp(prefix='x-'))\""
        ),
        sandbox,
    )
    assert outcome.code == 0, outcome.output
    torch_file, ddplab_file, python, stdlib, cwd, guide, tmp = outcome.output.split()
    assert torch_file == "<site-packages>/torch/__init__.py"
    assert ddplab_file == "src/ddplab/__init__.py"  # the project's own files: relative to its root
    assert python.startswith("<python>/bin/python") and stdlib.startswith("<python>/lib/")
    assert cwd == "." and guide == "docs/guide.md"  # the stand-in root reads as the project's root
    assert tmp.startswith("/tmp/x-")
    assert str(make_guide.ROOT) not in outcome.output and str(tmp_path) not in outcome.output


def test_quick_blocks_run_as_printed(tmp_path, no_leftover_workers):
    """The blocks that start no ranks, run as the slow test runs them all."""
    quick = [
        b
        for b in blocks()
        if b.command.startswith(("ddplab lint docs/", "ddplab cost ", "mkdir -p runs && cd runs && ddplab slurm "))
    ]
    assert len(quick) == 3
    assert run_in_order(quick, make_guide.Sandbox(tmp_path)) == []


# What a block writes that a later block may read: a file it creates or a folder it makes (by its last name).
WRITES = re.compile(r"(?:ddplab new |2> |(?<!2)> |mkdir -p )([\w./-]+)")
CHAPTER = re.compile(r"^## (\d+)\. ", re.MULTILINE)


def chapters() -> dict[str, tuple[list[make_guide.Block], list[make_guide.Block]]]:
    """The guide's blocks by chapter, as (the earlier blocks that write what the chapter reads, its own blocks):
    chapter 7 resumes the train.py chapter 3 writes; most chapters write into the runs/ folder chapter 3 makes. Run
    in that order in a stand-in root of its own, a chapter sees what a reader pasting from the top has."""
    text = make_guide.GUIDE.read_text()
    heads = [(m.start(), m.group(1)) for m in CHAPTER.finditer(text)]
    own: dict[str, list[make_guide.Block]] = {}
    for match in make_guide.BLOCK.finditer(text):
        chapter = [name for start, name in heads if start < match.start()][-1]
        own.setdefault(chapter, []).append(make_guide.parse(match))

    def written(block: make_guide.Block) -> set[str]:
        return {Path(w).name for w in WRITES.findall(block.command)}

    found, earlier = {}, []
    for chapter, blocks_of_chapter in own.items():
        read = {w for b in blocks_of_chapter for w in re.findall(r"[\w.-]+", b.command)}
        read -= set().union(*(written(b) for b in blocks_of_chapter))
        found[chapter] = ([b for b in earlier if written(b) & read], blocks_of_chapter)
        earlier += blocks_of_chapter
    return found


def test_each_chapter_is_led_by_the_cheap_blocks_that_write_what_it_reads():
    """The split below is faithful and costs little: every block of the guide runs in its own chapter; what a
    chapter reads from an earlier one is written by a block that starts no ranks (a script written, a folder made),
    and chapter 7's preemption demo resumes the script chapter 3 writes."""
    found = chapters()
    assert list(found) == [str(n) for n in range(1, len(found) + 1)] and len(found) >= 10
    assert [b.command for _, own in found.values() for b in own] == [b.command for b in blocks()]
    assert any("ddplab new train.py" in b.command for b in found["7"][0])
    for needed, _ in found.values():
        for block in needed:
            assert not re.search(r"torchrun|ddplab (?:launch|train|check|bench|scale|monitor)", block.command)


@pytest.mark.slow
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("chapter", list(chapters()))
def test_every_block_runs_as_printed_and_leaves_nothing_in_tmp(chapter, tmp_path, no_leftover_workers):
    """The guide as a reader pastes it, chapter by chapter (so the suite's workers share it), each block under
    make_guide's deadline. A block's run fails on a different exit code, a missing key line, a traceback, or a
    ddplab-* folder left in the temporary folder that its output does not name as a failed run's logs
    (make_guide.problems)."""
    needed, own = chapters()[chapter]
    failures = run_in_order(needed + own, make_guide.Sandbox(tmp_path))
    assert failures == [], "\n\n".join(failures)


def test_the_guide_writes_only_into_runs():
    """Issue 42 point 12: pasted from the repository root, the guide's commands filled it with train.py,
    checkpoints/, model.pt, prof/. Every file a block writes (and every script it trains, which saves next to where
    it runs) is inside runs/, which git ignores."""
    import os

    for block in blocks():
        cwd = "runs" if re.match(r"(?:mkdir -p runs && )?cd runs && ", block.command) else "."
        if re.search(r"\bddplab (?:slurm|sky|k8s) ", block.command):  # a job file: its --checkpoint-dir is the
            assert cwd == "runs", block.command  # engine's nodes' path, written there, not here
            continue
        for target in re.findall(
            r"(?:ddplab new |2> |[^2]> |--log-dir |--checkpoint-dir |--out )([\w./-]+)", block.command
        ):
            if target != "/dev/null":
                assert os.path.normpath(os.path.join(cwd, target)).startswith("runs/"), (target, block.command)
        if re.search(r"(?:torchrun|ddplab launch)\b.*(?<![\w/.-])train\.py", block.command):
            assert cwd == "runs", block.command


def test_each_failure_the_guide_shows_has_its_fix_on_the_first_screen():
    """Issue 42 point 4: a failure's first 24 lines (from the top of what the command printed) hold the fix. The
    guide's outputs are real runs' (docs/make_guide.py writes them; the slow test reruns them)."""
    failures = [b for b in blocks() if b.exit not in (0, 4)]  # 4: preempted after saving, not a failure
    assert len(failures) >= 4
    for block in failures:
        first = shown_output(block.command).splitlines()[:24]
        assert any("fix:" in line for line in first), block.command
