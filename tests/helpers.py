"""Shared test set-ups (imported by test modules; pytest puts this folder on sys.path)."""

import numpy as np
import torch

from dpnets import DPNet
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck


def fit_ou_dpnet(device: str | None = None) -> tuple[DPNet, np.ndarray, OrnsteinUhlenbeck]:
    """The demo's r = 4 DPNet (the library defaults) fitted on 50,000 OU samples."""
    ou = OrnsteinUhlenbeck(theta=1.0, sigma=np.sqrt(2.0), dt=0.1)
    x = ou.sample(50_000, seed=0)
    torch.manual_seed(0)
    enc = MLP(1, (64, 64), 4, activation="celu")
    net = DPNet(enc, seed=0, device=device, progress=False).fit(x)
    return net, x, ou
