import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Small test problems run fastest on one thread, and a busy 2-core machine otherwise
    oversubscribes (seen: 5 s with 1 thread against 311 s with 2 under load)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same torch RNG state (numpy uses explicit Generators)."""
    torch.manual_seed(0)
    yield
