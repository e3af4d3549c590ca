"""Benchmarks (not tests): they print figures and assert nothing."""
