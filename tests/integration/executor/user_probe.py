"""A rank that prints, as one JSON line, who it runs as, where its files are, whether it was forked
warm (it has what the fork server imported, which this module never imports), and which of the
paths named in its arguments it can read: the control plane's files must all say PermissionError."""

import json
import os
import sys


def attempt(path: str) -> str:
    """What reading `path` (listing it, if a directory) gives this process: "read" or the error."""
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as handle:
                handle.read(1)
    except OSError as err:
        return type(err).__name__
    return "read"


print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(),
                  "home": os.environ["HOME"], "snapshots": os.environ.get("TRAINMEDIC_SNAPSHOT_DIR"),
                  "warm": "torch" in sys.modules,
                  "reads": {path: attempt(path) for path in sys.argv[1:]}}), flush=True)
