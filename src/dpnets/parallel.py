"""Independent jobs in worker processes: the one process pool of dpnets.

:func:`run_jobs` runs the experiments' fits (the alanine r x lag sweep, the Langevin seeds, the
ordered MNIST fits) and the alanine simulations. With ``workers=1`` the jobs run in this
process, one after the other; otherwise in ``workers`` processes started with ``spawn`` (safe
with CUDA and threads; several can share one GPU), each limited to ``threads`` torch and BLAS
threads before its first job. A leaf module: it imports no other dpnets module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["run_jobs", "limit_threads"]

T = TypeVar("T")


def limit_threads(threads: int) -> None:
    """Limit this process to ``threads`` torch threads and, when threadpoolctl is installed,
    ``threads`` BLAS/OpenMP threads (numpy, scipy)."""
    import torch

    torch.set_num_threads(int(threads))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional (a dependency of scikit-learn)
        return
    threadpool_limits(int(threads))


def _start_worker(
    threads: int | None, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]
) -> None:
    """The first thing every worker process does: the thread limit, then ``initializer``."""
    if threads is not None:
        limit_threads(threads)
    if initializer is not None:
        initializer(*initargs)


def _stop(pool: Any, futures: Sequence[Any]) -> None:
    """Cancel the jobs not started and end the worker processes (their results are unwanted)."""
    for fut in futures:
        fut.cancel()
    terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()


def run_jobs(
    jobs: Sequence[Callable[[], T]],
    *,
    workers: int = 1,
    threads: int | None = None,
    ordered: bool = True,
    initializer: Callable[..., Any] | None = None,
    initargs: tuple[Any, ...] = (),
) -> Iterator[tuple[int, T]]:
    """Run ``jobs`` and yield ``(index, result)`` for each, ``index`` its position in ``jobs``.

    Parameters
    ----------
    jobs : sequence of callables without arguments
        With ``workers > 1`` they must pickle: module-level functions, or
        :func:`functools.partial` of them with picklable arguments.
    workers : int, default 1
        Processes running jobs at once. With 1, the jobs run in this process, in order (no
        process is started, ``threads`` and ``initializer`` are not applied).
    threads : int, optional
        Torch and BLAS threads of each worker process (:func:`limit_threads`), set before its
        first job; None keeps their defaults.
    ordered : bool, default True
        Yield in the order of ``jobs``; False: as the jobs finish (so that the caller can
        report each one at once). In this process the two orders are the same.
    initializer, initargs
        Called as ``initializer(*initargs)`` in each worker process after the thread limit
        (to load data once per process).

    Yields
    ------
    (int, object)
        The job's index and its result.

    An exception of a job is raised here as soon as the job has failed (in either order). On
    any error, in a job or in the caller while it consumes the results (``KeyboardInterrupt``
    included), the jobs not started are cancelled and the worker processes are ended before
    the error propagates.
    """
    jobs = list(jobs)
    workers = int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1:
        for index, job in enumerate(jobs):
            yield index, job()
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(threads, initializer, tuple(initargs)),
    )
    futures: list[Any] = []
    finished = False
    try:
        futures = [pool.submit(job) for job in jobs]
        position = {fut: index for index, fut in enumerate(futures)}
        waiting: dict[int, Any] = {}  # finished out of order (ordered=True)
        following = 0
        for fut in as_completed(futures):
            result = fut.result()  # a failed job raises here as soon as it has failed
            if not ordered:
                yield position[fut], result
                continue
            waiting[position[fut]] = result
            while following in waiting:
                yield following, waiting.pop(following)
                following += 1
        finished = True
    finally:
        if not finished:
            _stop(pool, futures)
        pool.shutdown(wait=True, cancel_futures=True)
