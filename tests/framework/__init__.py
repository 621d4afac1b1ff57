"""The framework (busched.framework): configuration, tiers, statements, sessions, topology, plugin errors."""
