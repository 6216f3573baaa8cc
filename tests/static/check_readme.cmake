# SPDX-License-Identifier: Apache-2.0
# ctest static.readme: README.md must show what the code does.
#   - the table between <!-- formats:begin/end --> equals TABLE_PROGRAM's output;
#   - the code between <!-- usage:begin/end --> is USAGE_FILE (tests/package/main.cpp) verbatim;
#   - for each <name>=<file> of SNIPPETS, the code between <!-- <name>:begin/end --> is <file>
#     verbatim (each file is compiled and run by a test of its own, tests/static/CMakeLists.txt).
# cmake -DTABLE_PROGRAM=<exe> -DREADME=<README.md> -DUSAGE_FILE=<main.cpp> [-DSNIPPETS=name=file;...] -P check_readme.cmake
cmake_minimum_required(VERSION 3.21)
execute_process(COMMAND ${TABLE_PROGRAM} OUTPUT_VARIABLE table RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TABLE_PROGRAM} failed (${rc})")
endif()
file(READ ${README} readme)
file(READ ${USAGE_FILE} usage)
# The file's license line is not part of the example.
string(REGEX REPLACE "^// SPDX-License-Identifier: [^\n]*\n" "" usage "${usage}")
set(errors "")
string(REGEX MATCH "<!-- formats:begin -->\n(.*)<!-- formats:end -->" _ "${readme}")
if(NOT CMAKE_MATCH_1 STREQUAL table)
  string(APPEND errors "README.md format table is stale; the lines between the markers should be:\n${table}\n")
endif()
string(REGEX MATCH "<!-- usage:begin -->\n```cpp\n(.*)```\n<!-- usage:end -->" _ "${readme}")
if(NOT CMAKE_MATCH_1 STREQUAL usage)
  string(APPEND errors "README.md usage example differs from ${USAGE_FILE}\n")
endif()
foreach(snippet IN LISTS SNIPPETS)
  string(REGEX MATCH "^([a-z_]+)=(.*)$" _ "${snippet}")
  set(name ${CMAKE_MATCH_1})
  file(READ ${CMAKE_MATCH_2} code)
  string(REGEX REPLACE "^// SPDX-License-Identifier: [^\n]*\n" "" code "${code}")
  string(REGEX MATCH "<!-- ${name}:begin -->\n```[a-z+]*\n(.*)```\n<!-- ${name}:end -->" _ "${readme}")
  if(NOT CMAKE_MATCH_1 STREQUAL code)
    string(APPEND errors "README.md block '${name}' differs from ${snippet}\n")
  endif()
endforeach()
if(errors)
  message(FATAL_ERROR "${errors}")
endif()
