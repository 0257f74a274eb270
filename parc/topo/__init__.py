"""`parc topo`: a node's topology read from the tools that report it (``nvidia-smi topo -m``,
``rocm-smi --showtopo``, a NIC list) and written as a `cluster` block.

:mod:`parc.topo.read` turns each tool's text into a :class:`Reading` (the GPU link matrix, each
GPU's NUMA node, the NIC nearest each GPU); :mod:`parc.topo.write` makes the cluster block from
it with the facts of :mod:`parc.model.topology` (islands, the matrix only where they do not say
enough). It comes after the model in the pipeline and before everything that reads a plan.
"""
from __future__ import annotations

from parc.topo.read import Reading, TopoError, read_nics, read_nvidia, read_rocm  # noqa: F401
from parc.topo.write import cluster_block, topology_of  # noqa: F401
