"""Parameter validation shared by every estimator: one clear error per bad value.

Each check names the parameter, the value it got and what it expects, and raises
``TypeError`` for a value of the wrong kind (``lr="0.01"``, ``epochs=None``) and
``ValueError`` for a value of the right kind out of range (``lr=-1``, ``rtol=nan``).
Integers are never silently truncated: ``epochs=2.5`` is refused, ``epochs=3.0`` is too
(pass ``3``).

Estimators declare their parameters' constraints in one table, ``_parameter_constraints``
(as scikit-learn does): a dict from parameter name to a constraint built here (``integer``,
``real``, ``one_of``, ``boolean``, ``seed``, ``count``, ``instance_of``, ``satisfies``,
``checked_in_fit``, or any callable ``(name, value)`` that raises). Every constructor
parameter has an entry (``tests/test_params.py`` checks every public estimator, as
scikit-learn's ``check_param_validation`` does). :func:`validate_params` applies a table; it
is what ``BaseEstimator._check_params`` runs in every ``fit`` and what :func:`dpnets.load`
runs on a restored model.

Examples
--------
>>> from dpnets.params import integer, validate_params
>>> class Model:
...     batch_size = 1
>>> validate_params(Model(), {"batch_size": integer(2)})
Traceback (most recent call last):
...
ValueError: batch_size must be an integer >= 2, got 1
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from numbers import Integral, Real
from typing import Any

__all__ = [
    "check_int",
    "check_real",
    "check_choice",
    "check_bool",
    "check_seed",
    "check_name_or_subclass",
    "Constraint",
    "integer",
    "real",
    "one_of",
    "boolean",
    "seed",
    "count",
    "instance_of",
    "name_or_subclass",
    "satisfies",
    "checked_in_fit",
    "BATCH_SIZE",
    "validate_params",
]

#: A parameter constraint: ``check(name, value)`` raises ``TypeError``/``ValueError`` naming
#: the parameter when ``value`` is not accepted.
Constraint = Callable[[str, Any], Any]


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


def check_name_or_subclass(
    name: str, value: Any, names: Iterable[str], base: type, base_name: str
) -> Any:
    """``value`` if it is one of ``names`` (in any case) or a subclass of ``base`` (called
    ``base_name`` in the messages): a ``ValueError`` for an unknown name, a ``TypeError``
    for anything else (the optimizer of the neural estimators: a name or a
    ``torch.optim.Optimizer`` subclass)."""
    names = tuple(names)
    if isinstance(value, str):
        if value.lower() not in names:
            raise ValueError(
                f"unknown {name} {value!r}; expected one of {', '.join(names)} or a "
                f"{base_name} subclass"
            )
        return value
    if not (isinstance(value, type) and issubclass(value, base)):
        raise TypeError(
            f"{name} must be a name ({', '.join(names)}) or a {base_name} subclass, got "
            f"{value!r} ({type(value).__name__})"
        )
    return value


def _or_none(check: Constraint, none: bool) -> Constraint:
    if not none:
        return check
    return lambda name, value: None if value is None else check(name, value)


def integer(low: int | None = None, high: int | None = None, *, none: bool = False) -> Constraint:
    """An ``int`` in ``[low, high]`` (:func:`check_int`); ``none``: ``None`` accepted too."""
    return _or_none(lambda name, value: check_int(name, value, low, high), none)


def real(
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    none: bool = False,
) -> Constraint:
    """A finite real in the interval (:func:`check_real`); ``none``: ``None`` accepted too."""
    return _or_none(
        lambda name, value: check_real(
            name, value, low, high, low_open=low_open, high_open=high_open
        ),
        none,
    )


def one_of(*choices: Any, none: bool = False) -> Constraint:
    """One of ``choices``, of the same type (:func:`check_choice`)."""
    return _or_none(lambda name, value: check_choice(name, value, choices), none)


def boolean() -> Constraint:
    """True or False (:func:`check_bool`)."""
    return check_bool


def seed() -> Constraint:
    """``None`` or a non-negative integer (:func:`check_seed`)."""
    return lambda name, value: check_seed(value)


def count(*, none: bool = True) -> Constraint:
    """A positive integer (numpy integers too, bools refused), or ``None``: a ``ValueError``
    ``"<name> must be a positive integer or None"`` otherwise (``rank``, ``n_centers``)."""

    def check(name: str, value: Any) -> None:
        if value is None and none:
            return
        if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
            tail = " or None" if none else ""
            raise ValueError(f"{name} must be a positive integer{tail}, got {value!r}")

    return check


def instance_of(types: type | tuple[type, ...], what: str, *, none: bool = True) -> Constraint:
    """An instance of ``types`` (``what`` says it in words), or ``None`` when ``none``: a
    ``TypeError`` ``"<name> must be <what>, got <type>"`` otherwise."""

    def check(name: str, value: Any) -> None:
        if not isinstance(value, types):
            raise TypeError(f"{name} must be {what}, got {type(value).__name__}")

    return _or_none(check, none)


def name_or_subclass(names: Iterable[str], base: type, base_name: str) -> Constraint:
    """One of ``names`` (in any case) or a subclass of ``base``
    (:func:`check_name_or_subclass`)."""
    names = tuple(names)

    def check(name: str, value: Any) -> None:
        check_name_or_subclass(name, value, names, base, base_name)

    return check


def satisfies(
    test: Callable[[Any], Any], what: str | None = None, *, none: bool = False
) -> Constraint:
    """``test(value)`` truthy (a ``ValueError`` ``"<name> must be <what>, got <value>"``
    otherwise); with ``what=None``, ``test`` raises its own error and its result is ignored
    (a check shared with other code, e.g. ``training.resolve_device``)."""

    def check(name: str, value: Any) -> None:
        ok = test(value)
        if what is not None and not ok:
            raise ValueError(f"{name} must be {what}, got {value!r}")

    return _or_none(check, none)


def checked_in_fit(where: str) -> Constraint:
    """A parameter declared in the table whose value only the data can judge, checked by
    ``where`` during ``fit`` (a feature map's output shape, an SDE's drift on the states):
    scikit-learn's ``"no_validation"``, with the place of the check named for the reader."""

    def check(name: str, value: Any) -> None:
        return None

    check.where = where  # type: ignore[attr-defined]
    return check


#: ``batch_size`` of every estimator (the neural ones' training batches, ``Generator``'s
#: derivative chunks): at least 2. A training batch estimates covariances, and the
#: covariance of one sample is of rank one (zero once centred: the VAMP scores and the
#: constant function), so a batch of 1 trains on a degenerate score; one bound for every
#: estimator keeps ``batch_size`` one setting with one meaning (a grid or a configuration
#: moved from one estimator to another means the same). ``Generator`` sums exact moments
#: over its chunks, for which any size gives the same result: 2 costs it nothing.
BATCH_SIZE: Constraint = integer(2)


def validate_params(obj: Any, constraints: Mapping[str, Constraint]) -> None:
    """Check every parameter of ``obj`` named in ``constraints`` (in the table's order):
    the first bad value raises its constraint's error, which names the parameter."""
    for name, check in constraints.items():
        check(name, getattr(obj, name))


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    if low is not None:
        return f">= {low}"
    return f"<= {high}"
