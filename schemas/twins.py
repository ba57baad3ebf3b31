"""The msgspec twin of a pydantic contract model, derived from the model at import: a field is declared
once, in the model, and the fast decoder (`schemas/wire.py`) cannot drift from it.

A twin has the model's name, fields, defaults, bounds, frozenness and properties. It refuses any field
the model does not declare (the model judges those, within pydantic's limits) and is strict where
pydantic is lax, so it accepts no more than the model; its caller hands whatever it refuses to the
model. What has no exact msgspec equivalent (a validator not in `PATTERN_OF`, an alias, a model
validator, a method, a config key not in `CONFIG_KEYS`) stops the import: mirror it here first.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Mapping
from functools import reduce
from types import FunctionType, NoneType, UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import AfterValidator, AllowInfNan, BaseModel, StringConstraints
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from trainmedic.schemas.bounds import no_nul

# The validators a twin keeps, as the pattern that accepts exactly what each lets through.
PATTERN_OF = {no_nul: r"^[^\x00]*\Z"}
# The model config a twin honours; none of it can make the twin accept more than the model: a twin always
# refuses unknown fields and never decodes a number that is not finite (JSON has none; msgspec refuses
# an overflow).
CONFIG_KEYS = frozenset({"frozen", "extra", "populate_by_name", "allow_inf_nan", "str_max_length"})
BOUNDS = (annotated_types.Gt, annotated_types.Ge, annotated_types.Lt, annotated_types.Le,
          annotated_types.MinLen, annotated_types.MaxLen)  # their fields are msgspec.Meta's keywords
FIELD_OPTIONS = ("alias", "validation_alias", "serialization_alias", "exclude", "discriminator",
                 "default_factory")  # what a twin's field cannot carry


class NoTwin(TypeError):
    """A contract model has something its twin could not keep exactly."""


def derive(union: Any, module: str, bounded: Mapping[type, type] | None = None) -> dict[type, type]:
    """The twin of each model of a discriminated union (`Annotated[A | B, Field(discriminator=...)]`),
    tagged by its discriminator, and of each model their fields hold, keyed by model. Given `bounded`
    (this function's answer for the same union), each twin is instead a subclass of the bounded one with
    its fields and none of their bounds: for values a validating reader already checked."""
    members, info = get_args(union)
    run = _Derivation(module, bounded, {})
    for model in get_args(members):
        _twin(model, info.discriminator, run)
    return run.twins


@dataclasses.dataclass(frozen=True)
class _Derivation:
    """One `derive`: where its twins live, the bounded twins it subclasses (if any), the twins so far."""

    module: str
    bounded: Mapping[type, type] | None
    twins: dict[type, type]


def _twin(model: type[BaseModel], tag_field: str | None, run: _Derivation) -> type:
    if model in run.twins:
        return run.twins[model]
    _check_model(model)
    fields, tag = [], None
    str_max_length = model.model_config.get("str_max_length")
    for name, info in model.model_fields.items():
        if name == tag_field:
            tag = _tag(model, name, info)
            continue
        if bad := [option for option in FIELD_OPTIONS if getattr(info, option) is not None]:
            raise NoTwin(f"{model.__name__}.{name}: {', '.join(bad)}")
        where = f"{model.__name__}.{name}"
        kind = _type(info.annotation, _meta(info.metadata, where), str_max_length, where, run)
        fields.append((name, kind) if info.default is PydanticUndefined else (name, kind, info.default))
    bases, prefix = ((run.bounded[model],), "Trusted") if run.bounded is not None else (None, "")
    run.twins[model] = msgspec.defstruct(
        prefix + model.__name__, fields, bases=bases, module=run.module, namespace=_namespace(model),
        kw_only=True, frozen=bool(model.model_config.get("frozen")), forbid_unknown_fields=True,
        tag_field=tag_field if tag is not None else None, tag=tag)
    return run.twins[model]


def _check_model(model: type[BaseModel]) -> None:
    decorators = model.__pydantic_decorators__  # validators, serializers, computed fields
    hooks = [field.name for field in dataclasses.fields(decorators) if getattr(decorators, field.name)]
    if model.__pydantic_post_init__ or model.__private_attributes__:
        hooks.append("model_post_init or private attributes")
    if unknown := set(model.model_config) - CONFIG_KEYS:
        hooks.append(f"config {sorted(unknown)}")
    if hooks:
        raise NoTwin(f"{model.__name__}: {', '.join(hooks)}")


def _tag(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    values = get_args(info.annotation) if get_origin(info.annotation) is Literal else ()
    if len(values) != 1 or info.default not in (PydanticUndefined, values[0]):
        raise NoTwin(f"{model.__name__}.{name}: a discriminator is one literal")
    return values[0]


def _namespace(model: type[BaseModel]) -> dict[str, Any]:
    """The model's docstring and properties; a method may need pydantic's machinery, so it has no twin."""
    namespace: dict[str, Any] = {"__doc__": model.__doc__}
    for cls in reversed(model.__mro__[:model.__mro__.index(BaseModel)]):
        for name, attr in vars(cls).items():
            if isinstance(attr, property):
                namespace[name] = attr
            elif isinstance(attr, FunctionType | classmethod | staticmethod) and not name.startswith("__"):
                raise NoTwin(f"{model.__name__}.{name}: a method")
    return namespace


def _type(annotation: Any, terms: dict[str, Any], str_max_length: int | None, where: str,
          run: _Derivation) -> Any:
    """The msgspec type of a pydantic annotation, with `terms` (msgspec.Meta's keywords) on it."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _type(args[0], _merged(terms, _meta(args[1:], where), where), str_max_length, where, run)
    if origin is Union or isinstance(annotation, UnionType):
        if terms and len(args) - (NoneType in args) > 1:
            raise NoTwin(f"{where}: bounds on a union")
        return reduce(operator.or_, (arg if arg is NoneType else _type(arg, terms, str_max_length, where, run)
                                     for arg in args))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _bounded(tuple[_type(args[0], {}, str_max_length, where, run), ...], terms, run)
    if origin is Literal or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        if terms:
            raise NoTwin(f"{where}: bounds on {annotation}")
        return annotation if origin is Literal else _twin(annotation, None, run)
    if annotation in (bool, int, float):
        return _bounded(annotation, terms, run)
    if annotation is str:
        return _bounded(str, {"max_length": str_max_length, **terms} if str_max_length else terms, run)
    raise NoTwin(f"{where}: {annotation}")


def _bounded(kind: Any, terms: dict[str, Any], run: _Derivation) -> Any:
    return Annotated[kind, msgspec.Meta(**terms)] if terms and run.bounded is None else kind


def _meta(metadata: Any, where: str) -> dict[str, Any]:
    """msgspec.Meta's keywords for pydantic's metadata of a type."""
    terms: dict[str, Any] = {}
    for item in metadata:
        terms = _merged(terms, _terms(item, where), where)
    return terms


def _terms(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, FieldInfo):
        return _meta(item.metadata, where)
    if isinstance(item, BOUNDS):
        return dataclasses.asdict(item)
    if isinstance(item, AllowInfNan):
        return {}  # a twin decodes only finite numbers whatever the model allows
    if isinstance(item, AfterValidator) and item.func in PATTERN_OF:
        return {"pattern": PATTERN_OF[item.func]}
    if isinstance(item, StringConstraints):
        terms = {key: value for key, value in dataclasses.asdict(item).items() if value is not None}
        if not set(terms) <= {"min_length", "max_length", "pattern", "strict"}:
            raise NoTwin(f"{where}: {item}")
        terms.pop("strict", None)  # a twin is strict anyway
        return {**terms, "pattern": _python_pattern(terms["pattern"], where)} if "pattern" in terms else terms
    raise NoTwin(f"{where}: {item!r} has no msgspec equivalent")


def _merged(terms: dict[str, Any], more: dict[str, Any], where: str) -> dict[str, Any]:
    if both := set(terms) & set(more):
        raise NoTwin(f"{where}: {sorted(both)} twice")
    return {**terms, **more}


def _python_pattern(pattern: str, where: str) -> str:
    """pydantic's (Rust) pattern as Python's `re` reads it: Python's `$` also matches before a final
    newline, `\\Z` only at the end, which is what the Rust `$` means."""
    if "$" not in pattern:
        return pattern
    if pattern.index("$") != len(pattern) - 1 or pattern.endswith("\\$"):
        raise NoTwin(f"{where}: pattern {pattern!r} ends other than with one `$`")
    return pattern[:-1] + r"\Z"
