"""A message is known in whatever form a log, a paste or an issue title leaves of it: cut at a colon, printed without
its type, wrapped, retyped in another case, misspelt, its path or pid cut out. Each text is the software's own (made
here by running the code, or read from the message catalogue in explain/catalogue/)."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import traceback_of
from explaincase import first_rule, made_errors, rules

from ddplab.explain import catalogue
from ddplab.explain.matcher import explain_text


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGINT", "SIGQUIT"])
def test_the_signal_exception_class_alone_is_a_signal(sig):
    # elastic's handler raises SignalException("Process {pid} got signal: {n}"); a title or a paste cut at the
    # colon keeps only the class's qualified name (keyu-tian/SparK#19: a closed terminal, SIGHUP)
    from torch.distributed.elastic.multiprocessing import api

    text = traceback_of(lambda: api._terminate_process_handler(getattr(signal, sig), None))
    last = text.strip().splitlines()[-1]
    assert first_rule(last.split(":")[0]) == "worker-signal", last
    assert first_rule(last.split(":")[0] + ":") == "worker-signal", last


@pytest.mark.parametrize("name", ["LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR"])
def test_a_keyerror_for_a_launcher_variable_printed_without_its_type(name, monkeypatch):
    monkeypatch.delenv(name, raising=False)
    try:
        os.environ[name]
    except KeyError as e:
        shown = str(e)  # what logger.error(e) or print(e) writes: repr of the key
    assert shown == f"'{name}'"
    assert first_rule(shown) == "launcher-env-missing"
    # as Theodore-PKU/MC-DDPM#1 pasted it: the message, then the frames that read the variable
    assert (
        first_rule(
            f"{shown}\n\nDuring handling of the above exception, another exception occurred:\n\n"
            f'  File "/x/dist_util.py", line 22, in setup_dist\n'
            f'    th.cuda.set_device(int(os.environ["{name}"]))\n'
        )
        == "launcher-env-missing"
    )


def test_a_keyerror_for_a_launcher_variable_as_a_logger_prints_it(monkeypatch):
    import logging

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(handler.format(record))
    handler.setFormatter(logging.Formatter("%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
    log = logging.getLogger("explain6-test")
    log.addHandler(handler)
    try:
        os.environ["LOCAL_RANK"]
    except KeyError as e:
        log.error(e)
    log.removeHandler(handler)
    assert records and records[0].endswith("- ERROR - 'LOCAL_RANK'"), records
    assert first_rule(records[0]) == "launcher-env-missing"


def test_a_quoted_launcher_name_inside_a_line_is_not_a_keyerror():
    assert first_rule("print('RANK', rank)") is None
    assert first_rule("    rank = int(os.environ['RANK'])") is None


# ncclGetErrorString's texts (catalogue: nccl include/comm.h) and the rule that explains each
RESULTS = {
    "unhandled cuda error": ("nccl-cuda", 1),
    "unhandled system error": ("nccl-system-error", 2),
    "internal error": ("nccl-internal-error", 3),
    "invalid argument": ("nccl-call", 4),
    "invalid usage": ("nccl-invalid-usage", 5),
    "remote process exited": ("nccl-remote-error", 6),
}


def _result_texts() -> dict[str, str]:
    texts = [t["text"] for t in catalogue.load("nccl")["templates"] if t["file"] == "include/comm.h"]
    return {key: next(t for t in texts if t.startswith(key)) for key in RESULTS}


@pytest.mark.parametrize("key", sorted(RESULTS))
def test_nccl_result_text_in_torch_slot_in_every_form(key):
    rule, number = RESULTS[key]
    full = _result_texts()[key]
    where = "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "  # NCCLUtils.hpp
    forms = [
        f"RuntimeError: {where}{full}, NCCL version 2.14.3",  # as torch prints it
        f"RuntimeError: {where}{full.split(' (')[0]}",  # a title: no tail, no version
        f"{where}{full.split(' (')[0].title()}",  # retyped in title case
        f"torch.distributed.DistBackendError: NCCL Error {number}: {full}",
    ]  # torch/csrc/cuda/nccl.cpp
    for text in forms:
        assert first_rule(text) == rule, text


def test_a_misspelt_nccl_result_text_is_read_by_its_key_words():
    # pytorch/pytorch#23363 as reported: "unhanled system error" in torch's slot
    text = "NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:272, unhanled system error"
    assert first_rule(text) == "nccl-system-error"
    # the key words outside the slot decide nothing
    assert first_rule("a system error in the data loader") is None


@pytest.mark.parametrize("width", [30, 45])
def test_a_message_wrapped_by_a_paste_keeps_its_rule(width):
    import textwrap

    for rule, text in made_errors().items():
        assert first_rule(text) == rule, text
        wrapped = "\n".join(
            part for line in text.splitlines() for part in textwrap.wrap(line, width, break_long_words=False) or [""]
        )
        assert wrapped != text
        assert first_rule(wrapped) == rule, wrapped


def test_a_line_break_is_read_as_a_space_only_between_neighbouring_lines():
    # one message's words on two lines are one message; the same words in two paragraphs are not
    assert first_rule("RuntimeError: Default process group has not\nbeen initialized") == "pg-not-initialized"
    assert first_rule("Default process group has not\n\nbeen initialized") is None
    # a hit on one line is found on that line, not moved by the wrapped search
    e = explain_text("x\nRuntimeError: Default process group has not been initialized")
    assert e.matches[0].line == 2


def test_a_message_retyped_in_another_case_keeps_its_rule():
    for rule, text in made_errors().items():
        last = text.strip().splitlines()[-1]
        for retyped in (last.lower(), last.upper(), last.title()):
            assert first_rule(retyped) == rule, retyped


def test_case_is_ignored_only_when_no_specific_rule_matched_in_the_software_case():
    # "Killed" alone on a line is a shell's report of SIGKILL; "killed" in a sentence is an ordinary word and, with
    # a rule that matched as printed, is not read case-blind
    text = "RuntimeError: Default process group has not been initialized\nthe job was killed"
    assert [m.rule for m in explain_text(text).matches] == ["pg-not-initialized"]


def test_a_failed_comparison_is_an_error_word():
    # catalogue templates that say a comparison failed are user-facing, so a family or rule must cover them
    from ddplab.explain.rules import ERROR_WORD

    for text in (
        "appears not to match strides of the same param in process 0.",
        "sizes do not match",
        "the shapes doesn't match",
    ):
        assert ERROR_WORD.search(text), text


def test_a_wrapped_message_only_a_family_knows_keeps_its_family():
    # catalogue: torch-python's DTensor "Operator {} does not have a sharding strategy registered.", as
    # pytorch/pytorch#147724 printed it, wrapped by a paste
    template = next(
        t
        for t in catalogue.load("torch-python")["templates"]
        if t["text"].startswith("Operator {} does not have a sharding strategy registered")
    )
    text = "[DTensor] [distributed]: " + catalogue.render(template["text"])
    assert first_rule(text) == "dtensor-api"
    assert first_rule(text.replace(" sharding ", " sharding\n")) == "dtensor-api"


def test_connectfullmesh_whose_pair_error_is_kept_but_path_cut_is_gloo_address():
    # aws-samples/aws-do-eks#50 as pasted: the bracketed pair.cc path replaced by "...", the pair's own error kept
    text = "[rank8] Gloo connectFullMesh failed ... timed out connecting: SO_ERROR: Connection refused,"
    assert first_rule(text) == "gloo-address"


def test_a_dataloader_worker_exit_is_known_by_its_invariant_sentence():
    # pytorch/pytorch#58847 (DDP, mp.spawn): the paste drops "(pid N)"; libtorch_python.so's worker-status check
    # ends "Details are lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace"
    text = (
        "RuntimeError: DataLoader worker exited unexpectedly with exit code 1. \n"
        "Details are lost due to multiprocessing. Rerunning with num_workers=0 may give better error trace"
    )
    assert rules(text)[0] == "dataloader-worker-died"


def test_an_unsupported_keyword_setting_is_named_whole():
    # princeton-nlp/LLM-Shearing#23: FSDP's _state_dict_utils raises it for a NO_SHARD (one GPU) full state_dict
    # offloaded to CPU; the subject was cut at "=" ("True and NO_SHARD")
    match = explain_text("NotImplementedError: offload_to_cpu=True and NO_SHARD is not supported yet").matches[0]
    assert match.title.startswith("offload_to_cpu=True and NO_SHARD "), match.title
