"""What the test modules share: spec builders (``specs``), the one snapshot helper
(``snapshot``), the judges' processes (``judges``) and Kubernetes' structural-schema pruning
(``structural``). Test modules import from here, never from one another."""
