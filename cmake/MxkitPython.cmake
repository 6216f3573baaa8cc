# SPDX-License-Identifier: Apache-2.0
# How the Python module finds its build prerequisites, in one place: python/CMakeLists.txt uses it
# to build, and scripts/test.sh configures cmake/python_probe/ with it to decide (before a
# 20-minute build) whether the module can be built. The two cannot disagree, which is how a
# Python-side `import pybind11` check once rejected a machine that had everything the build uses.
#
# pybind11 is found as a CMake package alone. Debian's pybind11-dev installs it in
# /usr/lib/cmake/pybind11, a standard prefix find_package searches, and that is what .ci/run
# installs. The Python module `pybind11` (Debian's python3-pybind11, or pip) is not needed; where
# one is importable its get_cmake_dir() is only a hint, so a pip-installed pybind11 works too.
# Python3 is found first: pybind11 then uses CMake's FindPython3 (the interpreter given as
# Python3_EXECUTABLE) rather than its own search for a `python` on PATH.
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
if(NOT pybind11_DIR)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import pybind11; print(pybind11.get_cmake_dir())"
                  OUTPUT_VARIABLE _mxkit_pybind11_hint OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
find_package(pybind11 2.6 CONFIG HINTS ${_mxkit_pybind11_hint})
if(NOT pybind11_FOUND)
  message(FATAL_ERROR "mxkit: the Python module needs pybind11's CMake package (Debian: apt-get install "
                      "pybind11-dev python3-dev) for ${Python3_EXECUTABLE}; or set pybind11_DIR")
endif()
