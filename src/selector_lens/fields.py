"""Config fields that carry their CLI help (`option`), and one check of their values' types
(`check_fields`): every config runs it first, so a bad value is one clear error before anything
is written, whichever way it came in (Python, the CLI, a sweep's YAML)."""

from __future__ import annotations

import math
import types
import typing
from dataclasses import field, fields

from selector_lens.errors import SelectorLensError


def label(key) -> str:
    """An option's name as a message shows it: quoted unless a plain identifier (a key read
    from YAML may hold a newline or be a number)."""
    return str(key) if str(key).isidentifier() else repr(key)


def option(default, help: str, choices: tuple = ()):
    """A config field with the help (and choices) its CLI option shows (config.OPTIONS)."""
    return field(default=default, metadata={"help": help, "choices": choices})


def _kinds(hint) -> tuple:
    """The types a hint allows: `int | None` -> (int, NoneType)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def checked(name: str, value, hint):
    """`value` as the type `hint` allows (an integral float as an int, an int as a float), or
    one clear error."""
    kinds = _kinds(hint)
    if value is None and type(None) in kinds:
        return None
    if bool in kinds and isinstance(value, bool):
        return value
    if int in kinds and not isinstance(value, bool):
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    if float in kinds and isinstance(value, (int, float)) and not isinstance(value, bool):
        if math.isfinite(value):
            return float(value)
        raise SelectorLensError(f"{name} must be a finite number, got {value}")
    if str in kinds and isinstance(value, str):
        return value
    wanted = " or ".join(
        {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
            k, "none"
        )
        for k in kinds
    )
    raise SelectorLensError(f"{name} must be {wanted}, got {value!r}")


def check_fields(obj) -> None:
    """Each option field of the dataclass `obj` of its declared type (finite, for numbers),
    converted in place where that is exact (3.0 -> 3); one clear error otherwise."""
    hints = typing.get_type_hints(type(obj))
    for f in fields(obj):
        if "help" in f.metadata:
            value = checked(f.name, getattr(obj, f.name), hints[f.name])
            object.__setattr__(obj, f.name, value)
