"""What the test modules share: spec builders (``specs``), the one snapshot helper
(``snapshot``). Test modules import from here, never from one another."""
