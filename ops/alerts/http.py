"""The HTTP side of a sink: POST one JSON body and say whether it got there, should be retried,
or was refused for good. Stdlib only; every request has a timeout.

Redirects are never followed: a sink's URL is configured, and a 3xx would send the incident (and
a webhook's credentials in its path) wherever the answer points. A 3xx is a rejected delivery that
names where it pointed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urljoin, urlsplit


class Outcome(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"  # the endpoint is down, slow, overloaded or rate-limiting
    REJECTED = "rejected"  # the endpoint says the request itself is wrong: retrying cannot help


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    detail: str


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Answers a 3xx with the HTTPError of the 3xx itself instead of a request to its Location."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def classify(status: int) -> Outcome:
    """2xx delivered; 408, 429 and 5xx retried; any other answer (3xx included) rejected."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in (408, 425, 429) or status >= 500:
        return Outcome.RETRY
    return Outcome.REJECTED


def redact(url: str) -> str:
    """scheme://host:port only: paths and queries of webhook URLs are often credentials."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}"


def post_json(url: str, body: Any, timeout_s: float) -> Result:
    """POST `body` as JSON to `url`. Never raises for network or HTTP errors: they are Results."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "trainmedic"})
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return Result(classify(response.status), f"HTTP {response.status}")
    except urllib.error.HTTPError as err:
        if 300 <= err.code < 400:
            to = redact(urljoin(url, err.headers.get("Location", "") if err.headers else ""))
            return Result(Outcome.REJECTED, f"HTTP {err.code}: a redirect (to {to}), not followed: "
                          "configure the sink's final URL")
        text = err.read(300).decode("utf-8", "replace").strip()
        return Result(classify(err.code), f"HTTP {err.code}{': ' + text if text else ''}")
    except (urllib.error.URLError, TimeoutError, OSError) as err:
        reason = getattr(err, "reason", err)
        return Result(Outcome.RETRY, f"{redact(url)} unreachable: {reason}")
