"""The message catalogue (src/ddplab/explain/catalogue/, written by tools/make_catalogue.py) and the family rules
built on it: the data is there, small and versioned; every family explains its own templates as a log shows them;
each source's user-facing templates are >= 95 % covered; the extraction works on real files."""

from __future__ import annotations

import collections
import functools
import sys
from pathlib import Path

import pytest

from ddplab.explain import catalogue
from ddplab.explain.matcher import explain_text
from ddplab.explain.rules import RULES, coverage, internal_reason, shown_as

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_catalogue  # noqa: E402

FAMILIES = [r for r in RULES if r.covers]


@functools.lru_cache(maxsize=1)
def covered_by() -> dict[str, list[tuple[str, dict]]]:
    """rule id -> the (source, template) pairs it covers; computed once."""
    found = collections.defaultdict(list)
    for source in catalogue.SOURCES:
        for t in (catalogue.load(source) or {}).get("templates", ()):
            how, rule = coverage(source, t)
            if rule is not None:
                found[rule].append((source, t))
    return found


def test_every_source_is_there_small_and_versioned():
    for source in catalogue.SOURCES:
        data = catalogue.load(source)
        assert data is not None, source
        assert data["source"] == source and data["version"] and len(data["templates"]) > 100, source
        assert (catalogue.HERE / f"{source}.json.gz").stat().st_size < 300_000, source
        assert all(t["text"] and t["file"] for t in data["templates"]), source


def test_each_source_is_covered_at_least_95_percent():
    for source in catalogue.SOURCES:
        counts = collections.Counter(coverage(source, t)[0] for t in catalogue.load(source)["templates"])
        user = counts["rule"] + counts["family"] + counts["uncovered"]
        assert (counts["rule"] + counts["family"]) / user >= 0.95, (source, counts)


@pytest.mark.parametrize("rule", FAMILIES, ids=lambda r: r.id)
def test_family_explains_its_own_templates(rule):
    """Up to 5 templates of the family's files, as a log shows them, are explained by that family first."""
    mine = covered_by()[rule.id]
    assert mine, f"{rule.id} covers no template"
    for source, t in mine[:: max(1, len(mine) // 5)][:5]:
        e = explain_text(shown_as(source, t))
        assert e.matches and e.matches[0].rule == rule.id, (t, [m.rule for m in e.matches])


def test_a_template_is_found_without_its_final_punctuation():
    # an issue title or a retyped line keeps a message's words but not always its last "." (torch-python's
    # tensor/_sharding_prop.py: "Operator {} does not have a sharding strategy registered.")
    e = explain_text("[DTensor] [distributed]: Operator aten.select.int does not have a sharding strategy registered")
    assert e.matches and e.matches[0].rule == "dtensor-api", [m.rule for m in e.matches]


def test_not_user_facing_has_a_reason_per_kind():
    assert internal_reason("torch-python", {"text": "x failed", "file": "f", "kind": "log.info"}) == "info"
    assert internal_reason("torch-python", {"text": "x failed", "file": "f", "kind": "raise"}) is None
    assert internal_reason("torch-native", {"text": 'x INTERNAL ASSERT FAILED at "a.cpp":3', "file": "f"}) == "internal"
    assert internal_reason("nccl", {"text": "Channel %02d : %d[%d] -> %d", "file": "f"}) == "no-error-word"
    assert internal_reason("nccl", {"text": "Call to ibv_reg_mr failed", "file": "f"}) is None
    assert internal_reason("os", {"text": "Connection refused", "file": "strerror", "errno": 111}) is None
    assert internal_reason("os", {"text": "Exec format error", "file": "strerror", "errno": 8}) == "os-unrelated"


# ----------------------------------------------------------------------------------------------- the extraction


def test_python_templates_from_real_source(tmp_path):
    pkg = tmp_path / "distributed" / "elastic"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text(
        "import logging, warnings\nlogger = logging.getLogger(__name__)\n"
        "def f(n, rank):\n"
        "    if n < 0:\n        raise ValueError(f'bad world size {n} for rank {rank}')\n"
        "    warnings.warn('this option is deprecated and ignored')\n"
        "    logger.info('starting %s workers now', n)\n"
        "    raise RuntimeError('rank %d is out of range' % rank)\n"
    )
    found = make_catalogue.python_templates(tmp_path)
    got = {(t["text"], t["kind"]) for t in found}
    assert ("bad world size {} for rank {}", "raise") in got
    assert ("this option is deprecated and ignored", "warn") in got
    assert ("starting %s workers now", "log.info") in got
    assert ("rank %d is out of range", "raise") in got
    assert all(t["file"] == "torch/distributed/elastic/mod.py" and t["line"] > 0 for t in found)


def test_native_strings_are_read_from_a_real_elf_rodata():
    import torch

    offset, data = make_catalogue._rodata(Path(torch.__file__).parent / "lib" / "libc10.so")
    assert offset > 0 and len(data) > 10_000
    strings = [s for _, s in make_catalogue._strings(data)]
    assert any("INTERNAL ASSERT FAILED" in s for s in strings)


def test_strings_are_attributed_to_the_nearest_source_path():
    data = (
        b"\0" * 8
        + b"misc/socket.cc\0"
        + b"Connect to %s failed : %s\0"
        + b"\0" * 3000
        + b"transport/net_ib.cc\0NET/IB : Got completion from peer %s with error %d\0"
    )
    strings = make_catalogue._strings(data)
    got = dict(make_catalogue._attribute(strings, make_catalogue.NCCL_PATH, window=None))
    assert got["Connect to %s failed : %s"] == "misc/socket.cc"
    assert got["NET/IB : Got completion from peer %s with error %d"] == "transport/net_ib.cc"
    near = dict(make_catalogue._attribute(strings, make_catalogue.NCCL_PATH, window=64))
    assert "NET/IB : Got completion from peer %s with error %d" in near and len(near) == 2


def test_the_report_runs(capsys):
    assert make_catalogue.main([]) == 0
    out = capsys.readouterr().out
    for source in catalogue.SOURCES:
        assert source in out
    assert "not user-facing:" in out


def test_trie_regex_matches_exactly_its_words():
    import re

    from ddplab.explain.rules import _trie

    words = {"abc", "abd", "ab", "a.b (x)", "xyz"}
    pattern = re.compile(_trie(words))
    for word in words:
        assert pattern.fullmatch(word), word
    for other in ("a", "abcd", "axb (x)", "xy", ""):
        assert not pattern.fullmatch(other), other
    assert pattern.search("... abd ...").group() == "abd"


def test_closest_names_the_template_a_line_was_printed_from_and_nothing_for_foreign_text():
    from ddplab.explain import catalogue

    template = next(
        t
        for t in catalogue.load("torch-python")["templates"]
        if t["kind"] == "raise" and len(catalogue.chunks(t["text"])) >= 2
    )
    line = f"[rank1]: {template.get('exc') or 'RuntimeError'}: {catalogue.render(template['text'])}"
    found = catalogue.closest(line)
    assert found is not None and found.startswith(template["text"]) and template["file"] in found
    assert catalogue.closest("ValueError: my own thing went wrong") is None
