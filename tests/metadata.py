"""A cloud's instance metadata server on 127.0.0.1, in a thread of the test: AWS's IMDSv2 (a session token from a PUT,
required on every GET; spot/instance-action 404 until a notice), GCP's (the Metadata-Flavor: Google header
required; instance/preempted FALSE, then TRUE) and a plain URL (404, then 200 with a body). `notify()` starts the
notice; the test calls it on an event (a step line), never after a sleep."""

from __future__ import annotations

import http.server
import json
import threading

AWS_ACTION = {"action": "terminate", "time": "2026-12-05T12:02:00Z"}


class MetadataServer:
    def __init__(self) -> None:
        self.noticed = threading.Event()
        self.tokens: list[str] = []  # issued, newest last; revoke() empties it (a token that expired)
        self.requests: list[tuple[str, str]] = []  # (method, path) as they came
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):
                server.requests.append(("PUT", self.path))
                if self.path != "/latest/api/token" or not self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self._answer(400, "")
                server.tokens.append(f"token-{len(server.tokens)}")
                self._answer(200, server.tokens[-1])

            def do_GET(self):
                server.requests.append(("GET", self.path))
                if self.path == "/latest/meta-data/spot/instance-action":
                    if self.headers.get("X-aws-ec2-metadata-token") not in server.tokens:
                        return self._answer(401, "")
                    if server.noticed.is_set():
                        return self._answer(200, json.dumps(AWS_ACTION))
                    return self._answer(404, "")
                if self.path == "/computeMetadata/v1/instance/preempted":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._answer(403, "Missing Metadata-Flavor:Google header.")
                    return self._answer(200, "TRUE" if server.noticed.is_set() else "FALSE")
                if self.path == "/notice":
                    return self._answer(200, "going at 12:02") if server.noticed.is_set() else self._answer(404, "")
                self._answer(404, "")

            def _answer(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # the test's output is the run's
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        # A short poll: shutdown() waits for the loop to look (0.5 s by default, per test).
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    def __enter__(self) -> MetadataServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def notify(self) -> None:
        self.noticed.set()

    def revoke(self) -> None:
        self.tokens.clear()
