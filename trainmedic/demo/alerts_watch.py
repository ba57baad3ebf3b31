"""Watches Alertmanager during the demo: when each incident's alert appears, and when it leaves."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request

log = logging.getLogger(__name__)


class AlertWatch:
    """Polls Alertmanager's active alerts (API v2) and keeps, per incident id, when its alert
    was first seen active and when it was first seen gone again."""

    def __init__(self, url: str, poll_s: float = 0.5) -> None:
        self.url = url.rstrip("/")
        self.poll_s = poll_s
        self.first_seen: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-alerts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/alerts?active=true", timeout=2) as answer:
                    alerts = json.load(answer)
            except (OSError, ValueError) as err:
                log.debug("Alertmanager not readable: %s", err)
                continue
            now = time.time()
            active = {a.get("labels", {}).get("incident_id") for a in alerts}
            for incident_id in active - {None}:
                self.first_seen.setdefault(incident_id, now)
            for incident_id in self.first_seen:
                if incident_id not in active:
                    self.gone.setdefault(incident_id, now)
