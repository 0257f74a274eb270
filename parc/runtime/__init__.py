"""Execute a plan in PyTorch, or rehearse it on one CPU machine.

The only part of parc that imports torch, and only when a runtime command runs: importing this
package costs nothing; its modules import torch when they are used.

* :func:`parc.runtime.run.run_plan`: the whole run (``parc run``), forked local ranks or
  torchrun's ranks, with the single-process verification and the report;
* :mod:`parc.runtime.api`: the Python API for a user's own ``nn.Module``;
* :func:`parc.runtime.shrink.rehearse`: the rehearsal-sized plan (no torch).
"""
