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
from collections import defaultdict
from typing import Any

__all__ = ["BaseEstimator", "clone", "is_fitted", "vamp2_scorer"]


def vamp2_scorer(estimator: Any, X: Any, y: Any = None) -> float:
    """scikit-learn scorer: the VAMP-2 score ``P^0`` of a fitted estimator on held-out ``X``.

    For a :class:`dpnets.DPNet` (whose parameter ``score`` names its training score, so it
    has no ``score`` method) the unpenalised projection score of ``[1, psi]`` at its lag,
    comparable across ``gamma``, scores and learning rates; for the linear models their
    ``score(X)``. Use it as ``GridSearchCV(DPNet(...), grid, scoring=vamp2_scorer)``.
    """
    if hasattr(estimator, "encoder_") and hasattr(estimator, "evaluate"):
        return float(
            estimator.evaluate(X, getattr(estimator, "lag_", None) or 1, "projection", 0.0)
        )
    return float(estimator.score(X))


class BaseEstimator:
    """Mixin giving ``get_params``, ``set_params`` and ``__repr__`` from ``__init__``."""

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

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's estimator tags (scikit-learn >= 1.6 asks for them): an unsupervised
        estimator of trajectories (``fit(X)``, no target), scored by ``score(X)``."""
        from sklearn.utils import InputTags, Tags, TargetTags

        return Tags(
            estimator_type=None,
            target_tags=TargetTags(required=False),
            input_tags=InputTags(one_d_array=True, two_d_array=True, three_d_array=True),
            no_validation=True,  # dpnets validates its own inputs
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
