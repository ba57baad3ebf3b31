"""What more than one bench under bench/ needs, or what makes one bench script too long to read:
each module names what it holds. The scripts import it as `harness` (their folder is first on the
path when run as `python bench/NAME.py`)."""
