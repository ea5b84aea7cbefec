"""Streaming float64 moments: covariances accumulated over chunks of samples.

The least-squares estimators of dpnets (:class:`dpnets.TransferOperator`,
:class:`dpnets.Generator`, DMD and EDMD) need only sample counts, means and second moments
of their features, never the ``n x r`` features themselves. :class:`Moments` accumulates
them chunk by chunk, so a fit holds one chunk of features at a time whatever the number of
samples, and data that arrive in pieces (``partial_fit``) add to the same statistics.

Each block of variables (``"x"``, ``"y"``, ...) is shifted by a *pilot*, the mean of the
first chunk it was given, before its sums and products are taken: a large common offset
(raw coordinates ``+ 1e6``) then does not cancel the covariances away, as it would in
``sum(x x^T) / n - mean mean^T`` (the input standardisation of :class:`dpnets.DPNet` does
the same for its means and variances).

Values whose float64 products cannot be represented (features of magnitude ``1e300``, whose
squares overflow, or ``1e-300``, whose squares fall below the normal range and lose their
digits) are refused by :meth:`Moments.cov` with a ``ValueError`` naming the magnitude: the
estimators that use their features as given (DMD, ``TransferOperator`` on a feature map)
cannot rescale them without changing the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch

__all__ = ["Moments", "FIT_CHUNK"]

#: rows of states per chunk in the chunked fits (features of one chunk are held at a time)
FIT_CHUNK = 65536


class Moments:
    """Float64 counts, means and second moments of blocks of variables, over chunks.

    Parameters
    ----------
    products : iterable of (str, str)
        Pairs of block names whose cross moments ``E[a b^T]`` are accumulated, e.g.
        ``[("x", "x"), ("x", "y")]``. Means are kept for every block given to
        :meth:`update`.

    Attributes
    ----------
    count : int
        Number of samples seen.
    weight : float
        Sum of the sample weights (``count`` without weights); expectations are weighted
        averages, ``sum_k w_k f_k / weight``.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(10.0)[:, None] + 1e6
    >>> m = Moments([("x", "x")])
    >>> for part in (x[:4], x[4:]):
    ...     m.update({"x": part})
    >>> float(m.mean("x")[0]), float(m.cov("x", "x")[0, 0])
    (1000004.5, 8.25)
    """

    def __init__(self, products: Iterable[tuple[str, str]]) -> None:
        self.products = tuple((str(a), str(b)) for a, b in products)
        self.count = 0
        self.weight = 0.0
        self._pilot: dict[str, np.ndarray] = {}
        self._sum: dict[str, np.ndarray] = {}
        self._prod: dict[tuple[str, str], np.ndarray] = {}
        self._absmax: dict[str, np.ndarray] = {}  # the largest |value| of each variable

    def update(self, blocks: Mapping[str, np.ndarray], weights: np.ndarray | None = None) -> None:
        """Add a chunk of samples.

        Parameters
        ----------
        blocks : mapping of str to array (m, k_block)
            The chunk's values of each block (the same ``m`` rows for all; 1-D arrays are one
            variable), converted to float64. Every block named in ``products`` must be given.
        weights : array (m,), optional
            Non-negative sample weights (default 1).

        Raises
        ------
        ValueError
            If the blocks differ in their number of rows, a block changes its number of
            variables between chunks, or a block of ``products`` is missing.
        """
        arrays = {name: _as_2d(a) for name, a in blocks.items()}
        rows = {a.shape[0] for a in arrays.values()}
        if len(rows) != 1:
            raise ValueError(f"blocks must have the same number of rows, got {sorted(rows)}")
        m = rows.pop()
        missing = {n for p in self.products for n in p} - set(arrays)
        if missing:
            raise ValueError(f"missing block(s) {sorted(missing)} of the accumulated products")
        if m == 0:
            return
        w = None
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64).reshape(-1)
            if w.shape[0] != m:
                raise ValueError(f"weights has {w.shape[0]} entries for a chunk of {m} rows")
        shifted = {}
        for name, a in arrays.items():
            pilot = self._pilot.get(name)
            if pilot is None:
                pilot = self._pilot[name] = a.mean(axis=0)
                self._sum[name] = np.zeros_like(pilot)
            elif pilot.shape[0] != a.shape[1]:
                raise ValueError(
                    f"block {name!r} has {a.shape[1]} variables in this chunk and "
                    f"{pilot.shape[0]} before"
                )
            d = a - pilot
            shifted[name] = d
            top = np.abs(a).max(axis=0)
            self._absmax[name] = (
                top if name not in self._absmax else np.maximum(self._absmax[name], top)
            )
            self._sum[name] += d.sum(axis=0) if w is None else w @ d
        for a, b in self.products:
            da = shifted[a] if w is None else shifted[a] * w[:, None]
            part = _at_b(da, shifted[b])
            key = (a, b)
            self._prod[key] = part if key not in self._prod else self._prod[key] + part
        self.count += m
        self.weight += float(m) if w is None else float(w.sum())

    @classmethod
    def combine(
        cls, parts: Sequence[Moments], counts: Sequence[float], like: Moments | None = None
    ) -> Moments:
        """The moments of the samples of ``parts`` taken ``counts[j]`` times each.

        Sums and products are linear in the samples, so the moments of a bootstrap
        resample of pieces (trajectories drawn with replacement) are a weighted sum of the
        pieces' own, without reading the samples again (:mod:`dpnets.validation`). Each
        part's sums are moved from its pilot to the first used part's pilot
        (``sum(a - q) = sum(a - p) + w (p - q)``, and the products likewise), so the offset
        protection of :meth:`update` is kept.

        Parameters
        ----------
        parts : sequence of Moments
            Moments of the same products and blocks (parts with no samples are skipped).
        counts : sequence of float
            Non-negative multiplicity of each part.
        like : Moments, optional
            Take the pilots from these moments (of the same blocks) instead of the first
            used part: parts already moved to them combine without any correction, so moving
            each piece once to a common pilot makes repeated combinations cheap.

        Returns
        -------
        Moments
            Equal to one :class:`Moments` updated with every sample of every part, repeated
            as counted (to round-off).
        """
        if len(parts) != len(counts):
            raise ValueError(f"{len(parts)} parts but {len(counts)} counts")
        out = cls(parts[0].products if parts else ())
        if like is not None and like._pilot:
            out._pilot = {k: v.copy() for k, v in like._pilot.items()}
            out._sum = {k: np.zeros_like(v) for k, v in like._pilot.items()}
        for part, c in zip(parts, counts, strict=True):
            c = float(c)
            if not c >= 0:
                raise ValueError(f"counts must be non-negative, got {c}")
            if c == 0 or part.count == 0:
                continue
            if part.products != out.products:
                raise ValueError("parts accumulate different products")
            if not out._pilot:
                out._pilot = {k: v.copy() for k, v in part._pilot.items()}
                out._sum = {k: np.zeros_like(v) for k, v in part._pilot.items()}
            elif set(part._pilot) != set(out._pilot):
                raise ValueError("parts hold different blocks")
            delta = {k: part._pilot[k] - out._pilot[k] for k in out._pilot}
            moving = {k: bool(np.any(d)) for k, d in delta.items()}
            w = part.weight
            for k, s in part._sum.items():
                out._sum[k] += c * (s + w * delta[k]) if moving[k] else c * s
            for (a, b), p in part._prod.items():
                if moving[a] or moving[b]:
                    p = (
                        p
                        + np.outer(delta[a], part._sum[b])
                        + np.outer(part._sum[a], delta[b])
                        + w * np.outer(delta[a], delta[b])
                    )
                out._prod[(a, b)] = c * p + out._prod.get((a, b), 0.0)
            out.count += int(round(c * part.count))
            out.weight += c * w
            for k, v in part._absmax.items():
                out._absmax[k] = v if k not in out._absmax else np.maximum(out._absmax[k], v)
        return out

    def _check(self, *names: str) -> None:
        if self.weight <= 0:
            raise ValueError("no samples (or zero total weight) have been accumulated")
        for name in names:
            if name not in self._pilot:
                raise KeyError(f"no block {name!r} has been accumulated")

    def dim(self, name: str) -> int:
        """Number of variables of block ``name``."""
        self._check(name)
        return int(self._pilot[name].shape[0])

    def mean(self, name: str) -> np.ndarray:
        """Weighted mean ``E[a]`` of block ``name``, float64 (k,)."""
        self._check(name)
        return self._pilot[name] + self._sum[name] / self.weight

    def cov(self, a: str, b: str) -> np.ndarray:
        """Centred cross-covariance ``E[(a - E a)(b - E b)^T]``, float64 (k_a, k_b).

        Raises ``ValueError`` naming the magnitude when the products of the two blocks'
        values overflow float64 or fall below its normal range (module docstring)."""
        self._check(a, b)
        if (a, b) not in self._prod:
            if (b, a) in self._prod:
                return self.cov(b, a).T
            raise KeyError(f"the product ({a!r}, {b!r}) is not accumulated")
        self._check_range(a, b)
        da = self._sum[a] / self.weight
        db = self._sum[b] / self.weight
        return self._prod[(a, b)] / self.weight - np.outer(da, db)

    def _check_range(self, a: str, b: str) -> None:
        """Refuse products of values whose scale float64 cannot hold (a ``ValueError``
        naming the scale): values so large that their products overflow (``1e300 x``), or
        so small that their products fall below the normal range and lose their digits
        (``1e-300 x``); the moments would otherwise be inf, or silently zero."""
        ma, mb = self._absmax.get(a), self._absmax.get(b)
        if ma is None or mb is None:
            return
        ma, mb = ma[ma > 0], mb[mb > 0]  # variables that are zero: their moments are exact
        if ma.size == 0 or mb.size == 0:
            return
        la, lb = np.log2(ma), np.log2(mb)
        high = float(la.max() + lb.max())
        low = float(la.min() + lb.min())
        if high + np.log2(max(self.weight, 1.0)) < 1022.0 and low > -1022.0:
            return
        over = high + np.log2(max(self.weight, 1.0)) >= 1022.0
        names = [_BLOCKS.get(n, f"block {n!r}") for n in dict.fromkeys((a, b))]
        largest = float(max(ma.max(), mb.max())) if over else float(min(ma.min(), mb.min()))
        problem = "overflow" if over else "underflow (lose their digits)"
        raise ValueError(
            f"values of magnitude {largest:.3g} in the {' and '.join(names)}: their float64 "
            f"products {problem}, so the covariances cannot be computed; this estimator uses "
            "its features as given: rescale the data to a moderate scale (e.g. divide by "
            "their standard deviation; DPNet and EDMD's Chebyshev dictionary do so "
            "themselves)"
        )

    def second(
        self,
        a: str,
        b: str,
        shift_a: np.ndarray | float = 0.0,
        shift_b: np.ndarray | float = 0.0,
    ) -> np.ndarray:
        """Second moment ``E[(a - shift_a)(b - shift_b)^T]`` about given shifts (uncentred for
        zero shifts), float64 (k_a, k_b); computed as the covariance plus the outer product
        of the shifted means, so it stays accurate for any offset of the data."""
        return self.cov(a, b) + np.outer(self.mean(a) - shift_a, self.mean(b) - shift_b)


#: readable names of the blocks the estimators accumulate (in the errors of ``cov``)
_BLOCKS = {
    "x": "features",
    "y": "features of the lagged states",
    "t": "lagged states",
    "s": "states",
}


def _at_b(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a^T b`` in float64 through torch's BLAS (no copy of either).

    The chunked fits alternate feature maps in torch with these products; numpy's own BLAS
    threads and torch's then contend for the cores at every chunk (several times slower
    on a loaded machine), so the products run in torch's thread pool as well.
    """
    return (torch.from_numpy(a).T @ torch.from_numpy(b)).numpy()


def _as_2d(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 1:
        return a[:, None]
    if a.ndim != 2:
        raise ValueError(f"a block must be a 1-D or 2-D array (rows, variables), got {a.shape}")
    return a
