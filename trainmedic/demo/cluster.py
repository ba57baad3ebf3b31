"""Where the demo keeps its files: one directory, which is also its services' TRAINMEDIC_HOME."""

from __future__ import annotations

from pathlib import Path

from trainmedic.local.cluster import ClusterLayout


class DemoLayout(ClusterLayout):
    """A local cluster's layout with everything under `root` (keys, executors' state, logs), so that
    the demo's run can be emptied and leaves nothing elsewhere."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, root)
