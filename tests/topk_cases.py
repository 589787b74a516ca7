"""What the top-k tests share (CPU and GPU): one algorithm per (k, dtype) taking both ends."""
from plait.dsl import Tensor, algorithm, topk

_ALGORITHMS = {}


def top_of(k: int, dtype: str = "fp32"):
    """The k largest of each row (values, at) and the k smallest (low, low_at)."""
    if (k, dtype) not in _ALGORITHMS:
        @algorithm
        def top(x: Tensor["M", "N", dtype]):
            values, at = topk(x, k, over="N", into="K")
            low, low_at = topk(x, k, over="N", into="J", largest=False)
            return {"values": values, "at": at, "low": low, "low_at": low_at}
        _ALGORITHMS[k, dtype] = top
    return _ALGORITHMS[k, dtype]
