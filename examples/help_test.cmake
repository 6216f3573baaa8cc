# SPDX-License-Identifier: Apache-2.0
# ctest example.<name>.help: the example answers --help and -h with its usage and exit 0, before
# any work (the test's TIMEOUT bounds it), and refuses an unknown flag with exit 2.
# cmake -DPROGRAM=<exe> -DNAME=<name> -P help_test.cmake
cmake_minimum_required(VERSION 3.21)
foreach(flag --help -h)
  execute_process(COMMAND ${PROGRAM} ${flag} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "${NAME} ${flag} exited ${rc}, not 0:\n${out}${err}")
  endif()
  if(NOT out MATCHES "^usage: ${NAME}[ \n]")
    message(FATAL_ERROR "${NAME} ${flag}: its output does not begin with 'usage: ${NAME}':\n${out}${err}")
  endif()
endforeach()
execute_process(COMMAND ${PROGRAM} --no-such-flag RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "2")
  message(FATAL_ERROR "${NAME} --no-such-flag exited ${rc}, not 2 (a usage error):\n${out}${err}")
endif()
message(STATUS "${NAME}: --help and -h print the usage and exit 0; an unknown flag exits 2")
