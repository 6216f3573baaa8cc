# SPDX-License-Identifier: Apache-2.0
# cmake -DDIR=<hip output dir> -DARCHS=<gfx list> -P check_hip_kernels.cmake
# Each quantizer test's device assembly must hold the quantize kernels for every architecture,
# compiled as wave64 code: proof the AMD back end ran, not just the parser.
foreach(arch IN LISTS ARCHS)
  set(f ${DIR}/catch2_test_quantize.${arch}.s)
  if(NOT EXISTS ${f})
    message(FATAL_ERROR "missing ${f}")
  endif()
  file(READ ${f} text)
  string(REGEX MATCHALL "\\.amdhsa_kernel [^\n]*quantize_kernel" kernels "${text}")
  list(LENGTH kernels n)
  if(n LESS 6)
    message(FATAL_ERROR "${f}: ${n} quantize kernels, expected one per MX format at least")
  endif()
  if(NOT text MATCHES "amdhsa_wavefront_size32 0" AND NOT text MATCHES "\\.wavefront_size: +64")
    message(FATAL_ERROR "${f}: not wave64 code")
  endif()
  message(STATUS "${arch}: ${n} quantize kernels")
endforeach()
