"""The cache (busched.cache) and its running-job shortcuts."""
