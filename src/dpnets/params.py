"""Parameter validation shared by every estimator: one clear error per bad value.

Each check names the parameter, the value it got and what it expects, and raises
``TypeError`` for a value of the wrong kind (``lr="0.01"``, ``epochs=None``) and
``ValueError`` for a value of the right kind out of range (``lr=-1``, ``rtol=nan``).
Integers are never silently truncated: ``epochs=2.5`` is refused, ``epochs=3.0`` is too
(pass ``3``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any

__all__ = ["check_int", "check_real", "check_choice", "check_bool", "check_seed"]


def check_int(name: str, value: Any, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` in ``[low, high]``; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        raise ValueError(f"{name} must be an integer {_range(low, high)}, got {v}")
    return v


def check_real(
    name: str,
    value: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite ``float`` in the interval; bools, strings and NaN/inf refused."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {v}")
    bad_low = low is not None and (v <= low if low_open else v < low)
    bad_high = high is not None and (v >= high if high_open else v > high)
    if bad_low or bad_high:
        lo = "" if low is None else ("(" if low_open else "[") + f"{low:g}"
        hi = "" if high is None else f"{high:g}" + (")" if high_open else "]")
        interval = f"in {lo or '(-inf'}, {hi or 'inf)'}"
        raise ValueError(f"{name} must be {interval}, got {v:g}")
    return v


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices`` (compared with ``==``)."""
    choices = tuple(choices)
    if not any(value == c and type(value) is type(c) for c in choices):
        raise ValueError(
            f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}"
        )
    return value


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (numpy bools included)."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_seed(value: Any) -> int | None:
    """A seed: ``None`` or a non-negative integer."""
    if value is None:
        return None
    return check_int("seed", value, 0)


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    if low is not None:
        return f">= {low}"
    return f"<= {high}"
