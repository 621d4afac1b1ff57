"""Session, statement, tier walk, configuration and registries."""
