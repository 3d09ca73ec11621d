"""Exporters of the workload graph (``clustertwin trace``): Chakra execution traces per rank
(export.chakra, needs the [chakra] extra), a Perfetto timeline of the replay (export.perfetto) and
the graph as versioned JSON (export.graph_json). See docs/trace.md."""
