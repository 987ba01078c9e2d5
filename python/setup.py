"""Build of the tern extension: links the libtern static library the CLI uses.

Where libtern comes from:
  TERN_BUILD_DIR   a CMake build directory holding libtern.a (default: ../build);
  TERN_SOURCE_DIR  the tern source tree (default: the parent of this folder), for
                   include/tern.h, the version (CMakeLists.txt) and the default model.
If libtern.a is absent it is built there with cmake (Release, CUDA off).
"""
import os
import re
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.environ.get("TERN_SOURCE_DIR") or os.path.join(HERE, ".."))
BUILD = os.path.abspath(os.environ.get("TERN_BUILD_DIR") or os.path.join(SRC, "build"))


def version():
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        m = re.search(r"project\(tern VERSION ([0-9.]+)", f.read())
    if not m:
        sys.exit("tern: no 'project(tern VERSION x.y.z)' in %s/CMakeLists.txt" % SRC)
    return m.group(1)


def libtern():
    lib = os.path.join(BUILD, "libtern.a")
    if not os.path.exists(lib):
        print("tern: %s absent; building it with cmake" % lib, flush=True)
        subprocess.check_call(["cmake", "-S", SRC, "-B", BUILD, "-DCMAKE_BUILD_TYPE=Release", "-DTERN_CUDA=OFF"])
        subprocess.check_call(["cmake", "--build", BUILD, "-j%d" % (os.cpu_count() or 1), "--target", "tern_static"])
    return lib


def pkg_libs(*names):
    out = subprocess.check_output(["pkg-config", "--libs"] + list(names), text=True).split()
    dirs = [a[2:] for a in out if a.startswith("-L")]
    libs = [a[2:] for a in out if a.startswith("-l")]
    return dirs, libs


class BuildPy(build_py):
    """Writes tern/_build_info.py: the source tree (for the default model) and the version."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "tern", "_build_info.py")
        with open(target, "w") as f:
            f.write("SOURCE_DIR = %r\nVERSION = %r\n" % (SRC, version()))


lib = libtern()
dirs, libs = pkg_libs("libcjson", "libutf8proc", "libpcre2-8")
cuda = []
if os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        if re.search(r"^CMAKE_CUDA_COMPILER:\w+=.+nvcc", f.read(), re.M):
            cuda = ["cudart_static", "dl", "rt", "stdc++"]
            dirs.append(os.environ.get("CUDA_LIB_DIR", "/usr/local/cuda/lib64"))

setup(
    version=version(),
    cmdclass={"build_py": BuildPy},
    ext_modules=[
        Extension(
            "tern._tern",
            sources=["src/tern/_tern.c"],
            include_dirs=[os.path.join(SRC, "include"), os.path.join(SRC, "src")],  # src: lab.h
            extra_objects=[lib],
            library_dirs=dirs,
            libraries=libs + cuda + ["pthread", "m"],
            extra_compile_args=["-std=c11", "-O2", "-Wall"],
        )
    ],
)
