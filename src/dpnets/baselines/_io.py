"""Save/load support of the baselines, through :func:`dpnets.io.register`.

Reuses the core payloads of :mod:`dpnets.io`: DMD/EDMD store the ``TransferOperator`` payload
plus their dictionary, VAMPNets the ``DPNet`` payload. Custom callables (a user dictionary or
kernel) are not stored: pass them back as ``dpnets.load(path, features=...)``; custom torch
modules as ``encoder=`` / ``decoder=`` (as for DPNet).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dpnets import io
from dpnets.operators import dump_operator, restore_operator
from dpnets.representation import dump_dpnet, restore_dpnet
from dpnets.spectral import dump_fitted_scalars, restore_fitted_state

from .autoencoders import (
    ConsistentAutoencoder,
    DynamicAutoencoder,
    dump_autoencoder,
    restore_autoencoder,
)
from .dictionaries import ChebyshevFeatures, MonomialFeatures, ProjectionFeatures
from .dmd import DMD, EDMD
from .kernels import Kernel, KernelDMD, KernelFeatures, NystromKernelDMD
from .vampnets import VAMPNet

Tensors = dict[str, torch.Tensor]


def _operator_cfg(cfg: dict) -> dict:
    """The plain ``TransferOperator`` part of a DMD/EDMD config."""
    params = {
        k: cfg["params"][k]
        for k in ("ridge", "rtol", "constant", "dt", "stabilize")
        if k in cfg["params"]
    }
    return {**cfg, "params": params}


def _transplant(target: Any, source: Any, skip: tuple[str, ...] = ()) -> Any:
    """Copy the restored state of ``source`` onto ``target`` (a subclass instance)."""
    for k, v in vars(source).items():
        if k not in skip:
            setattr(target, k, v)
    return target


# ----------------------------------------------------------------------------- DMD / EDMD
def _dump_dictionary(d: Any, tensors: Tensors) -> dict:
    if isinstance(d, ProjectionFeatures):
        tensors["dictionary.components"] = torch.from_numpy(np.ascontiguousarray(d.components))
        return {"kind": "projection", "config": None}
    if isinstance(d, (ChebyshevFeatures, MonomialFeatures)):
        return {"kind": d.kind, "config": d.get_config()}
    io.not_stored("dictionary", "features=...")
    return {"kind": "custom", "config": None}


def _restore_dictionary(cfg: dict, tensors: Tensors, given: Any) -> Any:
    kind = cfg["kind"]
    if kind == "projection":
        return ProjectionFeatures(tensors["dictionary.components"].numpy())
    if kind == "chebyshev":
        return ChebyshevFeatures(**cfg["config"])
    if kind == "monomial":
        return MonomialFeatures(**cfg["config"])
    if kind == "none":
        return None
    if given is None:
        raise ValueError(
            "this model was fitted on a custom dictionary; pass it as load(path, features=...)"
        )
    return given


def _dump_dmd(model: DMD, tensors: Tensors) -> dict:
    cfg = dump_operator(model, tensors)
    cfg["params"]["rank"] = model.rank
    proj = model.projection_
    cfg["dictionary"] = _dump_dictionary(proj, tensors) if proj is not None else {"kind": "none"}
    if model.singular_values_ is not None:
        tensors["singular_values_"] = torch.from_numpy(model.singular_values_)
    return cfg


def _restore_dmd(cfg: dict, tensors: Tensors, **kw: Any) -> DMD:
    proj = _restore_dictionary(cfg["dictionary"], tensors, None)
    params = dict(cfg["params"])
    model = DMD(rank=params.pop("rank"), **params)
    model.projection_ = proj
    sv = tensors.get("singular_values_")
    model.singular_values_ = sv.numpy() if sv is not None else None
    op = restore_operator(_operator_cfg(cfg), tensors, **{**kw, "features": proj})
    return _transplant(model, op, skip=("features",))


def _dump_edmd(model: EDMD, tensors: Tensors) -> dict:
    cfg = dump_operator(model, tensors)
    named = isinstance(model.dictionary, str)
    cfg["params"].update(
        {
            "dictionary": model.dictionary if named else None,
            "degree": model.degree,
            "domain": io.jsonable(model.domain),
        }
    )
    cfg["dictionary"] = _dump_dictionary(model.dictionary_, tensors)
    return cfg


def _restore_edmd(cfg: dict, tensors: Tensors, **kw: Any) -> EDMD:
    dictionary = _restore_dictionary(cfg["dictionary"], tensors, kw.get("features"))
    params = dict(cfg["params"])
    if params["dictionary"] is None:
        params["dictionary"] = dictionary
    model = EDMD(**params)
    model.dictionary_ = dictionary
    op = restore_operator(_operator_cfg(cfg), tensors, **{**kw, "features": dictionary})
    return _transplant(model, op, skip=("features",))


# ----------------------------------------------------------------------------- kernels
#: saved arrays; the n x r training features are not saved (file size independent of n)
_KERNEL_ARRAYS = ("operator_", "cx_", "cxy_", "state_coef_")


def _dump_kernel_model(model: Any, tensors: Tensors) -> dict:
    from dpnets.exceptions import check_is_fitted

    check_is_fitted(model, "operator_")
    io.arrays_to_tensors(model, _KERNEL_ARRAYS + ("features_mean_",), tensors)
    if getattr(model, "state_min_", None) is not None:  # the training range (predict's check)
        io.arrays_to_tensors(model, ("state_min_", "state_max_"), tensors)
    for prefix, fm in (("features", model.features_), ("left_features", model.left_features_)):
        tensors[f"{prefix}.centres"] = torch.from_numpy(np.ascontiguousarray(fm.centres))
        tensors[f"{prefix}.weights"] = torch.from_numpy(np.ascontiguousarray(fm.weights))
    params = {
        k: getattr(model, k)
        for k in ("rank", "estimator", "ridge", "length_scale", "degree", "coef0", "rtol", "dt")
    }
    if isinstance(model, NystromKernelDMD):
        params.update(n_centers=model.n_centers, seed=model.seed)
    named = isinstance(model.kernel_, Kernel)
    if not named:
        io.not_stored("kernel", "features=kernel")
    params["kernel"] = model.kernel if isinstance(model.kernel, str) else None
    return {
        "params": io.jsonable(params),
        "kernel": model.kernel_.get_config() if named else None,
        "fitted": dump_fitted_scalars(model),
    }


def _restore_kernel_model(cls: type) -> Any:
    def restore(cfg: dict, tensors: Tensors, **kw: Any) -> Any:
        if cfg["kernel"] is not None:
            kernel = Kernel(**cfg["kernel"])
        elif kw.get("features") is not None:
            kernel = kw["features"]
        else:
            raise ValueError(
                "this model was fitted with a custom kernel; pass it as load(path, features=kernel)"
            )
        params = dict(cfg["params"])
        if params["kernel"] is None:
            params["kernel"] = kernel
        model = cls(params.pop("kernel"), **params)
        io.tensors_to_arrays(model, tensors, _KERNEL_ARRAYS)
        model.kernel_ = kernel
        model.features_ = KernelFeatures(
            kernel, tensors["features.centres"].numpy(), tensors["features.weights"].numpy()
        )
        model.left_features_ = KernelFeatures(
            kernel,
            tensors["left_features.centres"].numpy(),
            tensors["left_features.weights"].numpy(),
        )
        if isinstance(model, NystromKernelDMD):
            model.centres_ = model.features_.centres
        restore_fitted_state(model, cfg["fitted"], tensors)
        return model

    return restore


# ----------------------------------------------------------------------------- VAMPNets
def _restore_vampnet(cfg: dict, tensors: Tensors, **kw: Any) -> VAMPNet:
    return restore_dpnet(cfg, tensors, **{**kw, "cls": VAMPNet})


def register_baselines() -> None:
    """Register every baseline with :func:`dpnets.io.register`."""
    io.register("DMD", DMD, _dump_dmd, _restore_dmd)
    io.register("EDMD", EDMD, _dump_edmd, _restore_edmd)
    io.register("KernelDMD", KernelDMD, _dump_kernel_model, _restore_kernel_model(KernelDMD))
    io.register(
        "NystromKernelDMD",
        NystromKernelDMD,
        _dump_kernel_model,
        _restore_kernel_model(NystromKernelDMD),
    )
    io.register("VAMPNet", VAMPNet, dump_dpnet, _restore_vampnet)
    io.register(
        "DynamicAutoencoder",
        DynamicAutoencoder,
        dump_autoencoder,
        restore_autoencoder(DynamicAutoencoder),
    )
    io.register(
        "ConsistentAutoencoder",
        ConsistentAutoencoder,
        dump_autoencoder,
        restore_autoencoder(ConsistentAutoencoder),
    )


__all__ = ["register_baselines"]
