"""Text a rank or a telemetry source wrote, made safe to show on a terminal: every control, escape and bidi
character written as a visible escape (docs/security.md, "The broker protects itself, and what is
rendered").
"""

from __future__ import annotations

import re

__all__ = ["terminal_safe"]

# C0 controls (ESC, CR, BS, TAB, newline…), DEL, C1 controls (CSI, OSC as single characters), and
# every character Unicode calls a format character (Cf: the bidirectional marks, embeddings,
# overrides and isolates, U+061C, the zero-width space and joiners, the BOM, the tag characters…)
# or a line or paragraph separator, and the invisible Hangul fillers: what reorders, hides or
# breaks a line where people read it (tests/unit/ops/test_rendered_text.py checks the whole of Cf).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]")


def _visible(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def terminal_safe(text: str, keep: str = "") -> str:
    """`text` with every control character written as a visible escape (`\\x1b`, `\\u202e`), except
    those in `keep` (a view that wants the text's own line breaks passes "\\n")."""
    return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _visible(m.group()), text)
