"""A local cluster of real processes (used by `minibroker cluster` and by tests)."""
