"""A torch.compile backend for the tests that read what dynamo traced: it keeps each graph it is
given and runs it as it is."""

from __future__ import annotations


class Recorder:
    """A torch.compile backend keeping dynamo's graphs (`graphs`), each run as it is."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def calls(self):
        """Every call_function node of every graph kept."""
        return [node for gm in self.graphs for node in gm.graph.nodes if node.op == "call_function"]

    def targets(self, index=-1):
        """The targets of the call_function nodes of graph `index` (the last by default)."""
        return [node.target for node in self.graphs[index].graph.nodes if node.op == "call_function"]
