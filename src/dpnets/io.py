"""Saving and loading fitted models without executing code.

A file is a ``torch.save`` of a plain dictionary ``{"format", "version", "kind", "config",
"tensors"}``: ``config`` is a JSON string, ``tensors`` a flat ``name -> Tensor`` mapping. It
is read back with ``torch.load(weights_only=True)``, which refuses arbitrary pickled objects.

Encoders from :mod:`dpnets.nn` are rebuilt from their stored ``config``; for any other
``torch.nn.Module`` pass an instance of the same architecture to :func:`load` (its weights are
replaced), exactly as with a PyTorch ``state_dict``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from dpnets.nn.registry import build, describe

__all__ = ["save", "load", "register", "dump_features", "restore_features", "arrays_to_tensors"]

_FORMAT = "dpnets"
#: 2: gamma on the paper's scale, DPNet ``standardize``/``constant``, operator ``constant_``
#: and ``dt``. Version-1 files load with the behaviour they were saved with.
_VERSION = 2

#: kind name -> (class, dump, restore). ``dump(model, tensors) -> config dict`` fills
#: ``tensors``; ``restore(config, tensors, **load_kwargs) -> model``.
_KINDS: dict[str, tuple[type, Callable[..., dict], Callable[..., Any]]] = {}


def register(kind: str, cls: type, dump: Callable[..., dict], restore: Callable[..., Any]) -> None:
    """Make ``cls`` saveable under ``kind``.

    ``dump(model, tensors)`` returns a JSON-serialisable config and adds arrays/tensors to
    the ``tensors`` dict; ``restore(config, tensors, **kwargs)`` rebuilds the fitted model
    (``kwargs`` are :func:`load`'s keyword arguments).
    """
    _KINDS[kind] = (cls, dump, restore)


def arrays_to_tensors(model: Any, names: Sequence[str], tensors: dict[str, torch.Tensor]) -> None:
    """Store numpy attributes ``names`` of ``model`` as tensors."""
    for name in names:
        tensors[name] = torch.from_numpy(np.ascontiguousarray(getattr(model, name)))


def _dpnet_payload(model: Any, prefix: str, tensors: dict[str, torch.Tensor]) -> dict:
    from dpnets.exceptions import check_is_fitted

    check_is_fitted(model, "encoder_")
    cfg = {
        "score": model.score,
        "gamma": float(model.gamma),
        "lr": float(model.lr),
        "batch_size": int(model.batch_size),
        "epochs": int(model.epochs),
        "val_fraction": float(model.val_fraction),
        "standardize": model.standardize,
        "constant": bool(model.constant),
        "optimizer": model.optimizer if isinstance(model.optimizer, str) else "adam",
        "optimizer_kwargs": model.optimizer_kwargs,
        "seed": model.seed,
        "progress": bool(model.progress),
    }
    fitted = {
        "history_": model.history_,
        "best_epoch_": model.best_epoch_,
        "state_shape_": list(model.state_shape_),
        "n_features_": int(model.n_features_),
        "lag_": model.lag_,
        "n_train_": int(model.n_train_),
    }
    spec = {
        "encoder": describe(model.encoder_),
        "lagged_encoder": (
            describe(model.lagged_encoder_) if model.lagged_encoder_ is not None else None
        ),
        "has_lagged_encoder": model.lagged_encoder_ is not None,
    }
    if model.input_shift_ is not None:
        tensors[f"{prefix}input_shift_"] = torch.from_numpy(np.asarray(model.input_shift_))
        tensors[f"{prefix}input_scale_"] = torch.from_numpy(np.asarray(model.input_scale_))
    for k, v in model.encoder_.state_dict().items():
        tensors[f"{prefix}encoder.{k}"] = v.detach().cpu()
    if model.lagged_encoder_ is not None:
        for k, v in model.lagged_encoder_.state_dict().items():
            tensors[f"{prefix}lagged_encoder.{k}"] = v.detach().cpu()
    return {"params": cfg, "fitted": fitted, "modules": spec}


def dump_features(features: Any, tensors: dict[str, torch.Tensor]) -> dict:
    """Config for a model's feature map: identity (None), a DPNet (stored), or custom."""
    from dpnets.representation import DPNet

    if features is None:
        return {"kind": "identity", "config": None}
    if isinstance(features, DPNet):
        return {"kind": "dpnet", "config": _dpnet_payload(features, "features.", tensors)}
    return {"kind": "custom", "config": None}


def restore_features(
    cfg: dict,
    tensors: dict[str, torch.Tensor],
    *,
    features: Any = None,
    encoder: nn.Module | None = None,
    lagged_encoder: nn.Module | None = None,
    device: str | torch.device = "cpu",
) -> Any:
    """Inverse of :func:`dump_features`."""
    if cfg["kind"] == "identity":
        return None
    if cfg["kind"] == "dpnet":
        return _load_dpnet(cfg["config"], tensors, "features.", encoder, lagged_encoder, device)
    if features is None:
        raise ValueError(
            "this model was fitted on a custom feature map; pass it as load(path, features=...)"
        )
    return features


_OPERATOR_ARRAYS = ("operator_", "cx_", "cxy_", "_cx_pinv", "features_x_", "state_coef_")


def _operator_payload(model: Any, tensors: dict[str, torch.Tensor]) -> dict:
    from dpnets.exceptions import check_is_fitted

    check_is_fitted(model, "operator_")
    arrays_to_tensors(model, _OPERATOR_ARRAYS, tensors)
    if getattr(model, "feature_shift_", None) is not None:
        arrays_to_tensors(model, ("feature_shift_", "feature_scale_"), tensors)
    return {
        "params": {
            "ridge": float(model.ridge),
            "rtol": model.rtol,
            "constant": model.constant,
            "dt": float(model.dt),
        },
        "fitted": {
            "constant_": bool(model.constant_),
            "lag_": model.lag_,
            "rank_": int(model.rank_),
            "n_samples_": int(model.n_samples_),
            "n_features_": int(model.n_features_),
            "state_shape_": list(model.state_shape_),
        },
        "features": dump_features(model.features, tensors),
    }


def save(model: Any, path: str | os.PathLike) -> None:
    """Save a fitted dpnets model (DPNet, TransferOperator, ...) to ``path``."""
    import dpnets  # noqa: F401 - populates the registry

    matches = [(k, v[1]) for k, v in _KINDS.items() if type(model) is v[0]]
    if not matches:
        raise TypeError(f"cannot save objects of type {type(model).__name__}")
    kind, dump = matches[0]
    tensors: dict[str, torch.Tensor] = {}
    cfg = dump(model, tensors)
    payload = {
        "format": _FORMAT,
        "version": _VERSION,
        "kind": kind,
        "config": json.dumps(cfg),
        "tensors": tensors,
    }
    torch.save(payload, os.fspath(path))


def _sub_state(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _restore_module(
    spec: dict | None, given: nn.Module | None, state: dict, what: str
) -> nn.Module:
    if given is not None:
        module = given
    elif spec is not None:
        module = build(spec)
    else:
        raise ValueError(
            f"the saved {what} is a custom torch module; pass an instance of the same "
            f"architecture as load(path, {what}=...)"
        )
    module.load_state_dict(state, strict=True)
    return module.eval()


def _load_dpnet(
    cfg: dict,
    tensors: dict[str, torch.Tensor],
    prefix: str,
    encoder: nn.Module | None,
    lagged_encoder: nn.Module | None,
    device: str | torch.device,
):
    from dpnets.representation import DPNet

    mods = cfg["modules"]
    enc = _restore_module(
        mods["encoder"], encoder, _sub_state(tensors, prefix + "encoder."), "encoder"
    ).to(device)
    lag_enc = None
    if mods["has_lagged_encoder"]:
        lag_enc = _restore_module(
            mods["lagged_encoder"],
            lagged_encoder,
            _sub_state(tensors, prefix + "lagged_encoder."),
            "lagged_encoder",
        ).to(device)
    model = DPNet(enc, lagged_encoder=lag_enc, device=device, **cfg["params"])
    model.encoder_, model.lagged_encoder_ = enc, lag_enc
    shift = tensors.get(prefix + "input_shift_")
    model.input_shift_ = None if shift is None else shift.numpy()
    model.input_scale_ = None if shift is None else tensors[prefix + "input_scale_"].numpy()
    f = cfg["fitted"]
    model.history_ = f["history_"]
    model.best_epoch_ = f["best_epoch_"]
    model.state_shape_ = tuple(f["state_shape_"])
    model.n_features_ = f["n_features_"]
    model.lag_ = f["lag_"]
    model.n_train_ = f["n_train_"]
    return model


def _restore_dpnet(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> Any:
    return _load_dpnet(
        cfg, tensors, "", kw.get("encoder"), kw.get("lagged_encoder"), kw.get("device", "cpu")
    )


def _restore_operator(cfg: dict, tensors: dict[str, torch.Tensor], **kw: Any) -> Any:
    from dpnets.operators import TransferOperator

    op = TransferOperator(restore_features(cfg["features"], tensors, **kw), **cfg["params"])
    for name in _OPERATOR_ARRAYS:
        setattr(op, name, tensors[name].numpy())
    shift = tensors.get("feature_shift_")
    op.feature_shift_ = None if shift is None else shift.numpy()
    op.feature_scale_ = None if shift is None else tensors["feature_scale_"].numpy()
    restore_fitted_operator(op, cfg["fitted"])
    return op


def restore_fitted_operator(model: Any, fitted: dict) -> None:
    """Set the fitted scalars saved by :func:`_operator_payload` and recompute the spectrum."""
    model.constant_ = bool(fitted.get("constant_", False))
    model.lag_ = fitted["lag_"]
    model.rank_ = fitted["rank_"]
    model.n_samples_ = fitted["n_samples_"]
    model.n_features_ = fitted["n_features_"]
    model.state_shape_ = tuple(fitted["state_shape_"])
    model._set_spectrum()


def load(
    path: str | os.PathLike,
    *,
    encoder: nn.Module | None = None,
    lagged_encoder: nn.Module | None = None,
    features: Any = None,
    device: str | torch.device = "cpu",
    **modules: Any,
) -> Any:
    """Load a model saved with ``save``. Never unpickles arbitrary objects.

    Parameters
    ----------
    path : str or PathLike
    encoder, lagged_encoder : nn.Module, optional
        Architectures for encoders that are not from :mod:`dpnets.nn`.
    features : callable, optional
        The feature map of a model fitted on a custom callable.
    device : str or torch.device, default "cpu"
    **modules
        Further architectures a model kind needs (e.g. ``decoder=`` for autoencoders).

    Returns
    -------
    The fitted model (DPNet, TransferOperator, ...).
    """
    import dpnets  # noqa: F401 - populates the registry

    payload = torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a dpnets model file")
    version = payload.get("version")
    if version not in (1, _VERSION):
        raise ValueError(f"unsupported dpnets file version {version} in {path}")
    kind = payload.get("kind")
    if kind not in _KINDS:
        raise ValueError(f"unknown model kind {kind!r} in {path}")
    cfg = json.loads(payload["config"])
    if version == 1:
        _upgrade_v1(cfg)
    restore = _KINDS[kind][2]
    return restore(
        cfg,
        payload["tensors"],
        encoder=encoder,
        lagged_encoder=lagged_encoder,
        features=features,
        device=device,
        **modules,
    )


def _upgrade_v1(cfg: Any) -> None:
    """Version-1 configs: DPNets without standardisation or constant, gamma on the old
    trace scale (converted), operators without an added constant. In place, recursively."""
    if not isinstance(cfg, dict):
        return
    params, fitted = cfg.get("params"), cfg.get("fitted")
    if isinstance(params, dict) and isinstance(fitted, dict) and "modules" in cfg:  # a DPNet
        params.setdefault("standardize", "none")
        params.setdefault("constant", False)
        d = int(fitted["n_features_"])
        generator = params.get("score") in ("generator", "dirichlet")
        params["gamma"] = float(params["gamma"]) * (d if generator else 2 * d)
    elif isinstance(params, dict) and "ridge" in params:  # an operator
        params.setdefault("constant", False)
    for value in cfg.values():
        _upgrade_v1(value)


def _register_core() -> None:
    from dpnets.operators import TransferOperator
    from dpnets.representation import DPNet

    register("DPNet", DPNet, lambda m, t: _dpnet_payload(m, "", t), _restore_dpnet)
    register("TransferOperator", TransferOperator, _operator_payload, _restore_operator)
