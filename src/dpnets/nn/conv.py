"""Convolutional encoders and decoders for image states (paper Sec. 5 "Ordered MNIST", App. F).

* :class:`ConvEncoder` — the feature map of App. F,
  ``Conv2d[16] -> ReLU -> MaxPool[2] -> Conv2d[32] -> ReLU -> MaxPool[2] -> Linear[r]``;
* :class:`ConvDecoder` — its mirror with transposed convolutions, for the Koopman
  autoencoder baselines (``Linear -> ReLU -> ConvTranspose2d[16] -> ReLU ->
  ConvTranspose2d[C]``, each transposed convolution doubling the resolution);
* :class:`ConvClassifier` — a supervised CNN, the "oracle" that labels forecast images.

All three are registered (:func:`dpnets.nn.registry.register`), so a fitted model using them
is rebuilt by :func:`dpnets.load` from the stored ``config``. The encoders accept batches of
grey images ``(B, H, W)`` or of multi-channel images ``(B, C, H, W)``; the image size is a
constructor argument.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from dpnets.nn.registry import register

__all__ = ["ConvEncoder", "ConvDecoder", "ConvClassifier"]


def _check_common(
    in_channels: int, image_size: Sequence[int], channels: Sequence[int], kernel_size: int
) -> tuple[int, int, int, list[int], int]:
    if int(in_channels) < 1:
        raise ValueError(f"in_channels must be >= 1, got {in_channels}")
    size = [int(s) for s in image_size]
    if len(size) != 2 or min(size) < 1:
        raise ValueError(f"image_size must be (height, width) with positive entries, got {size}")
    chans = [int(c) for c in channels]
    if len(chans) != 2 or min(chans) < 1:
        raise ValueError(f"channels must be two positive widths, got {list(channels)}")
    k = int(kernel_size)
    if k < 1 or k % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size}")
    if size[0] % 4 or size[1] % 4:
        raise ValueError(f"image_size {tuple(size)} must be divisible by 4 (two 2x2 max-poolings)")
    return int(in_channels), size[0], size[1], chans, k


def _as_images(x: torch.Tensor, in_channels: int, height: int, width: int) -> torch.Tensor:
    """``(B, H, W)`` (one channel) or ``(B, C, H, W)`` -> ``(B, C, H, W)``, checked."""
    if x.ndim == 3 and in_channels == 1:
        x = x[:, None]
    if x.ndim != 4 or tuple(x.shape[1:]) != (in_channels, height, width):
        expected = f"(B, {height}, {width}) or " if in_channels == 1 else ""
        raise ValueError(
            f"expected images of shape {expected}(B, {in_channels}, {height}, {width}), "
            f"got {tuple(x.shape)}"
        )
    return x


class _ConvTrunk(nn.Module):
    """Conv -> ReLU -> MaxPool -> Conv -> ReLU -> MaxPool -> flatten (shared by the CNNs)."""

    def __init__(self, in_channels: int, channels: list[int], kernel_size: int) -> None:
        super().__init__()
        pad = kernel_size // 2
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, channels[0], kernel_size, padding=pad),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(channels[0], channels[1], kernel_size, padding=pad),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


@register
class ConvEncoder(nn.Module):
    """CNN feature map of the paper's App. F (ordered MNIST).

    ``Conv2d[16] -> ReLU -> MaxPool[2] -> Conv2d[32] -> ReLU -> MaxPool[2] -> Linear[r]``
    with ``same`` padding, so a ``28 x 28`` image becomes ``32 x 7 x 7`` before the linear
    layer.

    Parameters
    ----------
    out_dim : int, default 5
        Feature dimension ``r``.
    in_channels : int, default 1
        Image channels ``C``.
    image_size : (int, int), default (28, 28)
        Height and width (each divisible by 4).
    channels : (int, int), default (16, 32)
        Widths of the two convolutions.
    kernel_size : int, default 5
        Odd convolution kernel size (padding ``kernel_size // 2``).

    Notes
    -----
    Inputs are ``(B, H, W)`` (for ``in_channels=1``) or ``(B, C, H, W)``; other shapes raise
    ``ValueError``. Output: ``(B, out_dim)``.

    Examples
    --------
    >>> import numpy as np
    >>> from dpnets import DPNet
    >>> images = np.random.default_rng(0).random((64, 28, 28), dtype=np.float32)  # (T, 28, 28)
    >>> net = DPNet(ConvEncoder(5), batch_size=16, epochs=1, seed=0, progress=False)
    >>> net.fit(images).transform(images).shape
    (64, 5)
    """

    #: not standardised by DPNet(standardize="auto"):
    #: images: pixels share one scale
    standardize_inputs = False

    def __init__(
        self,
        out_dim: int = 5,
        in_channels: int = 1,
        image_size: Sequence[int] = (28, 28),
        channels: Sequence[int] = (16, 32),
        kernel_size: int = 5,
    ) -> None:
        super().__init__()
        c, h, w, chans, k = _check_common(in_channels, image_size, channels, kernel_size)
        if int(out_dim) < 1:
            raise ValueError(f"out_dim must be >= 1, got {out_dim}")
        self.config = {
            "out_dim": int(out_dim),
            "in_channels": c,
            "image_size": [h, w],
            "channels": chans,
            "kernel_size": k,
        }
        self.in_channels, self.height, self.width = c, h, w
        self.out_dim = int(out_dim)
        self.trunk = _ConvTrunk(c, chans, k)
        self.linear = nn.Linear(chans[1] * (h // 4) * (w // 4), int(out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _as_images(x, self.in_channels, self.height, self.width)
        return self.linear(self.trunk(x))


@register
class ConvDecoder(nn.Module):
    """Mirror of :class:`ConvEncoder` with transposed convolutions (autoencoder baselines).

    ``Linear[32 * H/4 * W/4] -> ReLU -> ConvTranspose2d[16] (x2) -> ReLU ->
    ConvTranspose2d[C] (x2)``: each transposed convolution (stride 2) doubles the
    resolution, undoing one max-pooling of the encoder.

    Parameters
    ----------
    in_dim : int, default 5
        Latent dimension ``r``.
    out_channels : int, default 1
        Image channels ``C``.
    image_size : (int, int), default (28, 28)
        Height and width of the output (each divisible by 4).
    channels : (int, int), default (16, 32)
        The encoder's convolution widths (used in reverse order).
    kernel_size : int, default 5
        Odd kernel size of the transposed convolutions.
    squeeze : bool, default True
        With ``out_channels=1`` return ``(B, H, W)``; otherwise ``(B, C, H, W)``.
    """

    def __init__(
        self,
        in_dim: int = 5,
        out_channels: int = 1,
        image_size: Sequence[int] = (28, 28),
        channels: Sequence[int] = (16, 32),
        kernel_size: int = 5,
        squeeze: bool = True,
    ) -> None:
        super().__init__()
        c, h, w, chans, k = _check_common(out_channels, image_size, channels, kernel_size)
        if int(in_dim) < 1:
            raise ValueError(f"in_dim must be >= 1, got {in_dim}")
        self.config = {
            "in_dim": int(in_dim),
            "out_channels": c,
            "image_size": [h, w],
            "channels": chans,
            "kernel_size": k,
            "squeeze": bool(squeeze),
        }
        self.out_channels, self.height, self.width = c, h, w
        self.in_dim = int(in_dim)
        self.squeeze = bool(squeeze)
        self.chans = chans
        pad = k // 2
        self.linear = nn.Linear(int(in_dim), chans[1] * (h // 4) * (w // 4))
        self.net = nn.Sequential(
            nn.ReLU(),
            nn.ConvTranspose2d(chans[1], chans[0], k, stride=2, padding=pad, output_padding=1),
            nn.ReLU(),
            nn.ConvTranspose2d(chans[0], c, k, stride=2, padding=pad, output_padding=1),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if z.ndim != 2 or z.shape[1] != self.in_dim:
            raise ValueError(f"expected latents of shape (B, {self.in_dim}), got {tuple(z.shape)}")
        x = self.linear(z).reshape(z.shape[0], self.chans[1], self.height // 4, self.width // 4)
        x = self.net(x)
        if self.squeeze and self.out_channels == 1:
            return x[:, 0]
        return x


@register
class ConvClassifier(nn.Module):
    """Supervised CNN classifier (the "oracle" of the ordered MNIST experiment).

    The :class:`ConvEncoder` trunk followed by ``Linear[hidden] -> ReLU -> Dropout ->
    Linear[n_classes]``; ``forward`` returns the logits.

    Parameters
    ----------
    n_classes : int, default 5
    in_channels : int, default 1
    image_size : (int, int), default (28, 28)
    channels : (int, int), default (32, 64)
        Convolution widths.
    kernel_size : int, default 5
    hidden : int, default 128
        Width of the hidden dense layer.
    dropout : float, default 0.3
        Dropout probability before the output layer (training only).
    """

    #: not standardised by DPNet(standardize="auto"):
    #: images: pixels share one scale
    standardize_inputs = False

    def __init__(
        self,
        n_classes: int = 5,
        in_channels: int = 1,
        image_size: Sequence[int] = (28, 28),
        channels: Sequence[int] = (32, 64),
        kernel_size: int = 5,
        hidden: int = 128,
        dropout: float = 0.3,
    ) -> None:
        super().__init__()
        c, h, w, chans, k = _check_common(in_channels, image_size, channels, kernel_size)
        if int(n_classes) < 2:
            raise ValueError(f"n_classes must be >= 2, got {n_classes}")
        if int(hidden) < 1:
            raise ValueError(f"hidden must be >= 1, got {hidden}")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.config = {
            "n_classes": int(n_classes),
            "in_channels": c,
            "image_size": [h, w],
            "channels": chans,
            "kernel_size": k,
            "hidden": int(hidden),
            "dropout": float(dropout),
        }
        self.in_channels, self.height, self.width = c, h, w
        self.n_classes = int(n_classes)
        self.trunk = _ConvTrunk(c, chans, k)
        self.head = nn.Sequential(
            nn.Linear(chans[1] * (h // 4) * (w // 4), int(hidden)),
            nn.ReLU(),
            nn.Dropout(float(dropout)),
            nn.Linear(int(hidden), int(n_classes)),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _as_images(x, self.in_channels, self.height, self.width)
        return self.head(self.trunk(x))
