"""The benchmarks: scripts with argparse at the edge (``python -m benchmarks.<name>``), each writing
JSON with the machine (CPU model and flags), dtype, versions and commit beside every number into
``benchmarks/results/``, and rendering that JSON as Markdown (its ``render``, with the shared pieces in
``tables``); ``report`` writes the renders into the README and ``docs/results.md``. Also the tiny model
pair they and the tests run on, and the Chromium lookup.
"""
