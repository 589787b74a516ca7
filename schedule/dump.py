"""Writing a schedule back out, as YAML or as Python; both read back to an equal Schedule.

    >>> s = Schedule.from_dict({"algorithm": "layernorm", "grid": {"M": 1},
    ...                         "block": {"N": {"threads": 256, "vector": 8}}})
    >>> print(dump_schedule(s), end="")
    algorithm: layernorm
    grid: {M: 1}
    block: {N: {threads: 256, vector: 8}}
    >>> print(to_python(s), end="")
    from plait.schedule import Schedule
    <BLANKLINE>
    schedule = Schedule.from_dict({
        'algorithm': 'layernorm',
        'grid': {'M': 1},
        'block': {'N': {'threads': 256, 'vector': 8}},
    })
"""
from __future__ import annotations

import yaml

from .model import Schedule


class _Flow(dict):
    """A mapping written on one line: `grid: {M: 1}`."""


class _FlowList(list):
    """A list written on one line: `save: [mu, rstd]`."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(
    _Flow, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items(),
                                               flow_style=True))
_Dumper.add_representer(
    _FlowList, lambda d, data: d.represent_sequence("tag:yaml.org,2002:seq", data,
                                                    flow_style=True))


def dump_schedule(schedule: Schedule) -> str:
    """The YAML form: one line per top-level key, one line per kernel under `kernels:`."""
    out = {}
    for key, value in schedule.to_dict().items():
        if key == "kernels":
            out[key] = {name: _flow(spec) for name, spec in value.items()}
        else:
            out[key] = _flow(value)
    return yaml.dump(out, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=1 << 16, allow_unicode=True)


def _flow(value):
    if isinstance(value, dict):
        return _Flow((k, _flow(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return _FlowList(_flow(v) for v in value)
    return value


def to_python(schedule: Schedule) -> str:
    """Python source that defines `schedule`, the same model as the YAML form."""
    lines = ["from plait.schedule import Schedule", "", "schedule = Schedule.from_dict({"]
    for key, value in schedule.to_dict().items():
        if key == "kernels":
            lines.append(f"    {key!r}: {{")
            lines += [f"        {name!r}: {spec!r}," for name, spec in value.items()]
            lines.append("    },")
        else:
            lines.append(f"    {key!r}: {value!r},")
    lines.append("})")
    return "\n".join(lines) + "\n"
