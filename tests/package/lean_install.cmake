# SPDX-License-Identifier: Apache-2.0
# ctest package.lean_install (host consumer; -DCUDA_COMPILER adds the CUDA consumer, run by hand): README's
# install, exactly as documented, on a fresh copy of the sources and with no network:
#     cmake -S mxkit -B mxkit-build && cmake --install mxkit-build --prefix <prefix>
# then tests/package, as a find_package consumer of <prefix>, builds and runs.
#   cmake -DSOURCE_DIR=<mxkit> -DWORK_DIR=<scratch> [-DCUDA_COMPILER=<nvcc> -DCUDA_ARCHITECTURES=<list>]
#         -P lean_install.cmake
# No network: the proxies point at a closed local port and git may use the file protocol only, so
# a download or clone fails rather than being served. Catch2's package is hidden
# (CMAKE_DISABLE_FIND_PACKAGE_Catch2), as on a machine without it: the install must not need it.
# Checked: configure and install succeed; nothing is fetched (no _deps), no test is registered,
# no GPU compiler is looked up (no CUDA or HIP entry in the cache); the prefix holds the headers,
# the CMake package and LICENSE, and no GPU target file (mxkit::gpu is decided in the consumer).
cmake_minimum_required(VERSION 3.21)
foreach(var SOURCE_DIR WORK_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "lean_install.cmake: -D${var}=... is required")
  endif()
endforeach()

set(offline ${CMAKE_COMMAND} -E env http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9
            HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9
            no_proxy= NO_PROXY= GIT_ALLOW_PROTOCOL=file)
function(run what)
  execute_process(COMMAND ${offline} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  file(WRITE ${WORK_DIR}/${what}.log "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
endfunction()

# A fresh copy: the files git knows (tracked, and new ones not ignored) where the source is a git
# work tree, else the source folders; never build folders.
file(REMOVE_RECURSE ${WORK_DIR})
set(src ${WORK_DIR}/mxkit)
find_package(Git QUIET)
set(files "")
if(GIT_FOUND AND EXISTS ${SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} ls-files --cached --others --exclude-standard
                  RESULT_VARIABLE rc OUTPUT_VARIABLE listing ERROR_QUIET)
  if(rc EQUAL 0)
    string(REPLACE "\n" ";" files "${listing}")
  endif()
endif()
if(NOT files)
  file(GLOB files RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/*)
  list(FILTER files EXCLUDE REGEX "^(build|out|\\.)")
  set(expanded "")
  foreach(f IN LISTS files)
    if(IS_DIRECTORY ${SOURCE_DIR}/${f})
      file(GLOB_RECURSE below RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${f}/*)
      list(APPEND expanded ${below})
    else()
      list(APPEND expanded ${f})
    endif()
  endforeach()
  set(files ${expanded})
endif()
foreach(f IN LISTS files)
  if(f AND EXISTS ${SOURCE_DIR}/${f} AND NOT IS_DIRECTORY ${SOURCE_DIR}/${f})  # skip deletions
    get_filename_component(dir ${src}/${f} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(COPY_FILE ${SOURCE_DIR}/${f} ${src}/${f})
  endif()
endforeach()

# The documented commands, nothing added but the hidden Catch2.
set(build ${WORK_DIR}/mxkit-build)
set(prefix ${WORK_DIR}/prefix)
run(configure ${CMAKE_COMMAND} -S ${src} -B ${build} -DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON)
set(errors "")
foreach(path _deps CTestTestfile.cmake)
  if(EXISTS ${build}/${path})
    string(APPEND errors "  the configure made ${build}/${path} (it fetched or registered tests)\n")
  endif()
endforeach()
file(STRINGS ${build}/CMakeCache.txt gpu_entries REGEX "^[A-Za-z0-9_]*(CUDA|HIP)[A-Za-z0-9_]*:")
if(gpu_entries)
  string(APPEND errors "  the configure looked for a GPU toolchain: ${gpu_entries}\n")
endif()
run(install ${CMAKE_COMMAND} --install ${build} --prefix ${prefix})
file(GLOB_RECURSE config ${prefix}/*/mxkitConfig.cmake)
file(GLOB_RECURSE license ${prefix}/*/LICENSE)
foreach(f ${prefix}/include/mxkit/mxkit.hpp ${prefix}/include/mxkit/gpu/platform.hpp "${config}" "${license}")
  if(NOT EXISTS "${f}" OR IS_DIRECTORY "${f}")
    string(APPEND errors "  the install is missing ${f}\n")
  endif()
endforeach()
file(GLOB_RECURSE gpu_files ${prefix}/*GpuTargets*.cmake)
if(gpu_files)
  string(APPEND errors "  the install holds a GPU target file made on this machine: ${gpu_files}\n")
endif()
if(errors)
  message(FATAL_ERROR "lean install:\n${errors}")
endif()

# The consumer, in its own fresh folder.
set(consumer_options -DCONSUME=find_package -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0)
if(CUDA_COMPILER)
  string(REPLACE ";" "\\;" archs "${CUDA_ARCHITECTURES}")  # one argument, a list
  list(APPEND consumer_options -DCONSUME_CUDA=ON -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
              "-DCMAKE_CUDA_ARCHITECTURES=${archs}")
endif()
run(consumer_configure ${CMAKE_COMMAND} -S ${src}/tests/package -B ${WORK_DIR}/consumer ${consumer_options})
run(consumer_build ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(consumer_test ${CMAKE_CTEST_COMMAND} --test-dir ${WORK_DIR}/consumer --output-on-failure)
message(STATUS "lean install: configured offline, installed to ${prefix}, consumer built and ran")
