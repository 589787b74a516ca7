"""GPU twin of test_torch_backend_dynamic.py: dynamic shapes through the backend on CUDA
tensors (fp32, so that a float64 eager reference bounds plait's error tightly)."""
import pytest

torch = pytest.importorskip("torch")

import plait.runtime.torch_backend as backend  # noqa: E402
from plait.runtime import driver  # noqa: E402

from backend_models import MLP, Block  # noqa: E402
from dynamic_checks import check_lengths  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not driver.gpu_available(), reason="no CUDA GPU")]

TOL = dict(rtol=1e-3, atol=1e-4)     # fp32 kernels (reduction orders differ) against float64


@pytest.fixture(autouse=True)
def _fresh(fresh_backend):
    torch.manual_seed(0)


def test_block_at_three_sequence_lengths_on_gpu():
    first, _ = check_lengths(Block(64, 4, 96).cuda(),
                             lambda t: torch.randn(2, t, 64, device="cuda"), (37, 64, 101), TOL)
    assert first[1].get("regions_specialized", 0) > 0, first[1]


def test_mark_dynamic_on_gpu():
    from dynamic_checks import step
    import copy
    model = MLP(48, 80, 24).cuda()
    compiled = torch.compile(model, backend="plait")
    ref = copy.deepcopy(model).double()
    for n in (33, 70):
        d = step(compiled, ref, torch.randn(n, 48, device="cuda"), TOL, dynamic_dims=(0,))
        assert d.get("region_calls", 0) >= 2 and d.get("fallback_calls", 0) == 0, (n, d)
        assert d.get("regions_specialized", 0) >= 2, (n, d)
