"""Small hand-drawn clusters for the placement, restore and plan tests."""

from trainmedic.schemas.plan import PlanRequest


def request(switches, jobs, down=(), horizon_s=100.0):
    """A request with nodes named by switch: {"leaf-1": ["a1", "a2"], None: ["s1"]}."""
    nodes = [
        {"id": node, "switch": switch, "healthy": node not in down}
        for switch, names in switches.items()
        for node in names
    ]
    return PlanRequest.model_validate({"nodes": nodes, "jobs": jobs, "horizon_s": horizon_s})
