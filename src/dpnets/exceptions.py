"""Exceptions and the fitted-state check shared by all estimators."""

from __future__ import annotations

import functools

__all__ = ["NotFittedError", "check_is_fitted"]


class NotFittedError(ValueError, AttributeError):
    """Raised when an estimator is used before ``fit`` (as in scikit-learn).

    Where scikit-learn is installed, the error raised is also an instance of
    ``sklearn.exceptions.NotFittedError`` (so scikit-learn's checks and ``except`` clauses
    catch it); scikit-learn is imported only when the error is raised.
    """


@functools.cache
def _error_class() -> type[NotFittedError]:
    """:class:`NotFittedError`, also deriving from scikit-learn's where it is installed."""
    try:
        from sklearn.exceptions import NotFittedError as SklearnNotFittedError
    except ImportError:
        return NotFittedError
    return type(
        "NotFittedError",
        (NotFittedError, SklearnNotFittedError),
        {"__module__": __name__, "__doc__": NotFittedError.__doc__},
    )


def check_is_fitted(estimator: object, attribute: str) -> None:
    """Raise :class:`NotFittedError` unless ``estimator`` has the fitted ``attribute``."""
    if getattr(estimator, attribute, None) is None:
        name = type(estimator).__name__
        raise _error_class()(f"this {name} instance is not fitted yet; call {name}.fit(...) first")
