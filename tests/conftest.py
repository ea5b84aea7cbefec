import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_torch():
    """Every test starts from the same torch RNG state (numpy uses explicit Generators)."""
    torch.manual_seed(0)
    yield
