"""Runtime fault injection through a control file: append a fault spec line, the running producer
applies it when it next reads the file (the GPU producer every 50 ms, the host agent at each round;
`echo xid=79,node=n02,gpu=3 >> ctl`; docs/producers.md, "Runtime injection").
"""

from __future__ import annotations

from pathlib import Path


class ControlFile:
    """Hands out each complete line appended to `path` once."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self._offset = offset
        self._partial = b""

    @classmethod
    def at_end(cls, path: Path) -> ControlFile:
        """A reader of the lines appended from now on."""
        return cls(path, path.stat().st_size if path.exists() else 0)

    def new_lines(self) -> list[str]:
        """The complete, non-blank, non-comment lines appended since the last call."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self._offset:
            self._offset, self._partial = 0, b""
        if size == self._offset:
            return []
        with self.path.open("rb") as file:
            file.seek(self._offset)
            data = self._partial + file.read(size - self._offset)
        self._offset = size
        *complete, self._partial = data.split(b"\n")
        lines = (line.decode("utf-8", errors="replace").strip() for line in complete)
        return [line for line in lines if line and not line.startswith("#")]
