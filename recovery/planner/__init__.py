"""The cost-aware planner (PLANNER.md): a pure core with no I/O and no clock."""

from recovery.planner.plan import plan

__all__ = ["plan"]
