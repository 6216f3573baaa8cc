# SPDX-License-Identifier: Apache-2.0
# ctest static.spdx: every source file of the tree names its license, SPDX-License-Identifier:
# Apache-2.0, in its first 3 lines (after a #! line or a #pragma once, say), and LICENSE holds the
# Apache License 2.0. Source files: *.hpp *.cpp *.cu *.hip *.cmake *.cmake.in CMakeLists.txt *.sh
# *.py, the top-level CMakeLists.txt and the scripts in .ci/, under include/ tests/ bench/
# examples/ scripts/ cmake/ data/ .ci/ python/ (and setup.py). The list is what git tracks where the source is a git
# work tree (build folders never count), else a glob of those folders.
#   cmake -DSOURCE_DIR=<repo> -P check_spdx.cmake
cmake_minimum_required(VERSION 3.21)
set(dirs include tests bench examples scripts cmake data .ci python)
set(pattern "(\\.(hpp|cpp|cu|hip|cmake|cmake\\.in|sh|py)|/CMakeLists\\.txt)$")
set(files "")
find_package(Git QUIET)
if(GIT_FOUND AND EXISTS ${SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} ls-files -- CMakeLists.txt setup.py ${dirs}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE listing ERROR_QUIET)
  if(rc EQUAL 0)
    string(REPLACE "\n" ";" files "${listing}")
    set(how "git ls-files")
  endif()
endif()
if(NOT files)
  set(how "glob")
  set(files CMakeLists.txt setup.py)
  foreach(d IN LISTS dirs)
    file(GLOB_RECURSE below RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${d}/*)
    list(APPEND files ${below})
  endforeach()
endif()

set(checked 0)
set(missing "")
foreach(f IN LISTS files)
  if(NOT f OR NOT EXISTS ${SOURCE_DIR}/${f} OR IS_DIRECTORY ${SOURCE_DIR}/${f})
    continue()
  endif()
  set(source FALSE)
  if("/${f}" MATCHES "${pattern}")
    set(source TRUE)
  elseif(f MATCHES "^\\.ci/")  # CI scripts carry no extension
    set(source TRUE)
  endif()
  if(NOT source)
    continue()
  endif()
  math(EXPR checked "${checked} + 1")
  file(READ ${SOURCE_DIR}/${f} head LIMIT 2048)
  string(REGEX MATCH "^[^\n]*\n?[^\n]*\n?[^\n]*" head "${head}")  # the first 3 lines
  if(NOT head MATCHES "SPDX-License-Identifier: Apache-2\\.0")
    string(APPEND missing "  ${f}\n")
  endif()
endforeach()

set(errors "")
if(missing)
  string(APPEND errors "no \"SPDX-License-Identifier: Apache-2.0\" in the first 3 lines of:\n${missing}")
endif()
if(NOT EXISTS ${SOURCE_DIR}/LICENSE)
  string(APPEND errors "no LICENSE file\n")
else()
  file(READ ${SOURCE_DIR}/LICENSE license)
  if(NOT license MATCHES "Apache License\n +Version 2\\.0, January 2004" OR NOT license MATCHES "END OF TERMS AND CONDITIONS")
    string(APPEND errors "LICENSE is not the Apache License 2.0 text\n")
  endif()
endif()
if(errors)
  message(FATAL_ERROR "${errors}(${checked} source files, listed by ${how})")
endif()
message(STATUS "${checked} source files (listed by ${how}) carry the Apache-2.0 SPDX line; LICENSE is Apache 2.0")
