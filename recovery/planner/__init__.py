"""The cost-aware planner (docs/planner.md): a pure core with no I/O and no clock; the entry point is
`trainmedic.recovery.planner.plan.plan(request)`. This package imports nothing itself, so that
`trainmedic --help` does not load numpy.
"""
