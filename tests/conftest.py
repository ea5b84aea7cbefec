import pytest
import torch

from dpnets import DPNet, TransferOperator
from dpnets.nn import MLP
from dpnets.systems import OrnsteinUhlenbeck


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


@pytest.fixture(scope="module")
def fitted():
    """A small OU trajectory, a DPNet (r = 3) fitted on it and its TransferOperator."""
    x = OrnsteinUhlenbeck(dt=0.2).sample(2000, seed=0)
    torch.manual_seed(0)
    net = DPNet(MLP(1, (16,), 3), epochs=2, batch_size=256, progress=False, seed=0).fit(x)
    return x, net, TransferOperator(net).fit(x)
