"""Plugins (busched.plugins), one module per plugin."""
