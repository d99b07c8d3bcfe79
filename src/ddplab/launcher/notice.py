"""A preemption notice that is not a signal (`ddplab launch --preemption-notice aws|gcp|URL`): the machine's
metadata server says the machine is about to be taken away, and nothing else does until the very end.

- AWS spot: the two-minute warning is an item of the instance metadata, `spot/instance-action` (404 until then,
  then {"action": "terminate"|"stop"|"hibernate", "time": ...}), read with an IMDSv2 session token; the SIGTERM
  comes only from the shutdown itself, when the two minutes are over.
- GCP spot/preemptible: `instance/preempted` turns TRUE when the ~30 s notice starts (ACPI soft-off, which systemd
  turns into SIGTERM, comes at the same time); polling it is the belt to that brace.
- URL: anything else that answers 200 with a body once the machine is going (a sidecar, a cluster's own agent).

The launcher polls it every few seconds from a thread and turns a notice into the same agreed stop as SIGTERM
(launcher/preempt.py). Standard library only (urllib), and never through a proxy: the metadata server is a
link-local address that an HTTP(S)_PROXY of the environment cannot reach.
"""

from __future__ import annotations

import os
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from ddplab.errors import DdplabError

# Where the clouds' own SDKs let a user (and a test) point the metadata server elsewhere: botocore reads
# AWS_EC2_METADATA_SERVICE_ENDPOINT, google-auth GCE_METADATA_HOST (host[:port], no scheme).
AWS_ENDPOINT_VAR, AWS_ENDPOINT = "AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://169.254.169.254"
GCP_HOST_VAR, GCP_HOST = "GCE_METADATA_HOST", "metadata.google.internal"
POLL_VAR = "DDPLAB_NOTICE_POLL_S"
POLL_S = 5.0  # AWS's advice for instance-action ("every 5 seconds"); a notice of 30 s or more leaves most of it
TIMEOUT_S = 2.0  # a metadata server answers in milliseconds; one that does not is not there
AWS_TOKEN_TTL_S = 21600  # IMDSv2's longest: one token for a six-hour stretch of polling, renewed on 401


@dataclass(frozen=True)
class Source:
    kind: str  # aws | gcp | url
    url: str  # what is polled
    name: str  # for the launcher's line: "AWS spot notice"

    def poller(self) -> Poller:
        return Poller(self)


def parse(value: str) -> Source:
    """aws, gcp or an http(s) URL; anything else raises ValueError saying what is accepted."""
    if value == "aws":
        base = os.environ.get(AWS_ENDPOINT_VAR, AWS_ENDPOINT).rstrip("/")
        return Source("aws", f"{base}/latest/meta-data/spot/instance-action", "AWS spot notice")
    if value == "gcp":
        host = os.environ.get(GCP_HOST_VAR, GCP_HOST)
        return Source("gcp", f"http://{host}/computeMetadata/v1/instance/preempted", "GCP preemption notice")
    if value.startswith(("http://", "https://")) and len(value.split("://", 1)[1]) > 0:
        return Source("url", value, f"notice from {value}")
    raise ValueError(
        f"{value!r} is not aws, gcp or an http(s):// URL (aws: spot/instance-action of the instance metadata; "
        "gcp: instance/preempted; a URL: any endpoint that answers 200 with a body once the machine is going)"
    )


def poll_period() -> float:
    """DDPLAB_NOTICE_POLL_S, else POLL_S; a value that is no positive number is bad input."""
    text = os.environ.get(POLL_VAR)
    if text is None:
        return POLL_S
    try:
        period = float(text)
    except ValueError:
        period = 0.0
    if not period > 0:
        raise DdplabError(f"{POLL_VAR}={text!r} is not a positive number of seconds: unset it (default {POLL_S:g})")
    return period


class Poller:
    """One source's question, asked again on each check(): the notice's text once given, else None."""

    def __init__(self, source: Source):
        self.source = source
        # No proxy, whatever the environment says (see the module's docstring).
        self._open = urllib.request.build_opener(urllib.request.ProxyHandler({})).open
        self._token: str | None = None

    def check(self) -> str | None:
        """The notice, or None when there is none yet. A server that cannot be reached raises OSError."""
        if self.source.kind == "aws":
            return self._aws()
        headers = {"Metadata-Flavor": "Google"} if self.source.kind == "gcp" else {}
        status, body = self._get(self.source.url, headers)
        if status != 200 or not body.strip():
            return None
        if self.source.kind == "gcp":
            return "instance/preempted is TRUE" if body.strip() == "TRUE" else None
        return body.strip().splitlines()[0][:200]

    def _aws(self) -> str | None:
        for _ in range(2):  # a token that expired (401) is renewed once
            if self._token is None:
                self._token = self._aws_token()
            status, body = self._get(self.source.url, {"X-aws-ec2-metadata-token": self._token})
            if status == 401:
                self._token = None
                continue
            if status == 200 and body.strip():
                return f"spot/instance-action {body.strip()[:200]}"
            return None  # 404: no action scheduled
        return None

    def _aws_token(self) -> str:
        base = self.source.url.split("/latest/", 1)[0]
        request = urllib.request.Request(
            f"{base}/latest/api/token",
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(AWS_TOKEN_TTL_S)},
        )
        with self._open(request, timeout=TIMEOUT_S) as answer:
            return answer.read().decode("ascii", "replace").strip()

    def _get(self, url: str, headers: dict[str, str]) -> tuple[int, str]:
        try:
            with self._open(urllib.request.Request(url, headers=headers), timeout=TIMEOUT_S) as answer:
                return answer.status, answer.read(4096).decode("utf-8", "replace")
        except urllib.error.HTTPError as e:  # 404 and the like: an answer, not an unreachable server
            return e.code, ""


def first_check(source: Source) -> None:
    """Before anything starts: the endpoint answers (with or without a notice). One that cannot be reached is bad
    input: the run would never hear of its preemption."""
    try:
        source.poller().check()
    except (OSError, ValueError) as e:
        if isinstance(e, urllib.error.HTTPError):  # something answered, but not as the metadata server does
            what = f"{e.url or source.url} answered HTTP {e.code} ({e.reason})"
        else:
            what = f"no answer from {source.url} ({getattr(e, 'reason', None) or e})"
        hint = {
            "aws": "is this an EC2 instance with its metadata service on? (in a container, IMDSv2 needs the "
            "instance's hop limit at 2)",
            "gcp": "is this a Compute Engine VM?",
        }.get(source.kind, "is the URL right, and its server up?")
        name = source.kind if source.kind != "url" else source.url
        raise DdplabError(f"--preemption-notice {name}: {what}: {hint}") from None


class Watch:
    """Polls a source every `period` s in a thread until stopped; calls on_notice(text) once, at the first notice.
    A check that fails (the server gone for a moment) is not a notice: said once through `warn`, then retried."""

    def __init__(
        self, source: Source, on_notice: Callable[[str], None], period: float, warn: Callable[[str], None]
    ) -> None:
        self.source, self.on_notice, self.period, self.warn = source, on_notice, period, warn
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddplab-notice", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()

    def _run(self) -> None:
        poller, warned = self.source.poller(), False
        while not self._stop.is_set():
            try:
                text = poller.check()
            except (OSError, ValueError) as e:
                text = None
                if not warned:
                    self.warn(f"the {self.source.name} endpoint did not answer ({e}); still polling it")
                    warned = True
            if text is not None:
                self.on_notice(text)
                return
            self._stop.wait(self.period)


def checked(value: str | None) -> Source | None:
    """--preemption-notice VALUE as a source whose endpoint answered now, with a valid poll period (else exit 2);
    None when it was not given."""
    if value is None:
        return None
    source = parse(value)
    first_check(source)
    poll_period()
    return source
