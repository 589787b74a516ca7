"""The shipped examples, their inputs and the shapes the tests run them on."""
import importlib

import numpy as np

EXAMPLES = {
    # name: (module, tensor inputs, odd shapes {axis: extent})
    "layernorm": ("layernorm", ("x", "w", "b"), {"M": 37, "N": 3001}),
    "rmsnorm": ("rmsnorm", ("x", "w"), {"M": 29, "N": 2049}),
    "softmax": ("softmax", ("x",), {"M": 33, "N": 1531}),
    "causal_softmax": ("causal_softmax", ("x",), {"M": 37, "N": 1531}),
    "swiglu": ("swiglu", ("g", "u"), {"M": 19, "N": 4101}),
    "geglu": ("geglu", ("g", "u"), {"M": 17, "N": 5003}),
}

# examples/attention.py, in the same form: cross attention (S != T) at odd extents, D a
# multiple of 8 as tensor cores take it. Not in EXAMPLES yet: the tests iterating EXAMPLES
# need shipped sm_80 and sm_90 schedules for each example and its .bwd, and run the
# gradient's shipped schedules and ptxas's large case at [M, N] sizes. The default schedule
# runs these on the CPU executor (tests/dsl/test_attention_reference.py).
ATTENTION_SHAPES = {"B": 1, "H": 2, "S": 37, "T": 53, "D": 24}
ATTENTION = {
    name: ("attention", ("q", "k", "v"), ATTENTION_SHAPES)
    for name in ("attention", "causal_attention", "sliding_window_attention",
                 "softcap_attention")
}

# examples/rotary.py, in the same form: S not a multiple of any tile, D = 24 (its half
# not a multiple of a bf16 vector of 8) and D = 96. Not in EXAMPLES, for the reason
# attention is not; tests/lowering/test_rotary_kernels.py runs them on the CPU executor
# (which compiles and assembles each program too, tests/conftest.py) and with ptxas.
ROTARY_SHAPES = ({"B": 2, "H": 3, "S": 37, "D": 24}, {"B": 1, "H": 2, "S": 37, "D": 96})
ROTARY = {
    "rotary": ("rotary", ("x", "cos", "sin"), ROTARY_SHAPES[0]),
    "rotary_llama": ("rotary", ("x",), ROTARY_SHAPES[0]),
    "rotary_interleaved": ("rotary", ("x", "cos", "sin"), ROTARY_SHAPES[0]),
}


def load(name):
    module, _, _ = EXAMPLES.get(name) or ATTENTION.get(name) or ROTARY[name]
    return getattr(importlib.import_module(module), name)


def random_inputs(algo, sizes, dtype, rng):
    out = {}
    for p in algo.tensor_params:
        shape = tuple(sizes[a] for a in p.axes)
        out[p.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype.numpy)
    return out
