"""A rank that prints its last words, replaces its log with a link (to argv[2]) or a FIFO, and exits 1:
test_failed_rank_processes.py, forked warm (`python -m`)."""

import os
import sys

log = os.path.join(os.environ["HOME"], "logs", "g0-rank0.log")
print("my last words", flush=True)
os.unlink(log)
if sys.argv[1] == "link":
    os.symlink(sys.argv[2], log)
else:
    os.mkfifo(log)
sys.exit(1)
