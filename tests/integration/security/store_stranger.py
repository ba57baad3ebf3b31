"""Another local user at a job's rendezvous port, with torch's own store client (issue 42, D1, D2).

`read PORT`: list and read the store's keys, and write one. `squat PORT SECONDS`: listen there before
the job's rank 0 does, set the mark a generation's ranks looked for, and say which keys they wrote."""

import json
import sys
import time
from datetime import timedelta

import torch.distributed as dist

mode, port = sys.argv[1], int(sys.argv[2])
if mode == "read":
    try:
        store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=3))
        found = {key: store.get(key).decode(errors="replace")[:80] for key in store.list_keys()}
        store.set("g0/forged", "x")
        print(json.dumps({"read": found, "wrote": True}))
    except Exception as err:  # noqa: BLE001 (whatever refused it, the stranger says so)
        print(json.dumps({"read": {}, "wrote": False, "error": str(err).splitlines()[0][:200]}))
else:
    store = dist.TCPStore("127.0.0.1", port, 2, True, timedelta(seconds=30), wait_for_workers=False)
    store.set("trainmedic/generation/0", "1")
    time.sleep(float(sys.argv[3]))
    print(json.dumps({"keys": sorted(store.list_keys())}))
