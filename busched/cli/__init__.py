"""The `busched` command."""
