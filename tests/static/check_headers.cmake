# SPDX-License-Identifier: Apache-2.0
# ctest static.headers: cmake -DINCLUDE_ROOT=<repo>/include -P check_headers.cmake
# 1. No header outside mxkit/gpu names a CUDA/HIP header or an mxkit/gpu header (host code must
#    build with any C++20 compiler; STYLE.md).  2. Every host header is in one umbrella:
#    mxkit/training_stack.hpp the training stack (nn/, train/, parallel/, io/, host/, ref/nn/: as
#    scripts/update_umbrella.sh writes it; train/program/ is the compiled library's, in neither),
#    mxkit/mxkit.hpp the rest, and no numerics header includes a training header (the numerics
#    umbrella stays small).
cmake_minimum_required(VERSION 3.21)
file(GLOB_RECURSE headers RELATIVE ${INCLUDE_ROOT} ${INCLUDE_ROOT}/mxkit/*.hpp)
list(FILTER headers EXCLUDE REGEX "^mxkit/gpu/")
list(SORT headers)
set(errors "")
foreach(h IN LISTS headers)
  file(STRINGS ${INCLUDE_ROOT}/${h} bad REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](cuda|hip/|hip_|mxkit/gpu/|__clang_cuda)")
  if(bad)
    string(APPEND errors "  ${h}: ${bad}\n")
  endif()
endforeach()
set(training_regex "^mxkit/(nn/|train/|parallel/|io/|host/|ref/nn/)")
file(STRINGS ${INCLUDE_ROOT}/mxkit/mxkit.hpp numerics_umbrella REGEX "^#include <mxkit/")
file(STRINGS ${INCLUDE_ROOT}/mxkit/training_stack.hpp training_umbrella REGEX "^#include <mxkit/")
foreach(h IN LISTS headers)
  # mxkit/nn.hpp: the deprecated spelling of the training umbrella, one include of it
  if(h STREQUAL "mxkit/mxkit.hpp" OR h STREQUAL "mxkit/training_stack.hpp" OR h STREQUAL "mxkit/nn.hpp" OR h MATCHES "^mxkit/train/program/")
    continue()
  endif()
  if(h MATCHES "${training_regex}")
    if(NOT "#include <${h}>" IN_LIST training_umbrella)
      string(APPEND errors "  mxkit/training_stack.hpp does not include <${h}>\n")
    endif()
  else()
    if(NOT "#include <${h}>" IN_LIST numerics_umbrella)
      string(APPEND errors "  mxkit/mxkit.hpp does not include <${h}>\n")
    endif()
    file(STRINGS ${INCLUDE_ROOT}/${h} up REGEX "^#include <mxkit/(nn/|train/|parallel/|io/|host/|nn[.]hpp|training_stack[.]hpp|ref/nn/)")
    if(up)
      string(APPEND errors "  ${h} (numerics) includes the training stack: ${up}\n")
    endif()
  endif()
endforeach()
if(errors)
  message(FATAL_ERROR "header check failed:\n${errors}(scripts/update_umbrella.sh rewrites both umbrellas)")
endif()
list(LENGTH headers n)
message(STATUS "${n} host headers: no GPU includes, each in its umbrella")
