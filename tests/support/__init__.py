"""What the test modules share: spec builders (``specs``), the one snapshot helper
(``snapshot``), the judges' processes (``judges``), Kubernetes' structural-schema pruning
(``structural``) and the kubelet's $(NAME) substitution (``kubelet``). Test modules import from
here, never from one another."""
