"""Text a rank or a telemetry source wrote, made safe to show on a terminal.

Free text in the contract (a worker error, a restore warning, a reason, a job id) is written by
the least trusted code here, and the CLIs print it. An escape sequence in it could move the
cursor, rewrite earlier lines, set the window title or the clipboard, or hide a line; a bidi
override could reorder what a reader sees. Every such character is written as a visible escape
instead (ESC as `\\x1b`), so the text still says what was sent and does nothing else.
"""

from __future__ import annotations

import re

__all__ = ["terminal_safe"]

# C0 controls (ESC, CR, BS, TAB, newline…), DEL, C1 controls (CSI, OSC as single characters),
# the Unicode line and paragraph separators, and the bidirectional marks, embeddings, overrides
# and isolates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, keep: str = "") -> str:
    """`text` with every control character written as a visible escape (`\\x1b`, `\\u202e`), except
    those in `keep` (a view that wants the text's own line breaks passes "\\n")."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _visible(m.group()), text)
