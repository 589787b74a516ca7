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


def load(name):
    module, _, _ = EXAMPLES[name]
    return getattr(importlib.import_module(module), name)


def random_inputs(algo, sizes, dtype, rng):
    out = {}
    for p in algo.tensor_params:
        shape = tuple(sizes[a] for a in p.axes)
        out[p.name] = rng.standard_normal(shape).astype(np.float32).astype(dtype.numpy)
    return out
