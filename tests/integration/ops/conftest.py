"""A local HTTP endpoint that records what it is sent and can be 'down' (Alertmanager: tests/conftest.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


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
