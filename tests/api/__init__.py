"""Domain types (busched.api): quantities, resources, the job index, admission."""
