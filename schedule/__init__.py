"""Schedules: how an algorithm's kernels map onto a GPU (YAML and Python forms)."""
from .model import AxisBlock, DTypePolicy, KernelSchedule, Schedule

__all__ = ["AxisBlock", "DTypePolicy", "KernelSchedule", "Schedule"]
