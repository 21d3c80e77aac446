"""JSON payload and result checks.

A handler must receive exactly what was enqueued. JSON silently turns tuples into lists, int dict
keys into strings and datetimes into errors, and PostgreSQL's jsonb refuses NaN and NUL characters,
so every value is checked to round-trip unchanged *before* anything is written, and the error names
the job and the argument (with a path into it) that broke the rule.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from .exceptions import InvalidJob, PayloadNotSerializable

#: ``json.dumps`` raises past ``sys.get_int_max_str_digits()`` (4,300 by default); stay under it.
_MAX_INT_BITS = 14_000


def _problem(value: Any, path: str) -> tuple[str, str] | None:
    """The first (path, reason) in ``value`` that would not survive jsonb unchanged, or None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            return (path, "integer too large for JSON (Python refuses to print more than 4,300 digits)")
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, f"{value!r} is not valid JSON")
    if isinstance(value, str):
        if "\x00" in value:
            return (path, "strings may not contain NUL (\\x00) characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate such as "\ud800": jsonb refuses it
            return (path, "strings must be valid Unicode (this one contains a lone surrogate)")
        return None
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = _problem(item, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return (path, f"dict key {key!r} is {type(key).__name__}, JSON keys are strings")
            found = _problem(key, f"{path} key") or _problem(item, f"{path}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, tuple):
        return (path, "tuple would arrive as a list; pass a list")
    return (path, f"{type(value).__name__} is not JSON-serialisable")


def check_arguments(
    task: str, args: tuple | list, kwargs: dict[str, Any], names: Sequence[str] = ()
) -> dict[str, Any]:
    """The payload dict for ``args``/``kwargs``, or :class:`PayloadNotSerializable` naming the culprit.

    ``names`` are the handler's parameter names for the positional arguments, in order (``*args``
    for those a star parameter takes), so a refusal names the parameter however the caller passed
    it: ``argument 'when' (positional 0)``. Without them it can only say ``positional argument 0``.
    """
    for index, value in enumerate(args):
        name = names[index] if index < len(names) else None
        if name is None:
            label, root = f"positional argument {index}", f"args[{index}]"
        else:
            label = f"argument {name!r} (positional {index})"
            root = f"args[{index}]" if name.startswith("*") else name
        _check(task, label, root, value)
    for name, value in kwargs.items():
        _check(task, f"argument {name!r}", name, value)
    return {"args": list(args), "kwargs": dict(kwargs)}


def check_payload(task: str, payload: Any) -> None:
    """A whole stored payload (bulk enqueue, an operator's edit): a JSON object (a dict) whose
    ``args`` is a list and ``kwargs`` an object, since the worker calls ``handler(*args, **kwargs)``
    (a string ``args`` would arrive as one argument per character)."""
    if not isinstance(payload, dict):
        got = type(payload).__name__
        raise InvalidJob(f"job {task!r}: payload must be a JSON object (a dict), got {got}")
    for key, kind, name in (("args", list, "a list"), ("kwargs", dict, "an object")):
        if key in payload and not isinstance(payload[key], kind):
            got = type(payload[key]).__name__
            raise InvalidJob(f"job {task!r}: payload[{key!r}] must be {name}, got {got}")
    check_value(task, "payload", payload)


def check_value(task: str, what: str, value: Any) -> None:
    """Check one value (a handler's result, an edited payload) the same way."""
    _check(task, what, what, value)


def _check(task: str, label: str, root: str, value: Any) -> None:
    found = _problem(value, root)
    if found:
        path, reason = found
        where = "" if path == root else f" (at {path})"
        raise PayloadNotSerializable(f"job {task!r}: {label}{where} cannot be stored as JSON: {reason}")


def dumps(value: Any) -> str:
    """Serialise a checked value for a ``::jsonb`` parameter."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))
