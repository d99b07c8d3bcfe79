"""The order explain reads a log in (explain/matcher.py, explain/extent.py): the error a rank died of before the
launcher's pointer to it, the pointer before another rank's consequence, a rendezvous failure before the shutdown
logged as the agent left, and a C++ error's own "Exception raised from" line as that error, not a second one."""

from __future__ import annotations

from explaincase import made_errors, rules

from ddplab.explain.matcher import explain_text


def _summary(rank: int, exitcode: int) -> str:
    """torchrun's failure summary, made by elastic's own ChildFailedError (the rank's lines carry no prefix: torch
    before 2.2, or no --tee)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failure = ProcessFailure(local_rank=rank, pid=4242, exitcode=exitcode, error_file="/nonexistent")
    failure.time = 1700000000
    return ChildFailedError("train.py", {rank: failure}).format_msg()


def test_the_error_above_the_summary_comes_before_its_exit_code_pointer():
    summary = _summary(1, 1)
    assert "Root Cause (first observed failure)" in summary and "exitcode  : 1" in summary
    for rule, text in made_errors().items():
        log = text + "\n" + summary
        assert [m.rule for m in explain_text(log).matches][:2] == [rule, "worker-exception"], log


def test_the_pointer_still_comes_before_another_rank_s_consequence():
    log = (
        "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[10.0.0.2]:4242\n" + _summary(1, -11)
    )
    assert [m.rule for m in explain_text(log).matches][:2] == ["worker-segfault", "peer-closed"]


def test_a_shutdown_after_a_failed_rendezvous_leaves_the_rendezvous_failure_first():
    # the agent's shutdown runs as it exits and logs before the error that ended it is printed
    text = (
        "WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node 'n_1_0' has failed to shutdown the "
        "rendezvous '304' due to an error of type RendezvousConnectionError.\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n"
    )
    found = rules(text)
    assert found[0] == "rendezvous-incomplete" and "rendezvous-store-lost" not in found, found


def test_the_cpp_location_under_a_known_message_is_that_message_not_a_second_error():
    # huggingface/transformers#7160: reducer.cpp's error, then c10::Error's own "Exception raised from FN at FILE"
    # line naming torch/csrc/distributed/c10d/: one error, not a second "c10d call failed in C++"
    text = (
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following "
        "reasons: 1) Use of a module parameter outside the `forward` function. Please make sure model parameters "
        "are not shared across multiple concurrent forward-backward passes2) Reused parameters in multiple "
        "reentrant backward passes. For example, if you use multiple `checkpoint` functions to wrap the same part "
        "of your model, it would result in the same set of parameters been used by different reentrant backward "
        "passes multiple times, and hence marking a variable ready multiple times. DDP does not support such use "
        "cases yet.\n"
        "Exception raised from mark_variable_ready at /opt/conda/conda-bld/pytorch_1595629403081/work/torch/csrc/"
        "distributed/c10d/reducer.cpp:453 (most recent call first):\n"
    )
    assert rules(text) == ["ddp-ready-twice"]
