"""What a failed rank last wrote, for its `worker_exit`: the end of its log, from its last traceback on,
escaped and bounded; pure, the bytes passed in (docs/executor.md, "Processes")."""

from __future__ import annotations

from trainmedic.schemas.printable import terminal_safe
from trainmedic.schemas.telemetry import MAX_TAIL_CHARS, MAX_TAIL_LINES, last_lines

READ_BYTES = 16 * 1024  # of a log's end: a bounded tail, escaped (up to 4 bytes a character), fits in it


def output_tail(end: bytes, whole: bool) -> str | None:
    """The tail of a log whose last bytes are `end` (`whole`: all of it, so its first line is whole):
    from the last line that starts with "Traceback" on where there is one, each line terminal-safe,
    cut to MAX_TAIL_LINES lines and MAX_TAIL_CHARS characters. None when the rank wrote nothing."""
    lines = end.decode(errors="replace").split("\n")
    if not whole and len(lines) > 1:
        lines = lines[1:]  # the first line was cut by where the read began
    while lines and not lines[-1].strip():
        lines.pop()
    starts = [index for index, line in enumerate(lines) if line.startswith("Traceback")]
    if starts:
        lines = lines[starts[-1]:]
    if not lines:
        return None
    return last_lines("\n".join(terminal_safe(line.rstrip("\r")) for line in lines),
                      MAX_TAIL_LINES, MAX_TAIL_CHARS)
