"""Tier 2 twin of tests/lowering/test_streaming.py: the streamed attention kernels on the
GPU, against float64 attention computed from the same inputs, at odd shapes and with the
masks that stream (causal, sliding window with soft-capping, fully masked rows)."""
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.gpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "lowering"))
import plait  # noqa: E402
from test_streaming import CASES, _extra, _reference, _shapes  # noqa: E402

BIGGER = [(CASES[0][0], {"B": 2, "H": 3, "S": 1000, "T": 1337, "D": 128, "E": 128}),
          (CASES[2][0], {"B": 1, "H": 2, "S": 1000, "T": 1000, "D": 64, "E": 64}),
          (CASES[0][0], {"B": 1, "H": 2, "S": 384, "T": 1000, "D": 96, "E": 96})]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("algo,sizes", CASES + BIGGER,
                         ids=lambda c: getattr(c, "name", None) or str(c.get("S", "")))
def test_streamed_attention_on_the_gpu(algo, sizes, dtype):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=gen, device="cuda").to(dtype)
               for shape in _shapes(sizes).values())
    scale = sizes["D"] ** -0.5
    extra = _extra(algo, sizes)
    out = plait.run(algo, q, k, v, *(torch.from_numpy(a).cuda() for a in extra.values()),
                    scale=scale)
    ref = _reference(algo.name, *(t.cpu().double().numpy() for t in (q, k, v)), scale,
                     extra=extra)
    got = out.cpu().double().numpy()
    step = 2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11
    assert np.abs(got - ref).max() < 4 * step * max(1.0, np.abs(ref).max())
