"""Builds specdec's C++ kernels (specdec/model/csrc/qlinear.cpp) against the installed torch.

Everything else about the package is in pyproject.toml. The build needs torch at build time, so
install with ``pip install --no-build-isolation -e .`` after torch (the Makefile does). Where torch
or a C++ compiler is missing the package installs without the kernels and specdec falls back to
torch's own (``specdec.model.native.status`` says why).
"""
from setuptools import setup

ext_modules, cmdclass = [], {}
try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # no torch in the build environment: no kernels, said at run time
    pass
else:
    ext_modules = [CppExtension("specdec.model._qlinear", ["specdec/model/csrc/qlinear.cpp"], optional=True,
                                # -ffp-contract=off: no fused multiply-adds but those the code asks for,
                                # so every instruction-set path computes the same bits
                                # -fopenmp: at::parallel_for is a pragma in torch's headers, so without it
                                # the kernels would run on one thread (torch's own libgomp serves them)
                                extra_compile_args=["-O3", "-fopenmp", "-ffp-contract=off", "-Wno-maybe-uninitialized"],
                                extra_link_args=["-fopenmp"])]
    cmdclass = {"build_ext": BuildExtension.with_options(use_ninja=False)}

setup(ext_modules=ext_modules, cmdclass=cmdclass)
