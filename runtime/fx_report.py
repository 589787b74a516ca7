"""The partitioner's choices as a table, for PLAIT_TORCH_DEBUG=1 (and for tests).

    fw0 regions:
    region                 ops  kernels  stopped at
    fw0_plait_region_0      41        3  aten.embedding.default is not in plait's op table
    fw0_plait_region_1       9        1  graph input/output

One row per region written as plait: how many ATen ops it took, how many kernels plait's
kernel graph cuts it into (default schedule, sizes of this graph; "-" where the region is
symbolic and is written per size, or plait refused it), and why it stopped: the reasons
fx_partition gave the nodes just outside it that feed it or read it ("graph input/output"
where its edge is the graph's, "another region" where the neighbour is supported but
joining it would make a cycle).
"""
from __future__ import annotations

import torch


def stop_reasons(partition, reason_of) -> list[str]:
    """Why `partition` has no more nodes: the reasons of its neighbours, each once."""
    inside, seen = partition.nodes, {}
    for node in inside:
        neighbours = list(node.all_input_nodes) + list(node.users)
        for n in neighbours:
            if n in inside:
                continue
            if n.op in ("placeholder", "output", "get_attr"):
                why = "graph input/output"
            elif n.target.__class__.__name__ == "builtin_function_or_method" \
                    and n.target.__name__ == "getitem":
                why = f"reads a tuple ({n.args[0].target})" if isinstance(
                    n.args[0], torch.fx.Node) else "getitem"
            else:
                why = reason_of(n) or "another region"
            seen[why] = None
    return list(seen)


def kernel_count(region) -> str:
    """The kernels of a PlaitRegion at its graph's sizes, by plait's kernel graph."""
    from plait.dsl.dtypes import dtype_of
    from plait.lowering.pipeline import lower
    algo, spec = getattr(region, "algorithm", None), getattr(region, "spec", None)
    if algo is None or spec is None:
        return "-"
    try:
        params = algo.tensor_params
        sizes = {a: n for p, port in zip(params, spec.inputs)
                 for a, n in zip(p.axes, port.plait_shape)}
        dtypes = {p.name: dtype_of(port.dtype) for p, port in zip(params, spec.inputs)}
        graph = algo.graph(dtypes)
        return str(len(lower(graph, None, sizes, True).kernel_graph.kernels))
    except Exception as e:                 # a report never fails the compile
        return f"? ({type(e).__name__})"


def table(label: str, rows) -> str:
    """rows: (region name, op count, kernel count, stop reasons)."""
    width = max([len("region")] + [len(r[0]) for r in rows])
    lines = [f"{label} regions:",
             f"{'region':<{width}}  {'ops':>4}  {'kernels':>7}  stopped at"]
    for name, ops, kernels, why in rows:
        lines.append(f"{name:<{width}}  {ops:>4}  {kernels:>7}  {'; '.join(why) or '-'}")
    return "\n".join(lines)
