"""dpnets: Deep Projection Networks for dynamical systems."""

__version__ = "0.1.0"
