"""The cost-aware planner (PLANNER.md): a pure core with no I/O and no clock.

`trainmedic.recovery.planner.plan.plan(request)` is the entry point; this package imports nothing
itself, so that `trainmedic --help` does not load numpy.
"""
