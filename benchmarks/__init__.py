"""The benchmarks: scripts with argparse at the edge (``python -m benchmarks.<name>``), each writing
JSON with the machine (CPU model and flags), dtype, versions and commit beside every number into
``benchmarks/results/``; ``report`` turns that JSON into the tables of the README and
``docs/results.md``. Also the tiny model pair they and the tests run on, and the Chromium lookup.
"""
