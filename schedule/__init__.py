"""Schedules: how an algorithm's kernels map onto a GPU (YAML and Python forms).

    >>> s = parse_schedule("algorithm: layernorm\\ngrid: {M: 1}\\nblock: {N: {threads: 256, vector: 8}}\\n")
    >>> parse_schedule(s.to_yaml()) == s
    True
"""
from .default import default_kernel_schedule, vector_width
from .dump import dump_schedule, to_python
from .errors import ScheduleError
from .loader import load_schedule, parse_schedule
from .lookup import arch_chain, arch_of_capability, find_schedule, shipped_folder
from .model import AxisBlock, DTypePolicy, KernelSchedule, Schedule
from .validate import validate

__all__ = [
    "AxisBlock", "DTypePolicy", "KernelSchedule", "Schedule", "ScheduleError",
    "arch_chain", "arch_of_capability", "default_kernel_schedule", "dump_schedule",
    "find_schedule", "load_schedule", "parse_schedule", "shipped_folder", "to_python",
    "validate", "vector_width",
]
