"""Saving versus recomputing, through the compiled kernels (CPU executor), as a schedule says."""
import numpy as np

import plait
from ad_cases import inputs_for, layernorm_named
from plait.autodiff import forward_with_saved, grad, vjp
from plait.autodiff.torch_bridge import saved_by_schedule
from plait.schedule import Schedule


def test_saved_statistics_flow_through_the_kernels(rng):
    inputs = {k: v.astype(np.float32) for k, v in inputs_for(layernorm_named, rng).items()}
    x, w, b = inputs["x"], inputs["w"], inputs["b"]
    dy = rng.standard_normal(x.shape).astype(np.float32)
    out, rstd, mu = plait.run(forward_with_saved(layernorm_named, ("rstd", "mu")), x, w, b,
                              device="cpu").values()
    assert rstd.shape == mu.shape == (x.shape[0],)
    reading = plait.run(vjp(layernorm_named, save=("rstd", "mu")), x, w, b, dout=dy,
                        rstd=rstd, mu=mu, device="cpu")
    recomputing = plait.run(grad(layernorm_named), x, w, b, dout=dy, device="cpu")
    for k in recomputing:
        np.testing.assert_allclose(reading[k], recomputing[k], rtol=2e-5, atol=2e-5)


def test_the_backward_schedule_decides_what_is_saved(tmp_path):
    assert saved_by_schedule(layernorm_named, None) == ()      # no file: recompute
    schedule = Schedule.from_dict({"algorithm": "layernorm_named.bwd", "save": ["rstd"],
                                   "grid": {"M": 8}})
    assert saved_by_schedule(layernorm_named, schedule) == ("rstd",)
    path = tmp_path / "layernorm_named.bwd.yaml"
    path.write_text("algorithm: layernorm_named.bwd\nsave: [rstd, mu]\n")
    assert saved_by_schedule(layernorm_named, str(path)) == ("rstd", "mu")
