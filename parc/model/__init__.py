"""The typed plan, its dims, the rank map, pipeline schedules, fields and preset data."""
