"""Text a rank or a telemetry source wrote, made safe to show on a terminal: every control, escape and bidi
character written as a visible escape (docs/security.md, "The broker protects itself, and what is
rendered").
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
