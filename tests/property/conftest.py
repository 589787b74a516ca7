"""Hypothesis profiles for the property tests.

short (default, CPU tier): fixed seed (derandomize) and few examples, so the folder runs
  in about a minute and the same cases run on every machine.
long (PLAIT_PROPERTY_PROFILE=long): many random examples and no deadline, for bug hunts;
  PLAIT_PROPERTY_EXAMPLES overrides its example count.
"""
import os
import sys

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# Lowering a random program takes a good fraction of a second (deadlines would only flake);
# no example database, so nothing is written into the worktree (failures print a repro blob).
_common = dict(deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])
settings.register_profile("short", derandomize=True, max_examples=12, print_blob=True, **_common)
settings.register_profile("long", max_examples=int(os.environ.get("PLAIT_PROPERTY_EXAMPLES", 400)),
                          print_blob=True, **_common)
settings.load_profile(os.environ.get("PLAIT_PROPERTY_PROFILE", "short"))


def scaled(n: int) -> int:
    """`n` examples in the short profile, the profile's own count in the long one."""
    return n if settings().derandomize else settings().max_examples
