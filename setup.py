# SPDX-License-Identifier: Apache-2.0
# Builds the Python package with the project's CMake (python/CMakeLists.txt) and puts the package
# directory it lays out (<build>/python/mxkit: the Python files and the _mxkit extension) into the
# wheel. pyproject.toml holds the metadata. Environment: MXKIT_GPU (OFF or CUDA, default OFF),
# CMAKE_CUDA_ARCHITECTURES (default 90), MXKIT_CMAKE_ARGS (more configure arguments),
# MXKIT_JOBS (build jobs, default 2).
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
        gpu = os.environ.get("MXKIT_GPU", "OFF")
        args = [
            "-DCMAKE_BUILD_TYPE=Release", "-DMXKIT_BUILD_PYTHON=ON", "-DMXKIT_INSTALL=OFF", f"-DMXKIT_GPU={gpu}",
            f"-DPython3_EXECUTABLE={sys.executable}",
        ]
        if gpu.upper() == "CUDA":
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={os.environ.get('CMAKE_CUDA_ARCHITECTURES', '90')}")
        args += shlex.split(os.environ.get("MXKIT_CMAKE_ARGS", ""))
        subprocess.check_call(["cmake", "-S", ROOT, "-B", build_dir, *args])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "_mxkit", "-j", os.environ.get("MXKIT_JOBS", "2")])
        built = os.path.join(build_dir, "python", "mxkit")
        dest = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(built):
            if name.startswith("_mxkit") and name.endswith((".so", ".pyd")):
                shutil.copy2(os.path.join(built, name), os.path.join(dest, os.path.basename(self.get_ext_fullpath(ext.name))))


setup(
    packages=["mxkit"],
    package_dir={"": "python"},
    ext_modules=[CMakeExtension("mxkit._mxkit")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
