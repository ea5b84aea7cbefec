"""The shared estimator base: scikit-learn style parameters for every dpnets estimator.

Parameters are the arguments of ``__init__``, stored unchanged under the same names;
:meth:`BaseEstimator.get_params` reads them from the signature, so
``sklearn.base.clone``, ``set_params`` with nested ``features__gamma`` keys and a readable
``repr`` work for every estimator (scikit-learn itself stays optional). Everything learned
by ``fit`` ends in ``_``, and ``fit`` never changes a parameter.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections import defaultdict
from typing import Any, ClassVar

import numpy as np

from dpnets.params import Constraint, validate_params

__all__ = [
    "BaseEstimator",
    "TransformerMixin",
    "clone",
    "fit_data",
    "fit_lag",
    "is_fitted",
    "vamp2_scorer",
]


def vamp2_scorer(estimator: Any, X: Any, y: Any = None) -> float:
    """scikit-learn scorer: the VAMP-2 score ``P^0`` of a fitted estimator on held-out ``X``.

    The estimator's own ``score(X)``, which is the held-out VAMP-2 score for every dpnets
    estimator of lagged pairs (a :class:`dpnets.DPNet`: the unpenalised projection score of
    ``[1, psi]`` at its lag, comparable across ``gamma``, objectives and learning rates), so
    ``GridSearchCV``'s default scoring gives the same; kept for explicit ``scoring=``. Every
    ``score`` computes it with :func:`dpnets.heldout.heldout_score`, the one held-out score.
    """
    return float(estimator.score(X))


def fit_lag(estimator: Any, lag: Any = None, y: Any = None) -> Any:
    """The lag of one ``fit``: the estimator's ``lag`` parameter.

    ``lag`` is the deprecated ``fit(X, lag=k)`` argument and ``y`` scikit-learn's target
    (never read, except that an integer ``y`` is the old positional ``fit(X, k)``): either
    overrides the parameter for this fit with a ``FutureWarning`` that names the fix.
    """
    if isinstance(y, (int, np.integer)) and not isinstance(y, bool):
        if lag is not None:
            raise TypeError("fit() got the lag twice (positionally and as lag=)")
        lag = y
    if lag is None:
        return getattr(estimator, "lag", None)
    name = type(estimator).__name__
    warnings.warn(
        f"{name}.fit(X, lag={lag!r}) is deprecated and will be removed in the next release: "
        f"the lag is a parameter, {name}(lag={lag!r}) or .set_params(lag={lag!r})",
        FutureWarning,
        stacklevel=3,
    )
    return lag


def fit_data(estimator: Any, X: Any, y: Any = None, lag: Any = None) -> tuple[Any, Any]:
    """``(data, lag)`` of one ``fit(X, y)``: ``y`` given as an array is the time-lagged
    partner of each row of ``X``, so ``fit(X, Y)`` is ``fit((X, Y))`` (the same checks).

    * ``y=None``: ``X`` as it is (trajectories, a list of them, ``(X, Y)``, a Dataset).
    * ``y`` an array of ``X``'s shape (or of its size, e.g. ``(n,)`` against ``(n, 1)``:
      reshaped): the pairs ``(X, y)``; a ``y`` of another length or state shape is refused
      by the pairing (:func:`dpnets.pairs.pair_segments`) with a one-line message.
    * ``y`` a 1-D vector of one value per row of a multi-dimensional ``X`` (scikit-learn's
      target, as its estimator checks pass): not a lagged state, ignored with a
      ``UserWarning`` naming the fix.
    * an integer ``y``: the deprecated positional lag (:func:`fit_lag`).

    ``y`` with ``X`` already a tuple, a list of trajectories or a Dataset, and a ``y`` that
    is a list, are refused (``ValueError``), naming the form to use.
    """
    if y is None or (isinstance(y, (int, np.integer)) and not isinstance(y, bool)):
        return X, fit_lag(estimator, lag, y)
    name = type(estimator).__name__
    shape_y = getattr(y, "shape", None)
    if isinstance(X, (tuple, list)) or not hasattr(X, "shape") or shape_y is None:
        what = type(X).__name__ if not hasattr(X, "shape") else type(y).__name__
        raise ValueError(
            f"{name}.fit(X, Y) pairs two arrays of states (Y[i] the lagged partner of X[i]); "
            f"got {what}: pass a list of trajectories or a tuple (X, Y) as X alone"
        )
    shape_x = tuple(X.shape)
    shape_y = tuple(shape_y)
    n = shape_x[0] if shape_x else None
    if shape_y != shape_x and shape_y[:1] == shape_x[:1]:
        size_x, size_y = int(np.prod(shape_x)), int(np.prod(shape_y))
        if size_y == size_x:  # (n,) against (n, 1), or (n, 1) against (n,)
            y = np.reshape(np.asarray(y), shape_x)
        elif len(shape_y) == 1 and len(shape_x) > 1:
            warnings.warn(
                f"{name}.fit(X, y): y of shape {shape_y} is one value per row, not a lagged "
                f"state of X's shape {shape_x[1:]}: ignored (scikit-learn's target); for "
                f"lagged pairs pass Y of shape ({n}, {', '.join(map(str, shape_x[1:]))})",
                UserWarning,
                stacklevel=3,
            )
            return X, fit_lag(estimator, lag, None)
    return (X, y), fit_lag(estimator, lag, None)


class TransformerMixin:
    """``fit_transform`` for estimators with ``fit`` and ``transform`` (scikit-learn's)."""

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
        """``fit(X, y, **fit_params).transform(X)``: for a list of trajectories the features
        of their frames in order, for pre-paired ``(X, Y)`` the features of ``X``."""
        self.fit(X, y, **fit_params)  # type: ignore[attr-defined]
        if isinstance(X, tuple):
            return self.transform(X[0])  # type: ignore[attr-defined]
        return self.transform(X)  # type: ignore[attr-defined]


class BaseEstimator:
    """Mixin giving ``get_params``, ``set_params`` and ``__repr__`` from ``__init__``, and
    the parameter checks from the class's declarative table ``_parameter_constraints``."""

    #: parameter name -> constraint (:mod:`dpnets.params`): the one table of accepted values,
    #: checked by :meth:`_check_params` in ``fit`` and by :func:`dpnets.load`
    _parameter_constraints: ClassVar[dict[str, Constraint]] = {}

    def _check_params(self) -> None:
        """Check every parameter against the class's ``_parameter_constraints`` (the first
        bad value raises, naming the parameter); subclasses extend it only for rules that
        tie parameters together or ask the environment."""
        validate_params(self, self._parameter_constraints)

    @classmethod
    def _get_param_names(cls) -> list[str]:
        init = cls.__init__
        if init is object.__init__:
            return []
        names = []
        for p in inspect.signature(init).parameters.values():
            if p.name == "self" or p.kind == p.VAR_KEYWORD:
                continue
            if p.kind == p.VAR_POSITIONAL:
                raise TypeError(f"{cls.__name__}.__init__ must not take *args")
            names.append(p.name)
        return sorted(names)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters; with ``deep``, those of nested estimators too
        (``features__gamma`` for a :class:`dpnets.DPNet` feature map)."""
        out: dict[str, Any] = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and isinstance(value, BaseEstimator):
                out.update((f"{name}__{k}", v) for k, v in value.get_params(deep=True).items())
            out[name] = value
        return out

    def set_params(self, **params: Any) -> BaseEstimator:
        """Set parameters (nested ones as ``name__param``); returns ``self``."""
        if not params:
            return self
        valid = self.get_params(deep=True)
        nested: dict[str, dict[str, Any]] = defaultdict(dict)
        for key, value in params.items():
            name, delim, sub = key.partition("__")
            if name not in valid:
                raise ValueError(
                    f"invalid parameter {name!r} for {type(self).__name__}; valid parameters: "
                    f"{', '.join(self._get_param_names())}"
                )
            if delim:
                nested[name][sub] = value
            else:
                setattr(self, name, value)
                valid[name] = value
        for name, sub in nested.items():
            target = valid[name]
            if not isinstance(target, BaseEstimator):
                raise ValueError(f"parameter {name!r} of {type(self).__name__} has no parameters")
            target.set_params(**sub)
        return self

    @property
    def n_features_in_(self) -> int:
        """Number of input coordinates seen by ``fit`` (scikit-learn's name): the size of
        one state, ``prod(state_shape_)``."""
        shape = vars(self).get("state_shape_")
        if shape is None:
            raise AttributeError(f"{type(self).__name__} is not fitted: no n_features_in_")
        return int(np.prod(shape))

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's estimator tags (scikit-learn >= 1.6 asks for them): an unsupervised
        transformer of trajectories (``fit(X)``, no target), scored by ``score(X)``; its
        features are float64 (float32 for a network's), whatever the input dtype."""
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags

        transformer = hasattr(self, "transform")
        return Tags(
            estimator_type="transformer" if transformer else None,
            target_tags=TargetTags(required=False),
            transformer_tags=TransformerTags(preserves_dtype=[]) if transformer else None,
            input_tags=InputTags(two_d_array=True, three_d_array=True),
            non_deterministic=getattr(self, "seed", 0) is None,
        )

    def __repr__(self) -> str:
        sig = inspect.signature(type(self).__init__)
        parts = []
        for name in self._get_param_names():
            value = getattr(self, name, None)
            default = sig.parameters[name].default
            if default is not inspect.Parameter.empty and _same(value, default):
                continue
            parts.append(f"{name}={_short_repr(value)}")
        return f"{type(self).__name__}({', '.join(parts)})"


def clone(estimator: Any) -> Any:
    """An unfitted copy with the same parameters (``sklearn.base.clone`` without scikit-learn):
    nested estimators are cloned, everything else is deep-copied."""
    if not isinstance(estimator, BaseEstimator):
        raise TypeError(f"cannot clone {type(estimator).__name__}: not a dpnets estimator")
    params = {
        k: clone(v) if isinstance(v, BaseEstimator) else copy.deepcopy(v)
        for k, v in estimator.get_params(deep=False).items()
    }
    return type(estimator)(**params)


def is_fitted(estimator: Any) -> bool:
    """Whether a dpnets estimator holds fitted state (an attribute ending in ``_``)."""
    return any(k.endswith("_") and not k.startswith("_") for k in vars(estimator))


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a is b or (type(a) is type(b) and a == b))
    except Exception:  # noqa: BLE001 - arrays and modules do not compare to a bool
        return False


def _short_repr(value: Any) -> str:
    import torch

    if isinstance(value, torch.nn.Module):
        return f"{type(value).__name__}(...)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
