# SPDX-License-Identifier: Apache-2.0
# ctest example.05_train.installed / example.05_train.no_data: the training program finds its
# default data from where the executable is, not from where it was built (repository_data.hpp).
#   MODE=installed  `cmake --install BUILD_DIR --component mxkit_examples` into WORK_DIR/prefix,
#                   then prefix/bin/PROGRAM, run from WORK_DIR (no ./data there) with ARGS, must
#                   train on prefix/share/mxkit/data;
#   MODE=no_data    PROGRAM copied alone to WORK_DIR/alone/bin must stop with exit code 2 and a
#                   message naming the places it looked, the one beside it included.
# MXKIT_DATA_DIR is cleared for the program: a value in the caller's environment would hide a miss.
# cmake -DMODE=... -DBUILD_DIR=<build> -DPROGRAM=<path of the built program> -DWORK_DIR=<dir>
#       [-DARGS=a;b;c] -P installed_data_test.cmake
cmake_minimum_required(VERSION 3.21)
unset(ENV{MXKIT_DATA_DIR})
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
get_filename_component(name ${PROGRAM} NAME)

if(MODE STREQUAL "installed")
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --component mxkit_examples --prefix ${WORK_DIR}/prefix
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "cmake --install --component mxkit_examples failed (${rc}):\n${out}")
  endif()
  file(GLOB program ${WORK_DIR}/prefix/*/${name})
  file(GLOB_RECURSE stories ${WORK_DIR}/prefix/stories.txt)
  if(NOT program OR NOT stories)
    message(FATAL_ERROR "the install has no program ${name} (${program}) or no stories.txt (${stories}):\n${out}")
  endif()
  get_filename_component(data_dir ${stories} DIRECTORY)
  execute_process(COMMAND ${program} ${ARGS} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the installed ${name} failed (${rc})")
  endif()
  string(FIND "${out}" "data: ${data_dir}/stories.txt + qa.txt" at)
  if(at LESS 0)
    message(FATAL_ERROR "the installed ${name} did not train on the installed data (${data_dir})")
  endif()
elseif(MODE STREQUAL "no_data")
  file(COPY ${PROGRAM} DESTINATION ${WORK_DIR}/alone/bin)
  execute_process(COMMAND ${WORK_DIR}/alone/bin/${name} ${ARGS} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 2)
    message(FATAL_ERROR "${name} without data exited with ${rc}, expected 2 (a usage error)")
  endif()
  foreach(place "${WORK_DIR}/data" "${WORK_DIR}/alone/share/mxkit/data" "MXKIT_DATA_DIR" "--data")
    string(FIND "${out}" "${place}" at)
    if(at LESS 0)
      message(FATAL_ERROR "the message does not name '${place}'")
    endif()
  endforeach()
else()
  message(FATAL_ERROR "MODE=${MODE}: use installed or no_data")
endif()
