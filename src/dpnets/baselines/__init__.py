"""Baselines of the paper's experiments (Sec. 5) behind the downstream API of
:class:`dpnets.TransferOperator` (``fit``, ``eig``, ``eigenfunctions``, ``predict``,
``implied_timescales``, ``save``/:func:`dpnets.load`).

Linear models on a fixed or fitted feature map (:class:`dpnets.TransferOperator` subclasses):

* :class:`DMD` — linear features, optional POD rank truncation (Schmid 2010);
* :class:`EDMD` — Chebyshev / monomial / user dictionaries (Williams et al. 2015), with the
  factories :func:`chebyshev_features` and :func:`monomial_features`;
* :class:`KernelDMD` — kernel ridge, principal-component and reduced-rank regression in an
  RKHS (Williams et al. 2015; Kostic et al. 2022), extra ``dpnets[kernels]``;
* :class:`NystromKernelDMD` — the same with Nyström sketching (Meanti et al. 2023).

Learned representations:

* :class:`VAMPNet` — DPNet with the VAMP-2 score, no metric distortion, separate lobes
  (Mardt et al. 2018); regress the operator with ``TransferOperator(vampnet)``;
* :class:`DynamicAutoencoder` (Lusch et al. 2018) and :class:`ConsistentAutoencoder`
  (Azencot et al. 2020) — encoder, decoder and linear latent dynamics, trained with
  :func:`dpnets.training.train`.
"""

from dpnets.baselines._io import register_baselines
from dpnets.baselines.autoencoders import ConsistentAutoencoder, DynamicAutoencoder
from dpnets.baselines.dictionaries import (
    ChebyshevFeatures,
    MonomialFeatures,
    ProjectionFeatures,
    chebyshev_features,
    monomial_features,
)
from dpnets.baselines.dmd import DMD, EDMD
from dpnets.baselines.kernels import Kernel, KernelDMD, NystromKernelDMD
from dpnets.baselines.vampnets import VAMPNet

__all__ = [
    "DMD",
    "EDMD",
    "KernelDMD",
    "NystromKernelDMD",
    "Kernel",
    "VAMPNet",
    "DynamicAutoencoder",
    "ConsistentAutoencoder",
    "chebyshev_features",
    "monomial_features",
    "ChebyshevFeatures",
    "MonomialFeatures",
    "ProjectionFeatures",
]

register_baselines()
