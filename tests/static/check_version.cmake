# SPDX-License-Identifier: Apache-2.0
# ctest static.version: the Python package's version (pyproject.toml) is the project's (CMake's
# project VERSION, which the configure already holds to include/mxkit/version.hpp).
# cmake -DVERSION=<x.y.z> -DPYPROJECT=<pyproject.toml> -P check_version.cmake
cmake_minimum_required(VERSION 3.21)
file(STRINGS ${PYPROJECT} line REGEX "^version = \"[^\"]*\"$")
if(NOT line MATCHES "^version = \"([^\"]*)\"$")
  message(FATAL_ERROR "${PYPROJECT} states no version = \"x.y.z\" line")
endif()
if(NOT CMAKE_MATCH_1 STREQUAL VERSION)
  message(FATAL_ERROR "${PYPROJECT} says version ${CMAKE_MATCH_1}; the project (CMakeLists.txt, include/mxkit/version.hpp) is ${VERSION}")
endif()
message(STATUS "version ${VERSION} in CMakeLists.txt, include/mxkit/version.hpp and pyproject.toml")
