"""JSON Schema export, so producers and consumers in other languages share the contract."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import TypeAdapter

from trainmedic.schemas.plan import PlanRequest, RecoveryPlan
from trainmedic.schemas.topics import SPECS


def schemas() -> dict[str, dict]:
    """File name -> JSON Schema, one per topic plus the planner's input and output."""
    out = {}
    for spec in SPECS:
        schema = TypeAdapter(spec.events).json_schema()
        schema.setdefault("title", spec.suffix)
        schema["description"] = f"Values of the topic `<prefix>{spec.suffix}` (key: {spec.key})."
        out[f"{spec.suffix}.schema.json"] = schema
    out["plan-request.schema.json"] = PlanRequest.model_json_schema()
    out["plan.schema.json"] = RecoveryPlan.model_json_schema()
    return out


def export(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in schemas().items():
        path = directory / name
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written
