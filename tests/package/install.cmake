# SPDX-License-Identifier: Apache-2.0
# ctest package.install: installs the mxkit build tree BUILD_DIR into a fresh PREFIX and checks
# that the headers and the CMake package landed.  cmake -DBUILD_DIR=... -DPREFIX=... -P install.cmake
cmake_minimum_required(VERSION 3.21)
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} failed (${rc})")
endif()
file(GLOB_RECURSE config ${PREFIX}/*/mxkitConfig.cmake)
file(GLOB_RECURSE version ${PREFIX}/*/mxkitConfigVersion.cmake)
foreach(f ${PREFIX}/include/mxkit/mxkit.hpp ${PREFIX}/include/mxkit/config.hpp "${config}" "${version}")
  if(NOT EXISTS "${f}" OR IS_DIRECTORY "${f}")
    message(FATAL_ERROR "install is missing ${f}")
  endif()
endforeach()
