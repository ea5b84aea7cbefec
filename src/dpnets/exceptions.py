"""Exceptions and the fitted-state check shared by all estimators."""

from __future__ import annotations

__all__ = ["NotFittedError", "check_is_fitted"]


class NotFittedError(ValueError, AttributeError):
    """Raised when an estimator is used before ``fit`` (as in scikit-learn)."""


def check_is_fitted(estimator: object, attribute: str) -> None:
    """Raise :class:`NotFittedError` unless ``estimator`` has the fitted ``attribute``."""
    if getattr(estimator, attribute, None) is None:
        name = type(estimator).__name__
        raise NotFittedError(f"this {name} instance is not fitted yet; call {name}.fit(...) first")
