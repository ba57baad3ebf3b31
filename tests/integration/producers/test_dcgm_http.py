"""The dcgm-exporter scraper against a real HTTP server serving a recorded payload."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.unit.producers.test_dcgm import set_value
from trainmedic.producers.dcgm_scraper import DcgmScraper

PAYLOAD = (Path(__file__).parents[2] / "fixtures" / "producers" / "dcgm_exporter_h100.txt").read_text()
T = 1_700_000_000.0


class Exporter(ThreadingHTTPServer):
    """Serves `body` on /metrics with `status`, as dcgm-exporter does."""

    body = PAYLOAD
    status = 200


class Handler(BaseHTTPRequestHandler):
    server: Exporter

    def do_GET(self) -> None:  # noqa: N802 - the http.server interface
        body = self.server.body.encode() if self.path == "/metrics" else b"not found"
        self.send_response(self.server.status if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    server = Exporter(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def url(server: Exporter, path: str = "/metrics") -> str:
    return f"http://127.0.0.1:{server.server_address[1]}{path}"


def test_a_scrape_gives_one_sample_per_gpu_and_xid_changes_become_xids(exporter: Exporter) -> None:
    scraper = DcgmScraper(url(exporter), "gpu-node-07")
    first = scraper.sample(T)
    assert {s.node for s in first} == {"gpu-node-07"}
    assert [(s.gpu, s.util) for s in first] == [(0, 97.0), (1, 96.0), (2, 98.0), (3, 71.0)]
    assert [s.xids for s in first] == [()] * 4
    exporter.body = set_value(PAYLOAD, "DCGM_FI_DEV_XID_ERRORS", 2, "79")
    assert [s.xids for s in scraper.sample(T + 1)] == [(), (), (79,), ()]


def test_an_exporter_that_fails_gives_no_samples_and_one_warning_until_it_recovers(
    exporter: Exporter, caplog: pytest.LogCaptureFixture,
) -> None:
    scraper = DcgmScraper(url(exporter), "n")
    exporter.status = 500
    with caplog.at_level(logging.INFO, logger="trainmedic.producers.dcgm_scraper"):
        assert scraper.sample(T) == []
        assert scraper.sample(T + 1) == []
        exporter.status = 200
        assert len(scraper.sample(T + 2)) == 4
    messages = [r.message for r in caplog.records]
    assert len(messages) == 2
    assert "HTTP Error 500" in messages[0] and "answers again" in messages[1]


def test_a_wrong_path_or_a_closed_port_gives_no_samples(exporter: Exporter) -> None:
    assert DcgmScraper(url(exporter, "/nothing"), "n").sample(T) == []
    assert DcgmScraper("http://127.0.0.1:1/metrics", "n", timeout_s=1.0).sample(T) == []
