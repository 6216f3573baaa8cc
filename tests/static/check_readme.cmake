# SPDX-License-Identifier: Apache-2.0
# ctest static.readme: the documentation (README.md and docs/*.md) must show what the code does.
# Each marked block may live in any of those pages (doc_blocks.cmake finds it; once, in one page):
#   - the table between <!-- formats:begin/end --> equals TABLE_PROGRAM's output;
#   - the code between <!-- usage:begin/end --> is USAGE_FILE (tests/package/main.cpp) verbatim;
#   - for each <name>=<file> of SNIPPETS, the code between <!-- <name>:begin/end --> is <file>
#     verbatim (each file is compiled and run by a test of its own, tests/static/CMakeLists.txt).
# cmake -DTABLE_PROGRAM=<exe> -DREADME=<README.md> -DDOCS_DIR=<docs> -DUSAGE_FILE=<main.cpp>
#       [-DSNIPPETS=name=file;...] -P check_readme.cmake
cmake_minimum_required(VERSION 3.21)
include(${CMAKE_CURRENT_LIST_DIR}/doc_blocks.cmake)
execute_process(COMMAND ${TABLE_PROGRAM} OUTPUT_VARIABLE table RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${TABLE_PROGRAM} failed (${rc})")
endif()
mxkit_doc_pages(pages ${README} ${DOCS_DIR})
set(errors "")

# The code of a ```-fenced block, without its fences; the file's license line is not part of it.
function(compare_code name file)
  mxkit_doc_block(${name} "${pages}" block page error)
  if(error)
    set(errors "${errors}${error}\n" PARENT_SCOPE)
    return()
  endif()
  file(READ ${file} code)
  string(REGEX REPLACE "^// SPDX-License-Identifier: [^\n]*\n" "" code "${code}")
  if(NOT block MATCHES "^```[a-z+]*\n(.*)```\n$" OR NOT CMAKE_MATCH_1 STREQUAL code)
    set(errors "${errors}${page}: block '${name}' differs from ${file}\n" PARENT_SCOPE)
  endif()
endfunction()

mxkit_doc_block(formats "${pages}" block page error)
if(error)
  string(APPEND errors "${error}\n")
elseif(NOT block STREQUAL table)
  string(APPEND errors "${page}: the format table is stale; the lines between the markers should be:\n${table}\n")
endif()
compare_code(usage ${USAGE_FILE})
foreach(snippet IN LISTS SNIPPETS)
  string(REGEX MATCH "^([a-z0-9_]+)=(.*)$" _ "${snippet}")
  compare_code(${CMAKE_MATCH_1} ${CMAKE_MATCH_2})
endforeach()
if(errors)
  message(FATAL_ERROR "${errors}")
endif()
list(LENGTH SNIPPETS n)
math(EXPR n "${n} + 2")
message(STATUS "${n} marked blocks match the code (README.md and docs/*.md)")
