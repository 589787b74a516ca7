"""The IR as deterministic text (`plait compile --dump DIR` writes it as stage `ir`):

    kernel ln (simt on sm_90a) grid(M:1) threads 256
      arg x : input bf16[M,N]
      %0 = load buffer=x : bf16[M,N] blocked<N=2x256x4; 256>
      %5, %6 = for %1, %2 axis=N step=1 {
        ^(%3, %4):
        ...
        yield %7, %8
      } : fp32[M] ..., fp32[M] ...
"""
from __future__ import annotations

from .nodes import Block, Kernel, Op


def kernel_text(k: Kernel) -> str:
    grid = ", ".join(f"{a}:{t}" for a, t in k.grid) or "-"
    lines = [f"kernel {k.name} ({k.path} on {k.target}) grid({grid}) threads {k.threads}"]
    lines += [f"  attr {key} = {value.text() if hasattr(value, 'text') else _show(value)}"
              for key, value in k.attrs]
    lines += [f"  arg {b.name} : {b.role} {b.dtype}[{','.join(b.axes)}]" for b in k.buffers]
    lines += [f"  arg {name} : scalar {dt}" for name, dt in k.scalars]
    _block(k, k.body, 1, lines)
    return "\n".join(lines) + "\n"


def _values(ids) -> str:
    return ", ".join(f"%{v}" for v in ids)


def _attrs(op: Op) -> str:
    return " ".join(f"{key}={_show(value)}" for key, value in op.attrs)


def _show(value) -> str:
    if isinstance(value, tuple):
        return "(" + ",".join(_show(v) for v in value) + ")"
    return str(value)


def _block(k: Kernel, block: Block, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    if block.params:
        lines.append(f"{pad}^({_values(block.params)}):")
    for op in block.ops:
        head = f"{_values(op.results)} = " if op.results else ""
        body = " ".join(x for x in (op.name, _values(op.args), _attrs(op)) if x)
        types = ", ".join(k.type_of(v).text() for v in op.results)
        if op.body is None:
            lines.append(f"{pad}{head}{body}" + (f" : {types}" if types else ""))
            continue
        lines.append(f"{pad}{head}{body} {{")
        _block(k, op.body, depth + 1, lines)
        lines.append(f"{pad}}}" + (f" : {types}" if types else ""))
