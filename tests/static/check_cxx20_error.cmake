# SPDX-License-Identifier: Apache-2.0
# ctest static.cxx20_required (C++ compiler) and gpu.cxx20_required (nvcc): a translation unit
# that includes mxkit, compiled as C++17, must fail with mxkit's one-line message as its first
# error, not with pages of parse errors from deep inside a header.
#   cmake -DCOMPILER=<compiler> "-DFLAGS=<list>" -DSOURCE=<file> -DOUT=<object> -P check_cxx20_error.cmake
cmake_minimum_required(VERSION 3.21)
execute_process(COMMAND ${COMPILER} ${FLAGS} -c ${SOURCE} -o ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
set(message "mxkit needs C++20")
if(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled as C++17 (${COMPILER} ${FLAGS}); mxkit should stop it")
endif()
string(REGEX MATCH "[^\n]*error[^\n]*" first_error "${out}")
string(FIND "${first_error}" "${message}" at)
if(at EQUAL -1)
  message(FATAL_ERROR "the first error of a C++17 compile is not \"${message}...\" but:\n${first_error}\n\nfull output:\n${out}")
endif()
message(STATUS "C++17 stops at: ${first_error}")
