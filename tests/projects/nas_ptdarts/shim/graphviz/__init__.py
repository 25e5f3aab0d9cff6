"""A fake graphviz (not installed here): visualize.py's Digraph, which takes nodes and
edges and renders nothing (search.py plots each epoch's genotype with it)."""


class Digraph:
    def __init__(self, *args, **kwargs):
        self.body = []

    def node(self, *args, **kwargs):
        pass

    def edge(self, *args, **kwargs):
        pass

    def attr(self, *args, **kwargs):
        pass

    def render(self, *args, **kwargs):
        return None

    def subgraph(self, *args, **kwargs):
        return self
