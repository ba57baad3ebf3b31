"""Scrapes a dcgm-exporter `/metrics` endpoint over HTTP; the mapping lives in `trainmedic.producers.dcgm`."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request

from trainmedic.producers.dcgm import DcgmMapper, DcgmPayloadError
from trainmedic.schemas import GpuSample

log = logging.getLogger(__name__)


class DcgmScraper:
    """A GPU source over dcgm-exporter. A failed scrape yields no samples and is logged once per outage."""

    def __init__(self, url: str, node: str, *, timeout_s: float = 2.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._mapper = DcgmMapper(node)
        self._failing = False

    def sample(self, now: float) -> list[GpuSample]:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as response:
                text = response.read().decode("utf-8")
            samples = self._mapper.samples(text, now)
        except (OSError, urllib.error.URLError, UnicodeDecodeError, DcgmPayloadError) as err:
            if not self._failing:
                log.warning("dcgm-exporter at %s: %s; no GPU samples until it answers", self.url, err)
            self._failing = True
            return []
        if self._failing:
            log.info("dcgm-exporter at %s answers again", self.url)
            self._failing = False
        return samples

    def urgent(self, now: float) -> list[GpuSample]:
        """None: an Xid is a gauge that only a scrape reads."""
        return []

    def close(self) -> None:
        """Nothing to release: each scrape opens and closes its own connection."""
