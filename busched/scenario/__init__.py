"""Conformance scenarios: one YAML file = config + cluster + one cycle's expected decisions."""
