# SPDX-License-Identifier: Apache-2.0
# cmake -DDIR=<hip output dir> [-DLIBRARY_DIR=<kernel library's hip output dir>] -DARCHS=<gfx list>
#       -P check_hip_kernels.cmake
# The quantizer's device assembly must hold the quantize kernels for every architecture, compiled
# as wave64 code: proof the AMD back end ran, not just the parser. They are in the quantizer
# test's assembly (header-only build) or in the kernel library's quantize_<format> files.
foreach(arch IN LISTS ARCHS)
  set(files "")
  # The test's own assembly exists for every architecture unless MXKIT_GPU_PROGRAMS_UNOPTIMIZED
  # compiled it for the last one only; the library's is there for each.
  if(EXISTS ${DIR}/catch2_test_quantize.${arch}.s OR NOT LIBRARY_DIR)
    list(APPEND files ${DIR}/catch2_test_quantize.${arch}.s)
  endif()
  if(LIBRARY_DIR)
    file(GLOB library_files ${LIBRARY_DIR}/gpu_kernels_quantize_*.${arch}.s)
    list(APPEND files ${library_files})
  endif()
  set(n 0)
  foreach(f IN LISTS files)
    if(NOT EXISTS ${f})
      message(FATAL_ERROR "missing ${f}")
    endif()
    file(READ ${f} text)
    string(REGEX MATCHALL "\\.amdhsa_kernel [^\n]*quantize_kernel" kernels "${text}")
    list(LENGTH kernels k)
    math(EXPR n "${n} + ${k}")
    if(k GREATER 0 AND NOT text MATCHES "amdhsa_wavefront_size32 0" AND NOT text MATCHES "\\.wavefront_size: +64")
      message(FATAL_ERROR "${f}: not wave64 code")
    endif()
  endforeach()
  if(n LESS 6)
    message(FATAL_ERROR "${files}: ${n} quantize kernels, expected one per MX format at least")
  endif()
  message(STATUS "${arch}: ${n} quantize kernels")
endforeach()
