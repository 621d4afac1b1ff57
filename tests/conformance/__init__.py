"""Conformance: Volcano's cases (cases/), extra scenarios (tests/scenarios), the scenario CLI and the sync script."""
