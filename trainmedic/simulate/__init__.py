"""`trainmedic simulate`: a discrete-event simulation of a cluster over days, under a failure
trace, with one policy per run of the same trace (docs/simulation.md)."""
