"""Build the one optional C extension (minibroker/_recordscan.c, the leader's
record payload check). Everything else is in pyproject.toml. Without a C
compiler the build skips it and minibroker.record_check falls back to
aiokafka's compiled reader (slower on the leader, same verdicts)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("minibroker._recordscan", ["minibroker/_recordscan.c"], optional=True)])
