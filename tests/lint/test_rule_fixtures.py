"""Every rule against its own fixtures: the scripts it must flag, and the same scripts written right, which it must
leave alone. A new rule is its module (src/ddplab/lint/rules/) plus its fixtures, whole scripts in
tests/lint/fixtures/RULE-ID/: fires_N.py and quiet_N.py (as ruff keeps its own), and is tested here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddplab.lint import lint_source
from ddplab.lint.rules import BUG, MINOR, all_rules

RULES = all_rules()
FIXTURES = Path(__file__).parent / "fixtures"


def fixtures(rule, kind: str) -> list[str]:
    """The rule's `kind` ("fires" or "quiet") scripts, by their number."""
    paths = (FIXTURES / rule.id).glob(f"{kind}_*.py")
    return [p.read_text() for p in sorted(paths, key=lambda p: int(p.stem.split("_")[1]))]


def _fired(source: str, rule: str) -> list:
    return [f for f in lint_source(source, "train.py", show_all=True).findings if f.rule == rule]


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_a_rule_flags_its_mistakes_and_leaves_the_right_scripts_alone(rule):
    for n, source in enumerate(fixtures(rule, "fires"), 1):
        # an opt-in rule's findings are all possible, saying why; its own reading is what the fixtures test
        found = [f for f in _fired(source, rule.id) if f.confidence == "sure" or rule.opt_in and f.why == rule.opt_in]
        assert found, f"{rule.id}: fires_{n}.py is not flagged"
        assert all(f.severity == rule.severity for f in found)
    for n, source in enumerate(fixtures(rule, "quiet"), 1):
        assert not _fired(source, rule.id), f"{rule.id}: quiet_{n}.py is flagged"


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_a_rule_is_documented(rule):
    assert rule.severity in (BUG, MINOR)
    assert all((rule.what, rule.why, rule.example, rule.fix)), rule.id
    assert fixtures(rule, "fires") and fixtures(rule, "quiet"), (
        f"{rule.id}: a rule comes with a script it flags and one it leaves alone"
    )


def test_every_rule_a_check_finds_is_a_module():
    """A finding's rule id names a rule module: nothing reports under an id the rules table does not have."""
    ids = {r.id for r in RULES}
    for rule in RULES:
        for source in fixtures(rule, "fires"):
            assert {f.rule for f in lint_source(source, "train.py", show_all=True).findings} <= ids


def test_the_docs_rules_table_is_the_rules_own():
    """docs/lint.md's table is generated from the rule modules (python tools/lint_rules_table.py)."""
    from pathlib import Path

    from ddplab.lint.rules import markdown_table

    assert markdown_table() in (Path(__file__).parents[2] / "docs" / "lint.md").read_text()


def test_every_fixture_folder_is_a_rules():
    """A folder named for no rule (a rule renamed, its fixtures left behind) would test nothing."""
    assert {p.name for p in FIXTURES.iterdir() if p.is_dir()} == {r.id for r in RULES}
