"""The agent side: its parts, without a server."""
