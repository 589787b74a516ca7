"""plait's algorithm language: named-axis tensors traced into an algorithm graph."""
from .algorithm import Algorithm, Param, algorithm
from .dtypes import DType, dtype_of, promote, promotion_table, round_to
from .errors import PlaitError, SourceLoc
from .gather import scatter_add, take
from .graph import AlgorithmGraph
from .integers import (bitwise_and, bitwise_not, bitwise_or, bitwise_xor, floor_divide,
                       left_shift, remainder, right_shift)
from .library import gelu, gelu_tanh, log_softmax, logsumexp, mean, relu, silu, softmax, var
from .node import OPS, Node
from .ops import (abs, blocked, cos, erf, exp, exp2, log, log2, logical_and, logical_not,
                  logical_or, max, maximum, min, minimum, name, permute, rotate_half, rsqrt,
                  sigmoid, sin, sqrt, stop_gradient, sum, tanh)
from .counter_rng import dropout, philox, rand
from .reference import bind_sizes, evaluate
from .cumulative import cummax, cummin, cumprod, cumsum
from .scan_generic import scan
from .reshape import concat, merge_axes, pad, shift, slice, split_axis
from .select import argmax, argmin, max_with_index, min_with_index
from .sort import sort
from .topk import topk
from .tensor import Tensor, TensorSpec, broadcast, cast, index, size, where

bf16, fp16, fp32 = DType.BF16, DType.FP16, DType.FP32
fp8_e4m3, fp8_e5m2 = DType.FP8_E4M3, DType.FP8_E5M2

__all__ = [
    "Algorithm", "AlgorithmGraph", "DType", "Node", "OPS", "Param", "PlaitError", "SourceLoc",
    "Tensor", "TensorSpec", "abs", "algorithm", "bind_sizes", "blocked", "broadcast", "cast",
    "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "cos", "floor_divide", "index",
    "left_shift", "remainder", "right_shift",
    "dtype_of", "erf", "evaluate", "exp", "exp2", "gelu", "gelu_tanh", "log", "log2",
    "log_softmax", "logical_and", "logical_not", "logical_or", "logsumexp", "max", "maximum",
    "mean", "min", "minimum", "name", "permute", "promote", "promotion_table", "relu", "rotate_half", "round_to", "rsqrt",
    "sigmoid", "silu", "sin", "size", "softmax", "sqrt", "stop_gradient", "sum", "tanh", "var",
    "where", "take", "scatter_add", "rand", "dropout", "philox", "argmax", "argmin",
    "max_with_index", "min_with_index", "sort", "topk", "cumsum", "cumprod", "cummax", "cummin", "scan",
    "split_axis", "merge_axes", "slice", "pad", "concat", "shift",
    "bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2",
]
