"""The alert bridge follows no redirect: a sink answering 302 is a rejected delivery that says so,
and the incident never reaches where the redirect points."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trainmedic.ops.alerts.http import Outcome, post_json


@contextmanager
def answering(status: int, location: str = "") -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback answering every POST with `status`; its URL and the paths posted."""
    posted: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            posted.append(self.path)
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST  # what urllib used to send after a 302

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", posted
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_is_a_rejected_delivery_and_is_not_followed() -> None:
    with answering(200) as (elsewhere, reached), answering(302, f"{elsewhere}/steal?x=1") as (sink, asked):
        result = post_json(f"{sink}/hooks/T0/secret", {"text": "incident"}, timeout_s=5.0)
    assert result.outcome is Outcome.REJECTED
    assert result.detail == (f"HTTP 302: a redirect (to {elsewhere}), not followed: "
                             "configure the sink's final URL")
    assert asked == ["/hooks/T0/secret"] and reached == []


def test_each_redirect_status_and_a_relative_location() -> None:
    for status in (301, 303, 307, 308):
        with answering(status, "/moved") as (sink, asked):
            result = post_json(f"{sink}/a", {}, timeout_s=5.0)
        assert (result.outcome, asked) == (Outcome.REJECTED, ["/a"])
        assert result.detail.startswith(f"HTTP {status}: a redirect (to {sink}), not followed")


def test_a_2xx_is_still_delivered() -> None:
    with answering(202) as (sink, asked):
        assert post_json(f"{sink}/a", {}, timeout_s=5.0).outcome is Outcome.DELIVERED
    assert asked == ["/a"]
