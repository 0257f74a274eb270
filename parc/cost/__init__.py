"""The cost model: parameters, memory, communication, FLOPs and step time."""
