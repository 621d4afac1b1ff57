"""The command line (busched.cli): compose files and the benchmark command."""
