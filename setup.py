"""Build the optional C extensions: minibroker/_recordscan.c (the leader's
record payload check, the consumer's decode) and minibroker/_speedups.c (the
producer's per-record clock and key hash). Everything else is in
pyproject.toml. Without a C compiler the build skips them and the package
falls back to aiokafka's compiled reader and to Python twins (slower, same
results)."""
from setuptools import Extension, setup

setup(ext_modules=[
    Extension("minibroker._recordscan", ["minibroker/_recordscan.c"], optional=True),
    Extension("minibroker._speedups", ["minibroker/_speedups.c"], optional=True),
])
