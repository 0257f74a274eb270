"""parc lint: discovery, suppressions and the engine."""
