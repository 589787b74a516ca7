"""Golden text of algorithm graphs (rerun with --update-golden after a deliberate change)."""
import pytest
from examples_catalog import EXAMPLES, load
from golden import check_golden


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_graph_text(request, name):
    graph = load(name).graph({p.name: "bf16" for p in load(name).tensor_params})
    check_golden(request, f"algorithm/{name}.txt", graph.text())
    assert graph.digraph().number_of_nodes() == len(graph.nodes)
