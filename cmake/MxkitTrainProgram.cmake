# SPDX-License-Identifier: Apache-2.0
# The training program (include/mxkit/train_program/, its run() in src/train/program.cpp) as a
# compiled library beside the kernel library, mxkit::train_program: the training code compiled
# once, by the host compiler; 05_train and 06_train_gpu are thin mains that link it (06_train_gpu's
# own file then compiles its backend and the program's header only). Included by examples/ and
# tests/gpu/, whichever defines a training program first.
include_guard(GLOBAL)
include(GNUInstallDirs)

function(mxkit_link_train_program target)
  if(NOT TARGET ${target})  # HIP: a device compile (custom command), nothing linked
    return()
  endif()
  if(NOT TARGET mxkit_train_program)
    add_library(mxkit_train_program STATIC EXCLUDE_FROM_ALL ${PROJECT_SOURCE_DIR}/src/train/program.cpp)
    mxkit_project_target(mxkit_train_program)
    target_link_libraries(mxkit_train_program PUBLIC mxkit::mxkit)
    add_library(mxkit::train_program ALIAS mxkit_train_program)
    # Where the programs find the repository's corpora relative to themselves (repository_data.hpp).
    file(RELATIVE_PATH data_from_bin ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_DATADIR}/mxkit/data)
    target_compile_definitions(mxkit_train_program PRIVATE MXKIT_EXAMPLE_DATA_FROM_BIN="${data_from_bin}")
    if(MXKIT_GPU_PROGRAMS_UNOPTIMIZED AND NOT MXKIT_BUILD_EXAMPLES)
      # Only the GPU program links it here, and the GPU stages compile that only to check it.
      target_compile_options(mxkit_train_program PRIVATE -O0)
    endif()
  endif()
  target_link_libraries(${target} PRIVATE mxkit_train_program)
endfunction()
