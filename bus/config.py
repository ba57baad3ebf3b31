"""One config style for every service: a pydantic model's fields are its CLI flags, its environment
variables and its YAML keys, and one call builds the model from them (docs/producers.md, "Configuration").
"""

from __future__ import annotations

import argparse
import os
import types
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from trainmedic.common.errors import ConfigError
from trainmedic.common.yaml_file import load_mapping

_METAVARS = {int: "N", float: "NUMBER", Path: "PATH", str: "TEXT"}
_BOOLS = dict.fromkeys(("1", "true", "yes", "on"), True) | dict.fromkeys(("0", "false", "no", "off"), False)


@dataclass(frozen=True)
class Section:
    """One config model as options of a command."""

    model: type[BaseModel]
    env: str  # the service in variable names: TRAINMEDIC_{env}_{FIELD}
    key: str | None = None  # its mapping in the YAML file; None: the file's top level
    prefix: str = ""  # spelled before the flags of fields another section shares, e.g. "gpu-"
    skip: tuple[str, ...] = ()  # fields that are no option: the command computes or loads them
    file_only: tuple[str, ...] = ()  # fields set only in the YAML file: structures no flag spells
    title: str | None = None  # its heading in --help


@dataclass(frozen=True)
class _Option:
    section: Section
    path: tuple[str, ...]  # ("delivery", "max_buffered")
    flag: str  # "--max-buffered"
    env: str  # "TRAINMEDIC_GPU_MAX_BUFFERED", also its argparse dest
    info: FieldInfo


class Options:
    """The options of one command: flags for its parser, and its config models built from them.

    Field `freshness_s` of section EXECUTOR is `--freshness-s`, TRAINMEDIC_EXECUTOR_FRESHNESS_S and
    the YAML key `freshness_s` (under `executor:` where a command has several sections). A field
    holding a model (`delivery`) is a nested mapping in YAML and its fields are flags and variables
    of their own (`--max-buffered`); a `file_only` field is a YAML key and no flag. Where two
    sections share a field name, each flag carries its section's prefix (`--gpu-control`,
    `--agent-control`); the variables keep their section."""

    def __init__(self, *sections: Section) -> None:
        self._sections = sections
        leaves = [(s, path, info) for s in sections for path, info in _fields(s.model, s.skip + s.file_only)]
        shared = Counter(path[-1] for _, path, _ in leaves)
        self._options = [
            _Option(s, path, "--" + (s.prefix if shared[path[-1]] > 1 else "") + path[-1].replace("_", "-"),
                    f"TRAINMEDIC_{s.env}_{path[-1].upper()}", info)
            for s, path, info in leaves
        ]

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--config", type=Path, metavar="FILE.yaml",
                            help="settings as YAML, keyed by field name; variables and flags win")
        groups = {s: parser.add_argument_group(s.title) if s.title else parser for s in self._sections}
        for opt in self._options:
            groups[opt.section].add_argument(opt.flag, dest=opt.env, default=argparse.SUPPRESS,
                                             help=_help(opt), **_kind(opt))

    def build(self, section: Section, args: argparse.Namespace, env: Mapping[str, str] = os.environ, *,
              secrets: Callable[[dict[str, Any]], None] | None = None,
              **computed: Callable[[dict[str, Any]], Any]) -> Any:
        """`section`'s model from the YAML file, variables and flags; `computed` fills in what none of
        them gave, in order, each from the values so far; then `secrets` puts into the values, in
        place, the credentials that only the environment may give (it may raise ConfigError).
        Precedence: flag > variable > YAML > `computed` > the field's default. The model validates;
        its first error becomes one ConfigError naming where the value came from (flag, variable,
        or file and key)."""
        file = getattr(args, "config", None)
        document = load_mapping(file) if file else {}
        if section.key and not set(document) <= {s.key for s in self._sections}:
            raise ConfigError(f"{file}: the sections are {', '.join(str(s.key) for s in self._sections)}")
        values = (document.get(section.key) or {}) if section.key else document
        if not isinstance(values, dict) or any(name in values for name in section.skip):
            raise ConfigError(f"{file}: {section.key or 'the file'} must map settings; not settings: "
                              f"{', '.join(section.skip)}")
        ours = [opt for opt in self._options if opt.section == section]
        where = {opt.path: _yaml_key(file, section, opt.path) for opt in ours if opt.path[0] in values}
        for opt in ours:
            found = _given(opt, args, env)
            if found is not None:
                target = values
                for part in opt.path[:-1]:
                    target[part] = target[part] if isinstance(target.get(part), dict) else {}
                    target = target[part]
                value, where[opt.path] = found
                key = _shorthand(opt)
                if key:
                    mapping = target.get(opt.path[-1])
                    value = {**(mapping if isinstance(mapping, dict) else {}), key: value}
                target[opt.path[-1]] = value
        for name, compute in computed.items():
            if name not in values:
                values[name] = compute(values)
        if secrets is not None:
            secrets(values)
        try:
            return section.model.model_validate(values)
        except ValidationError as err:
            first = err.errors(include_url=False)[0]
            message = first["msg"].removeprefix("Value error, ")
            loc = tuple(str(part) for part in first["loc"])
            opt = next((o for o in ours if loc[:len(o.path)] == o.path), None)
            if opt:
                place = where.get(opt.path, f"{opt.flag} (or {opt.env})")
            else:  # a cross-field rule, or a YAML key no field answers to
                place = _yaml_key(file, section, loc) if loc and file else None
            raise ConfigError(f"{place}: {message}" if place else message) from None


def _yaml_key(file: Path | None, section: Section, path: tuple[str, ...]) -> str:
    return f"{file}: {'.'.join(filter(None, (section.key, *path)))}"


def _fields(model: type[BaseModel], skip: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], FieldInfo]]:
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            yield from (((name, *path), sub) for path, sub in _fields(info.annotation, ()))
        else:
            yield (name,), info


def _plain(annotation: Any) -> Any:
    """`X` of `X | None`."""
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def _items(annotation: Any) -> Any:
    """The item type of `tuple[X, ...]` (of Annotated items, their type); None for anything else."""
    item = get_args(annotation)[0] if get_origin(annotation) is tuple else None
    return getattr(item, "__origin__", item)


def _shorthand(opt: _Option) -> str | None:
    """The key of the field's mapping that its flag and variable give, if it names one: a field
    holding an optional model with `json_schema_extra={"shorthand": "url"}` makes `--alertmanager URL`
    set `alertmanager.url`, keeping the file's other keys of that mapping."""
    extra = opt.info.json_schema_extra
    key = extra.get("shorthand") if isinstance(extra, dict) else None
    return key if isinstance(key, str) else None


def _kind(opt: _Option) -> dict[str, Any]:
    key = _shorthand(opt)
    if key:
        return {"metavar": key.upper()}
    annotation = _plain(opt.info.annotation)
    if annotation is bool:
        return {"action": argparse.BooleanOptionalAction}
    if get_origin(annotation) is Literal:
        return {"choices": get_args(annotation)}
    item = _items(annotation)
    if item is not None:
        return {"metavar": "A,B"} if item is str else {"action": "append", "metavar": "SPEC"}
    return {"metavar": "SECONDS" if opt.path[-1].endswith("_s") else _METAVARS.get(annotation, "VALUE")}


def _help(opt: _Option) -> str:
    text = (opt.info.description or "").replace("%", "%%")
    default = opt.info.default
    if opt.info.is_required() or default is None:
        return f"{text} (env {opt.env})"
    if isinstance(default, bool):
        default = "on" if default else "off"
    elif isinstance(default, tuple):
        default = ",".join(map(str, default)) or "none"
    return f"{text} (default {default}; env {opt.env})"


def _given(opt: _Option, args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Any, str] | None:
    """The value of `opt`'s flag, else of its variable, with where it came from."""
    if hasattr(args, opt.env):
        value = getattr(args, opt.env)
        return (_split(opt, value, opt.flag) if isinstance(value, str) else value), opt.flag
    return (_split(opt, env[opt.env], opt.env), opt.env) if opt.env in env else None


def _split(opt: _Option, text: str, where: str) -> Any:
    """A flag's or variable's text as the field's raw value: lists split (names at commas, specs at
    semicolons), booleans read."""
    annotation = _plain(opt.info.annotation)
    if annotation is bool:
        if text.strip().lower() not in _BOOLS:
            raise ConfigError(f"{where}: {text!r} is not a boolean (true, false, 1, 0, yes, no)")
        return _BOOLS[text.strip().lower()]
    item = _items(annotation)
    if item is None:
        return text
    parts = tuple(part.strip() for part in text.split("," if item is str else ";"))
    if not all(parts):
        raise ConfigError(f"{where}: {text!r} has an empty item")
    return parts
