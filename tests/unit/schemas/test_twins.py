"""The msgspec twins derived from the contract's models (schemas/twins.py): the same fields, defaults,
bounds and properties, and an import that fails on anything the twin could not keep exactly."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
import pytest
from pydantic import AfterValidator, ConfigDict, Field, StringConstraints, field_validator

from trainmedic.schemas import telemetry, wire
from trainmedic.schemas.base import Model
from trainmedic.schemas.bounds import Id
from trainmedic.schemas.twins import NoTwin, derive


def test_each_telemetry_struct_has_its_models_fields_defaults_and_tag() -> None:
    for model, struct in wire.STRUCTS.items():
        fields = {name: info for name, info in model.model_fields.items() if name != "type"}
        assert [(f.name, f.default) for f in msgspec.structs.fields(struct)] == [
            (name, msgspec.NODEFAULT if info.is_required() else info.default)
            for name, info in fields.items()]
        assert struct.__struct_config__.tag == model.model_fields.get("type", Field(default=None)).default
        assert struct.__name__ == model.__name__ and struct.__struct_config__.frozen
    assert set(wire.STRUCTS.values()) == {*wire.KINDS, wire.LinkState, wire.Restored}
    assert wire.STRUCTS[telemetry.GpuSample] is wire.GpuSample


def test_a_property_of_the_model_is_the_structs_too() -> None:
    exited = wire.WorkerExited(ts=1.0, node="n1", job="j", rank=0, world_size=1, reason="adopted")
    assert exited.status_unknown and not wire.WorkerExited(ts=1.0, node="n1", job="j", rank=0, world_size=1,
                                                           exit_code=0).status_unknown


class Small(Model):
    """A model of the shape telemetry has."""

    type: Literal["small"] = "small"
    name: Annotated[str, StringConstraints(pattern=r"^[a-z]+$")]
    job: Id
    note: str = ""
    short: str | None = Field(default=None, max_length=3)
    count: int = Field(default=0, ge=0, le=9)


class Plain(Model):
    type: Literal["plain"] = "plain"


def twins(model: type, bounded: dict | None = None) -> dict[type, type]:
    return derive(Annotated[model | Plain, Field(discriminator="type")], __name__, bounded)


def decoder(model: type) -> msgspec.json.Decoder:
    return msgspec.json.Decoder(twins(model)[model])


@pytest.mark.parametrize("fields", [
    {"name": "ab\n"},  # pydantic's `$` is the end of the text, not the end before a final newline
    {"job": ""}, {"job": "a\x00b"}, {"short": "four"}, {"note": "x" * ((1 << 20) + 1)}, {"count": 10},
    {"count": -1}, {"extra": 1},
])
def test_a_struct_refuses_what_its_model_refuses(fields: dict) -> None:
    raw = msgspec.json.encode({"type": "small", "name": "ab", "job": "j", **fields})
    with pytest.raises(msgspec.ValidationError):
        decoder(Small).decode(raw)
    if "extra" not in fields:  # the model keeps an unknown field; the Struct leaves it to the model
        with pytest.raises(ValueError):
            Small.model_validate_json(raw)
    good = b'{"type": "small", "name": "ab", "job": "j", "short": "abc"}'
    assert decoder(Small).decode(good).short == "abc"


class Lowered(Model):
    type: Literal["lowered"] = "lowered"
    name: Annotated[str, StringConstraints(to_lower=True)]


class Validated(Model):
    type: Literal["validated"] = "validated"
    name: Annotated[str, AfterValidator(str.strip)]


class Checked(Model):
    type: Literal["checked"] = "checked"
    name: str

    @field_validator("name")
    @classmethod
    def _no_spaces(cls, name: str) -> str:
        return name


class Aliased(Model):
    type: Literal["aliased"] = "aliased"
    name: str = Field(alias="Name")


class Method(Model):
    type: Literal["method"] = "method"
    name: str

    def shout(self) -> str:
        return self.name.upper()


class Stripped(Model):
    model_config = ConfigDict(str_strip_whitespace=True)

    type: Literal["stripped"] = "stripped"
    name: str


class Anchored(Model):
    type: Literal["anchored"] = "anchored"
    name: Annotated[str, StringConstraints(pattern=r"^a$|^b$")]


class Either(Model):
    type: Literal["either"] = "either"
    value: int | str = Field(max_length=3)


class Nested(Model):
    type: Literal["nested"] = "nested"
    inner: Lowered | None = None


@pytest.mark.parametrize("model, why", [
    (Lowered, "to_lower"), (Validated, "no msgspec equivalent"), (Checked, "field_validators"),
    (Aliased, "alias"), (Method, "shout: a method"), (Stripped, "str_strip_whitespace"),
    (Anchored, "ends other than"), (Either, "bounds on a union"), (Nested, "to_lower"),
])
def test_a_model_whose_struct_would_differ_stops_the_import(model: type, why: str) -> None:
    with pytest.raises(NoTwin, match=why):
        decoder(model)


def test_trusted_twins_drop_the_bounds_and_keep_the_fields() -> None:
    bounded = twins(Small)
    trusted = twins(Small, bounded)[Small]
    small = msgspec.json.decode(b'{"type": "small", "name": "A B", "job": "", "count": 99}', type=trusted)
    assert isinstance(small, bounded[Small]) and (small.name, small.count) == ("A B", 99)
