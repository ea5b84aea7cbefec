"""GPU path (skipped without CUDA): TF32 kept out of the covariances, fp32 training on the GPU
recovers the Ornstein-Uhlenbeck eigenvalues, SchNet gives the same features on GPU and CPU."""

import numpy as np
import pytest
import torch
from helpers import fit_ou_dpnet

from dpnets import TransferOperator
from dpnets.scores import covariances, relaxed_score

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def tf32_on():
    """Turn TF32 on globally, as many training scripts do, and restore the setting."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision(old)


def test_covariances_are_fp32_accurate_with_global_tf32(tf32_on):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8192, 64, generator=g) * 3.0 + 1.0
    y = x + 0.1 * torch.randn(8192, 64, generator=g)
    cx, cy, cxy = covariances(x.cuda(), y.cuda())
    ref = covariances(x.double(), y.double())
    for a, b in zip((cx, cy, cxy), ref, strict=True):
        err = (a.double().cpu() - b).abs().max() / b.abs().max()
        assert err < 2e-6, err  # TF32 (10-bit mantissa) gives ~1e-3
    s_gpu = relaxed_score(x.cuda(), y.cuda(), gamma=0.01).item()
    s_ref = relaxed_score(x.double(), y.double(), gamma=0.01).item()
    assert abs(s_gpu - s_ref) < 1e-4 * abs(s_ref)
    assert torch.get_float32_matmul_precision() == "high"  # the user's setting is restored


def test_dpnet_trains_on_cuda_and_recovers_ou_eigenvalues(tf32_on):
    net, x, ou = fit_ou_dpnet(device="cuda")
    assert np.all(np.isfinite(net.history_["train_score"]))
    est = np.sort(np.abs(TransferOperator(net).fit(x).eig()))[::-1]
    ref = ou.eigvals(5)  # r = 4 learned features and the constant
    np.testing.assert_allclose(est[:4], ref[:4], rtol=0.05)
    np.testing.assert_allclose(est[4], ref[4], rtol=0.10)


def test_checkpoint_written_on_cuda_resumes_on_cuda(tmp_path):
    """Checkpoints hold the CPU and the CUDA RNG states; resuming on the GPU continues."""
    from dpnets import DPNet
    from dpnets.nn import MLP
    from dpnets.systems import OrnsteinUhlenbeck

    x = OrnsteinUhlenbeck(dt=0.1).sample(5000, seed=0)

    def make():
        torch.manual_seed(0)
        return DPNet(MLP(1, (16,), 3), epochs=4, seed=0, device="cuda", progress=False)

    ref = make().fit(x[:5000])

    class Stop(Exception):
        pass

    def stop(epoch, model):
        if epoch == 1:
            raise Stop

    with pytest.raises(Stop):
        make().fit(x[:5000], checkpoint=tmp_path / "ck.pt", callback=stop)
    res = make().fit(x[:5000], checkpoint=tmp_path / "ck.pt", resume=True)
    np.testing.assert_allclose(res.transform(x[:100]), ref.transform(x[:100]), atol=1e-5)


def test_schnet_same_features_on_cuda_and_cpu():
    pytest.importorskip("torch_geometric")
    from dpnets.nn.schnet import SchNetEncoder

    torch.manual_seed(0)
    enc = SchNetEncoder([6, 6, 8, 7, 6, 6, 6, 8, 7, 6], out_dim=16).eval()
    x = torch.as_tensor(np.random.default_rng(0).normal(scale=1.6, size=(64, 10, 3))).float()
    with torch.no_grad():
        a = enc(x)
        b = enc.cuda()(x.cuda()).cpu()
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_bf16_autocast_and_batchwise_reading_on_cuda(tmp_path, monkeypatch):
    """Issue 17 on the GPU: bf16 autocast for the encoder keeps the OU timescale; states
    read batch by batch from a memory-mapped file (pinned host memory) train exactly like
    the same states held on the device."""
    import dpnets.states
    from dpnets import DPNet
    from dpnets.nn import MLP
    from dpnets.systems import OrnsteinUhlenbeck

    x = OrnsteinUhlenbeck(theta=1.0, dt=0.2).sample(20000, seed=0).astype(np.float32)

    def fit(data, **kw):
        torch.manual_seed(0)
        net = DPNet(MLP(1, (32,), 3), epochs=3, seed=0, device="cuda", progress=False, **kw)
        return net.fit(data)

    t = TransferOperator(fit(x, autocast="bf16")).fit(x).implied_timescales()[1]
    assert abs(t - 5.0) < 0.25  # 1 / (theta * dt) = 5 frames
    np.save(tmp_path / "x.npy", x)
    monkeypatch.setattr(dpnets.states, "OUT_OF_CORE_BYTES", 0)
    mapped = fit(np.load(tmp_path / "x.npy", mmap_mode="r"))
    resident = fit(x)
    np.testing.assert_allclose(mapped.transform(x[:100]), resident.transform(x[:100]), atol=1e-5)


def test_seeded_fit_on_cuda_is_bit_identical_whatever_the_global_rng():
    """The seed draws the initial weights, the split, the batches and dropout inside fit, on
    the GPU too: two fits with torch's global (CPU and CUDA) RNG moved in between agree bit
    for bit, and the default encoder is sized to the data."""
    from dpnets import DPNet
    from dpnets.systems import OrnsteinUhlenbeck

    x = OrnsteinUhlenbeck(dt=0.1).sample(20_000, seed=0)
    torch.manual_seed(1)
    a = DPNet(lag=2, epochs=3, seed=0, device="cuda", progress=False).fit(x)
    torch.manual_seed(2)
    torch.cuda.manual_seed_all(3)
    torch.rand(5, device="cuda")
    b = DPNet(lag=2, epochs=3, seed=0, device="cuda", progress=False).fit(x)
    assert np.array_equal(a.transform(x), b.transform(x))
    assert a.score(x) == b.score(x) and np.isfinite(a.score(x))
