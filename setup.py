"""Builds specdec's C++ kernels (specdec/model/csrc/qlinear.cpp) against the installed torch.

Everything else about the package is in pyproject.toml. The build needs torch at build time, so
install with ``pip install --no-build-isolation -e .`` after torch (the Makefile does). Where torch
or a C++ compiler is missing the package installs without the kernels and specdec falls back to
torch's own (``specdec.model.native.status`` says why).
"""
import os
import subprocess
import tempfile
from pathlib import Path

from setuptools import setup

OPENMP_PROBE = "#include <omp.h>\nint main() { return omp_get_max_threads() > 0 ? 0 : 1; }\n"


def compiles_with(flags: list[str], source: str = "int main() { return 0; }\n") -> bool:
    """Whether the C++ compiler builds and links ``source`` with ``flags``, warnings as errors
    (Apple's clang has no -fopenmp, and warns of GCC's warning options)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "probe.cpp")
        src.write_text(source)
        try:
            command = [os.environ.get("CXX", "c++"), "-Werror", *flags, str(src), "-o", str(src.with_suffix(""))]
            run = subprocess.run(command, capture_output=True)
        except OSError:
            return False
        return run.returncode == 0


ext_modules, cmdclass = [], {}
try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # no torch in the build environment: no kernels, said at run time
    pass
else:
    # -fopenmp: at::parallel_for is a pragma in torch's headers, so without it the kernels run on
    # one thread (torch's own libgomp serves them); a compiler without OpenMP still builds them.
    openmp = ["-fopenmp"] if compiles_with(["-fopenmp"], OPENMP_PROBE) else []
    quiet = [f for f in ["-Wno-maybe-uninitialized"] if compiles_with([f])]  # GCC's
    ext_modules = [CppExtension("specdec.model._qlinear", ["specdec/model/csrc/qlinear.cpp"], optional=True,
                                # -ffp-contract=off: no fused multiply-adds but those the code asks for,
                                # so every instruction-set path computes the same bits
                                extra_compile_args=["-O3", *openmp, "-ffp-contract=off", *quiet],
                                extra_link_args=openmp)]
    cmdclass = {"build_ext": BuildExtension.with_options(use_ninja=False)}

setup(ext_modules=ext_modules, cmdclass=cmdclass)
