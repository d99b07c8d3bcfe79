"""`ddplab launch --preemption-notice aws|gcp|URL`: the pollers against a metadata server on 127.0.0.1 (tests/metadata.py,
a thread of this process) speaking AWS's IMDSv2 and GCP's protocol; bad values and an endpoint that does not answer
are one line. The whole stop (a notice mid-run, the save, the resume) is tests/test_resume.py's."""

from __future__ import annotations

import threading

import pytest
from metadata import AWS_ACTION, MetadataServer

from ddplab.errors import DdplabError
from ddplab.launcher import notice, preempt
from ddplab.ports import free_port


@pytest.fixture
def server(monkeypatch):
    with MetadataServer() as srv:
        monkeypatch.setenv(notice.AWS_ENDPOINT_VAR, srv.base)
        monkeypatch.setenv(notice.GCP_HOST_VAR, f"127.0.0.1:{srv.port}")
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # never used: the metadata server is asked directly
        yield srv


def test_aws_asks_for_a_token_then_reads_instance_action_404_until_the_notice(server):
    poller = notice.parse("aws").poller()
    assert poller.check() is None and poller.check() is None
    assert [r for r in server.requests if r[0] == "PUT"] == [("PUT", "/latest/api/token")]  # one token, reused
    server.notify()
    assert poller.check() == f'spot/instance-action {{"action": "terminate", "time": "{AWS_ACTION["time"]}"}}'


def test_aws_renews_a_token_that_expired(server):
    poller = notice.parse("aws").poller()
    assert poller.check() is None
    server.revoke()  # the next GET with the old token is 401
    server.notify()
    assert poller.check().startswith("spot/instance-action ")
    assert len(server.tokens) == 1 and sum(method == "PUT" for method, _ in server.requests) == 2


def test_gcp_sends_metadata_flavor_and_reads_true(server):
    poller = notice.parse("gcp").poller()
    assert poller.check() is None  # FALSE (without the header the server would answer 403: no notice either)
    server.notify()
    assert poller.check() == "instance/preempted is TRUE"
    assert ("GET", "/computeMetadata/v1/instance/preempted") in server.requests


def test_a_url_notices_on_200_with_a_body(server):
    poller = notice.parse(f"{server.base}/notice").poller()
    assert poller.check() is None
    server.notify()
    assert poller.check() == "going at 12:02"


def test_the_watch_calls_back_once_when_the_notice_comes(server):
    heard, got = [], threading.Event()

    def on_notice(text: str) -> None:
        heard.append(text)
        got.set()

    source = notice.parse(f"{server.base}/notice")
    with notice.Watch(source, on_notice, period=0.01, warn=heard.append):
        server.notify()
        assert got.wait(30)
    assert heard == ["going at 12:02"]


def test_a_notice_is_the_same_stop_as_sigterm_named_by_its_source():
    forwarder = preempt.Forwarder(grace=30)
    assert not forwarder.requested
    forwarder.noticed("AWS spot notice: spot/instance-action {}")
    forwarder.noticed("a second one changes nothing")
    assert forwarder.requested and forwarder.name == "AWS spot notice: spot/instance-action {}"
    line = preempt.outcome(forwarder.name, 30, {"step": 7, "path": "/c/step-7.pt"}).line()
    assert line.startswith("preempted (AWS spot notice: spot/instance-action {}), state saved at step 7")


@pytest.mark.parametrize("value", ["azure", "", "169.254.169.254", "ftp://x/y", "http://"])
def test_a_bad_value_is_one_line_from_the_launch_parser(value):
    from ddplab.commands.launch import build_parser

    with pytest.raises(DdplabError) as e:
        build_parser().parse_args(["--preemption-notice", value, "train.py"])
    message = str(e.value)
    assert "--preemption-notice" in message and "is not aws, gcp or an http(s):// URL" in message
    assert len(message.splitlines()) == 1


def test_an_endpoint_that_does_not_answer_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.setenv(notice.AWS_ENDPOINT_VAR, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(DdplabError) as e:
        notice.first_check(notice.parse("aws"))
    assert "--preemption-notice aws: no answer from http://127.0.0.1:" in str(e.value)
    assert "hop limit" in str(e.value) and len(str(e.value).splitlines()) == 1


def test_an_endpoint_that_answers_otherwise_is_refused_with_what_it_said(server, monkeypatch):
    monkeypatch.setenv(notice.AWS_ENDPOINT_VAR, f"{server.base}/elsewhere")  # the token PUT is answered 400
    with pytest.raises(DdplabError) as e:
        notice.first_check(notice.parse("aws"))
    assert f"--preemption-notice aws: {server.base}/elsewhere/latest/api/token answered HTTP 400" in str(e.value)


def test_a_bad_poll_period_is_one_line(monkeypatch):
    monkeypatch.setenv(notice.POLL_VAR, "soon")
    with pytest.raises(DdplabError, match="DDPLAB_NOTICE_POLL_S='soon' is not a positive number"):
        notice.poll_period()
