# SPDX-License-Identifier: Apache-2.0
# What mxkit::gpu is in the project that uses mxkit. Shared by mxkit's own CMake (MxkitGpu.cmake,
# which FetchContent and add_subdirectory consumers run too) and by the installed or build-tree
# package (mxkitConfig.cmake, which installs this file beside it). mxkit is header-only, so the
# GPU backend is the consumer's GPU language, found in the consumer's configure, never baked in
# on the machine that packaged mxkit.
include_guard(GLOBAL)

# <out> = CUDA if this project has the CUDA language enabled, else HIP if it has HIP, else OFF.
function(_mxkit_gpu_backend_of_project out)
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("CUDA" IN_LIST languages)
    set(${out} CUDA PARENT_SCOPE)
  elseif("HIP" IN_LIST languages)
    set(${out} HIP PARENT_SCOPE)
  else()
    set(${out} OFF PARENT_SCOPE)
  endif()
endfunction()

# <out> = the runtime library items mxkit::gpu links under <backend>, empty where none is found.
# The CUDA and HIP languages link their runtime into CUDA and HIP programs themselves; naming it
# here serves targets that link with the C++ linker.
#   CUDA  CUDA::cudart or CUDA::cudart_static, as the consumer's CUDA_RUNTIME_LIBRARY asks (CMake's
#         default is the static one), so that one program never holds two copies of it.
#   HIP   hip-lang::amdhip64 (CMake's HIP language), hip::host (find_package(hip)), else the
#         amdhip64 library. Not find_package(hip): its config file stops the configure where
#         hipcc is missing (clang-only installs such as Debian's), even when QUIET.
function(_mxkit_gpu_runtime backend out)
  set(items "")
  if(backend STREQUAL "CUDA")
    if(NOT TARGET CUDA::cudart)
      find_package(CUDAToolkit QUIET)  # imported targets are directory-scoped: they outlive this function
    endif()
    if(TARGET CUDA::cudart AND TARGET CUDA::cudart_static)
      set(items "$<IF:$<STREQUAL:$<TARGET_PROPERTY:CUDA_RUNTIME_LIBRARY>,Shared>,CUDA::cudart,CUDA::cudart_static>")
    endif()
  elseif(backend STREQUAL "HIP")
    if(TARGET hip-lang::amdhip64)
      set(items hip-lang::amdhip64)
    elseif(TARGET hip::host)
      set(items hip::host)
    else()
      set(hints "")
      foreach(root IN ITEMS "${CMAKE_HIP_COMPILER_ROCM_ROOT}" "${MXKIT_ROCM_PATH}" "${ROCM_PATH}" "$ENV{ROCM_PATH}" /opt/rocm)
        if(root)
          list(APPEND hints ${root}/lib)
        endif()
      endforeach()
      find_library(mxkit_AMDHIP64_LIBRARY amdhip64 HINTS ${hints})
      if(mxkit_AMDHIP64_LIBRARY)
        set(items ${mxkit_AMDHIP64_LIBRARY})
      endif()
    endif()
  endif()
  set(${out} "${items}" PARENT_SCOPE)
endfunction()
