# SPDX-License-Identifier: Apache-2.0
# Helpers for mxkit's own targets (tests, examples, benchmarks). Nothing here touches global
# flags or the exported target: consumers choose their own warnings and sanitizers.
include_guard(GLOBAL)

# Links mxkit::mxkit and applies the project's warnings (as errors) and MXKIT_SANITIZE to C++
# (and clang HIP) sources. CUDA sources get neither: nvcc takes other flags, set by the GPU build.
function(mxkit_project_target tgt)
  target_link_libraries(${tgt} PRIVATE mxkit::mxkit)
  if(MSVC)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:/W4 /WX /permissive->)
  else()
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX,HIP>:-Wall -Wextra -Wpedantic -Werror>)
  endif()
  if(MXKIT_SANITIZE)
    list(JOIN MXKIT_SANITIZE "," san)
    # -fno-sanitize-recover: a UBSan finding fails the test instead of printing and passing.
    set(flags -fsanitize=${san} -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${flags}>)
    target_link_options(${tgt} PRIVATE $<$<LINK_LANGUAGE:CXX>:${flags}>)
  endif()
endfunction()

# The CMake project version and include/mxkit/version.hpp must agree.
function(mxkit_check_version_header header)
  file(STRINGS ${header} lines REGEX "^#define MXKIT_VERSION_(MAJOR|MINOR|PATCH) ")
  set(parts "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "MXKIT_VERSION_${part} ([0-9]+)" _ "${lines}")
    list(APPEND parts "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN parts "." header_version)
  if(NOT header_version VERSION_EQUAL PROJECT_VERSION)
    message(FATAL_ERROR "mxkit: project version ${PROJECT_VERSION} differs from ${header} (${header_version})")
  endif()
endfunction()

# Programs that a build compiles only to check them, or runs briefly (their --help, a README
# block): with MXKIT_CHECK_BUILDS_UNOPTIMIZED (scripts/test.sh's release stage) at `level`, for
# compile time, since nothing times them there. The last -O on the command line wins. The unit
# tests and the training program, which ctest runs at length, keep their levels.
option(MXKIT_CHECK_BUILDS_UNOPTIMIZED
       "Compile the demo examples, host benchmarks, per-header units, README programs (-O0) and the Python module (-O1) for compile time, not speed" OFF)
function(mxkit_check_build tgt level)
  if(MXKIT_CHECK_BUILDS_UNOPTIMIZED AND NOT MSVC)
    target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${level}>)
  endif()
endfunction()
