"""Encoders (feature maps) for DPNets: any ``torch.nn.Module`` mapping a batch of states to
``(batch, r)`` works; these are ready-made ones that :func:`dpnets.load` can rebuild."""

from dpnets.nn.conv import ConvClassifier, ConvDecoder, ConvEncoder
from dpnets.nn.embeddings import FourierEmbedding, PeriodicMLP
from dpnets.nn.mlp import ACTIVATIONS, MLP, ProjectedMLP
from dpnets.nn.registry import build, describe, register
from dpnets.nn.schnet import SchNetEncoder

__all__ = [
    "MLP",
    "ProjectedMLP",
    "ACTIVATIONS",
    "FourierEmbedding",
    "PeriodicMLP",
    "ConvEncoder",
    "ConvDecoder",
    "ConvClassifier",
    "SchNetEncoder",
    "register",
    "build",
    "describe",
]
