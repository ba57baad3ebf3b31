"""A real Alertmanager and a local HTTP endpoint that records what it is sent and can be 'down'."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

AM_CONFIG = """\
route:
  receiver: blackhole
  group_wait: 1s
receivers:
  - name: blackhole
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    """The base URL of a real Alertmanager (Debian's prometheus-alertmanager) on a loopback port."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.fail("prometheus-alertmanager is not installed: run `make alertmanager` "
                    "(apt-get install prometheus-alertmanager); these tests never skip")
    (tmp_path / "am.yml").write_text(AM_CONFIG)
    port = _free_port()
    log = open(tmp_path / "alertmanager.log", "w")  # noqa: SIM115 - closed after the process
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'am.yml'}",
                             f"--storage.path={tmp_path / 'am'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--cluster.listen-address="],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, f"alertmanager exited: {(tmp_path / 'alertmanager.log').read_text()}"
            assert time.monotonic() < deadline, "alertmanager did not get ready in 30s"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@dataclass
class Endpoint:
    """What a local endpoint received (path, JSON body); answers 503 while `down` is set."""

    url: str
    received: list[tuple[str, object]] = field(default_factory=list)
    refused: int = 0
    down: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    state = Endpoint(url=f"http://127.0.0.1:{server.server_port}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if state.down.is_set():
                state.refused += 1
                self.send_response(503)
            else:
                state.received.append((self.path, body))
                self.send_response(202)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()
