"""The scenario recipes, a module per family of faults; importing one registers its recipes in
`SCENARIOS`, by name."""

from recipes import clean, degraded, escalation, gpus, jobs, nodes, storms  # noqa: F401 (imported to register them)
from recipes.kit import SCENARIOS

__all__ = ["SCENARIOS"]
