"""explain6: rules made to catch a whole family of one message, not one log's wording. Each text is the software's own
(made here by running the code, or read from the message catalogue) in the forms a log or a title leaves of it."""

from __future__ import annotations

import os
import signal

import pytest
from conftest import traceback_of

from ddplab.explain import catalogue
from ddplab.explain.matcher import explain_text


def first_rule(text: str) -> str | None:
    e = explain_text(text)
    return e.matches[0].rule if e.matches else None


# ------------------------------------------------------------------ torchrun's SignalException without its message


@pytest.mark.parametrize("sig", ["SIGHUP", "SIGINT", "SIGQUIT"])
def test_the_signal_exception_class_alone_is_a_signal(sig):
    # elastic's handler raises SignalException("Process {pid} got signal: {n}"); a title or a paste cut at the
    # colon keeps only the class's qualified name (keyu-tian/SparK#19: a closed terminal, SIGHUP)
    from torch.distributed.elastic.multiprocessing import api

    text = traceback_of(lambda: api._terminate_process_handler(getattr(signal, sig), None))
    last = text.strip().splitlines()[-1]
    assert first_rule(last.split(":")[0]) == "worker-signal", last
    assert first_rule(last.split(":")[0] + ":") == "worker-signal", last


def test_sigterm_stays_worker_terminated_though_its_traceback_shows_the_raise_line():
    # the traceback's source line `raise SignalException(f"Process ...", sigval=sigval)` is in every signal's
    # traceback; it must not make SIGTERM a worker-signal
    from torch.distributed.elastic.multiprocessing import api

    text = traceback_of(lambda: api._terminate_process_handler(signal.SIGTERM, None))
    assert "raise SignalException(" in text, text
    assert first_rule(text) == "worker-terminated", text


# ------------------------------------------------------------------ a launcher variable's KeyError, printed as str()


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


# ------------------------------------------------------------------ NCCL's result text in torch's slot

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


# ------------------------------------------------------------------ DDP's per-parameter check across processes


@pytest.mark.parametrize("what", ["sizes", "strides"])
def test_ddp_param_check_across_processes_is_a_model_mismatch(what):
    # reducer.cpp verify_params_across_processes (catalogue: torch-native), with its fields filled as torch does
    templates = [
        t["text"]
        for t in catalogue.load("torch-native")["templates"]
        if t["text"] == f"appears not to match {what} of the same param in process 0."
    ]
    assert templates
    text = f"RuntimeError: params[182] in this process with sizes [256, 256, 1, 1] {templates[0]}"
    assert first_rule(text) == "ddp-model-mismatch"


# ------------------------------------------------------------------ a message wrapped or retyped (made here)


def _made_errors() -> dict[str, str]:
    """Real tracebacks from torch on this CPU: a collective before init_process_group, env:// without a launcher,
    and a store on a port in use."""
    import socket

    import torch
    import torch.distributed as dist
    from torch.distributed import TCPStore

    made = {"pg-not-initialized": traceback_of(lambda: dist.all_reduce(torch.ones(1)))}
    env = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if k in os.environ}
    try:
        made["launcher-env-missing"] = traceback_of(lambda: dist.init_process_group("gloo", init_method="env://"))
    finally:
        os.environ.update(env)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        made["port-in-use"] = traceback_of(lambda: TCPStore("127.0.0.1", port, 1, True, wait_for_workers=False))
    return made


@pytest.fixture(scope="module")
def made_errors():
    return _made_errors()


@pytest.mark.parametrize("width", [30, 45])
def test_a_message_wrapped_by_a_paste_keeps_its_rule(made_errors, width):
    import textwrap

    for rule, text in made_errors.items():
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


def test_a_message_retyped_in_another_case_keeps_its_rule(made_errors):
    for rule, text in made_errors.items():
        last = text.strip().splitlines()[-1]
        for retyped in (last.lower(), last.upper(), last.title()):
            assert first_rule(retyped) == rule, retyped


def test_case_is_ignored_only_when_no_specific_rule_matched_in_the_software_case():
    # "Killed" alone on a line is a shell's report of SIGKILL; "killed" in a sentence is an ordinary word and, with
    # a rule that matched as printed, is not read case-blind
    text = "RuntimeError: Default process group has not been initialized\nthe job was killed"
    assert [m.rule for m in explain_text(text).matches] == ["pg-not-initialized"]


# ------------------------------------------------------------------ two NCCL versions in one job's output

ERROR_WITH_VERSION = (
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
    "internal error - please report this issue to the NCCL developers, NCCL version {}"
)


def test_ranks_that_print_different_nccl_versions_are_a_version_mismatch():
    # NVIDIA/nccl#1267: 2.20.5 on one node, 2.19.3 on the others; torch puts each rank's own version in its error
    # (NCCLUtils getNcclErrorDetailStr), NCCL its INFO line
    # (catalogue: include/cudawrap.h "NCCL version 2.32.3+cuda12.9")
    two = "\n".join(
        ["[rank0]: " + ERROR_WITH_VERSION.format("2.20.5"), "[rank8]: " + ERROR_WITH_VERSION.format("2.19.3")]
    )
    assert [m.rule for m in explain_text(two).matches][:2] == ["nccl-version-mismatch", "nccl-internal-error"]
    info = "node2:42:42 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n" + ERROR_WITH_VERSION.format("2.20.5")
    assert first_rule(info) == "nccl-version-mismatch"


def test_one_nccl_version_printed_many_times_is_not_a_mismatch():
    same = "\n".join(
        ["node1:42:42 [0] NCCL INFO NCCL version 2.19.3+cuda12.3"] * 50
        + ["[rank3]: " + ERROR_WITH_VERSION.format("2.19.3")] * 4
    )
    assert first_rule(same) == "nccl-internal-error"


def test_the_collnet_version_check_is_a_version_mismatch():
    # catalogue: nccl include/coll_net.h, fields filled in
    template = next(
        t["text"]
        for t in catalogue.load("nccl")["templates"]
        if t["text"].startswith("Mismatched NCCL version detected")
    )
    text = "node1:42:42 [0] include/coll_net.h:12 NCCL WARN " + template.replace("%d", "21903", 2).replace(
        "%d", "1"
    ).replace("%d", "22005")
    assert first_rule(text) == "nccl-version-mismatch"


# ------------------------------------------------------------------ gloo's connectFullMesh with its source path cut


def test_connectfullmesh_whose_pair_error_is_kept_but_path_cut_is_gloo_address():
    # aws-samples/aws-do-eks#50 as pasted: the bracketed pair.cc path replaced by "...", the pair's own error kept
    text = "[rank8] Gloo connectFullMesh failed ... timed out connecting: SO_ERROR: Connection refused,"
    assert first_rule(text) == "gloo-address"


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


# ------------------------------------------------------------------ a root-cause pointer and an unprefixed error


def _summary(rank: int, exitcode: int) -> str:
    """torchrun's failure summary, made by elastic's own ChildFailedError (the rank's lines carry no prefix: torch
    before 2.2, or no --tee)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failure = ProcessFailure(local_rank=rank, pid=4242, exitcode=exitcode, error_file="/nonexistent")
    failure.time = 1700000000
    return ChildFailedError("train.py", {rank: failure}).format_msg()


def test_the_error_above_the_summary_comes_before_its_exit_code_pointer(made_errors):
    summary = _summary(1, 1)
    assert "Root Cause (first observed failure)" in summary and "exitcode  : 1" in summary
    for rule, text in made_errors.items():
        log = text + "\n" + summary
        assert [m.rule for m in explain_text(log).matches][:2] == [rule, "worker-exception"], log


def test_the_pointer_still_comes_before_another_rank_s_consequence():
    log = (
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[10.0.0.2]:4242\n" + _summary(1, -11)
    )
    assert [m.rule for m in explain_text(log).matches][:2] == ["worker-segfault", "peer-closed"]
