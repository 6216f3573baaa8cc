# SPDX-License-Identifier: Apache-2.0
# MXKIT_GPU = OFF | CUDA | HIP: the GPU backend of mxkit::gpu and of mxkit's own GPU tests,
# benchmarks and examples. Unset (empty), it is
#   - detected where mxkit is the top-level project and builds tests, examples or benchmarks:
#     CUDA when CMake finds a CUDA compiler (check_language), else HIP when a HIP-capable clang
#     and the HIP headers are found, else OFF;
#   - otherwise (a FetchContent or add_subdirectory consumer, or the lean install configure)
#     the project's own GPU language: CUDA if it has CUDA enabled, else HIP if it has HIP, else
#     OFF. A consumer sets nothing: enabling CUDA or HIP (before mxkit is added) gives mxkit::gpu,
#     and mxkit enables no language the consumer did not.
# Forcing CUDA or HIP works on a machine without a GPU: CUDA builds everything (GPU tests skip
# themselves at run time), HIP compiles every kernel translation unit for the AMD targets
# (device-only, no link: no ROCm device libraries or GPU are needed).
#
#   CMAKE_CUDA_ARCHITECTURES  default 90. Targets that need arch-specific sm_90a instructions
#                             (wgmma, setmaxnreg) call mxkit_cuda_arch_specific(<target>), or, for
#                             a test under tests/gpu, contain the text "mxkit:sm90a" (see there).
#   CMAKE_HIP_ARCHITECTURES   default gfx942;gfx950.
#   CMAKE_HIP_COMPILER        the HIP compiler (default: clang++-22, clang++ or hipcc on PATH).
#
# Targets: mxkit::gpu (INTERFACE) = mxkit::mxkit + the GPU runtime library (mxkitGpuRuntime.cmake).
# It sets no architecture and no flag: those belong to the consumer. A plain C++ consumer links
# mxkit::mxkit and never sees a GPU header. mxkit::gpu is not exported: the installed package's
# mxkitConfig.cmake defines it in the consumer's configure, from the consumer's languages.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/mxkitGpuRuntime.cmake)

set(MXKIT_GPU "" CACHE STRING "GPU backend for mxkit's GPU targets: OFF, CUDA or HIP (empty: detect)")
set_property(CACHE MXKIT_GPU PROPERTY STRINGS "" OFF CUDA HIP)

# A clang that compiles HIP (clang++-22 here; hipcc elsewhere) and the HIP headers.
function(_mxkit_find_hip out_compiler out_rocm)
  set(compiler "")
  if(CMAKE_HIP_COMPILER)
    set(compiler ${CMAKE_HIP_COMPILER})
  else()
    find_program(MXKIT_HIP_COMPILER_PROGRAM NAMES clang++-22 hipcc clang++)
    if(MXKIT_HIP_COMPILER_PROGRAM)
      set(compiler ${MXKIT_HIP_COMPILER_PROGRAM})
    endif()
  endif()
  find_path(MXKIT_HIP_INCLUDE_DIR hip/hip_runtime.h PATHS /opt/rocm/include ENV ROCM_PATH PATH_SUFFIXES include)
  if(compiler AND MXKIT_HIP_INCLUDE_DIR)
    get_filename_component(rocm ${MXKIT_HIP_INCLUDE_DIR} DIRECTORY)
    set(${out_compiler} ${compiler} PARENT_SCOPE)
    set(${out_rocm} ${rocm} PARENT_SCOPE)
  else()
    set(${out_compiler} "" PARENT_SCOPE)
    set(${out_rocm} "" PARENT_SCOPE)
  endif()
endfunction()

string(TOUPPER "${MXKIT_GPU}" _mxkit_gpu)
# mxkit's own GPU targets: the only reason to look for a GPU toolchain the project did not enable.
set(_mxkit_own_targets OFF)
if(MXKIT_BUILD_TESTS OR MXKIT_BUILD_EXAMPLES OR MXKIT_BUILD_BENCH)
  set(_mxkit_own_targets ON)
endif()
if(_mxkit_gpu STREQUAL "" AND NOT (PROJECT_IS_TOP_LEVEL AND _mxkit_own_targets))
  _mxkit_gpu_backend_of_project(_mxkit_gpu)
  if(NOT _mxkit_gpu STREQUAL "OFF")
    message(STATUS "mxkit: mxkit::gpu for ${_mxkit_gpu}, the project's GPU language")
  endif()
elseif(_mxkit_gpu STREQUAL "")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_mxkit_gpu CUDA)
  else()
    _mxkit_find_hip(_mxkit_hip_cxx _mxkit_rocm)
    if(_mxkit_hip_cxx)
      set(_mxkit_gpu HIP)
    else()
      set(_mxkit_gpu OFF)
    endif()
  endif()
  # Say what detection means: with a GPU compiler found, the GPU tests, examples and benchmarks
  # are built too (a CUDA build of them takes minutes); a host-only build says OFF.
  if(_mxkit_gpu STREQUAL "OFF")
    message(STATUS "mxkit: MXKIT_GPU detected as OFF: no CUDA or HIP compiler found; host targets only")
  else()
    message(STATUS "mxkit: MXKIT_GPU detected as ${_mxkit_gpu}: mxkit's own GPU tests, examples and benchmarks "
                   "(those switched on) are built for ${_mxkit_gpu} besides the host ones; for a host-only build "
                   "configure with -DMXKIT_GPU=OFF (choices: OFF, CUDA, HIP)")
  endif()
elseif(NOT _mxkit_gpu MATCHES "^(OFF|CUDA|HIP)$")
  message(FATAL_ERROR "mxkit: MXKIT_GPU must be OFF, CUDA or HIP, got '${MXKIT_GPU}'")
endif()
# The resolved value, for every directory below (the cache entry keeps what the user chose).
set(MXKIT_GPU ${_mxkit_gpu})

# A machine with no GPU (CI's) compiles mxkit's GPU programs only to check them, and runs them
# only to see them report themselves skipped (CUDA) or not at all (HIP: device code is compiled,
# nothing is linked): unoptimized, host and device, they compile in half the time or less. The
# kernel library keeps -O3 (its machine code is what ptxas and the AMD back end check), unless it
# is compiled to PTX only (MXKIT_GPU_KERNEL_LIBRARY_PTX_ONLY).
option(MXKIT_GPU_PROGRAMS_UNOPTIMIZED
       "Compile mxkit's own GPU tests, benchmarks, examples and header checks unoptimized (host -O0, NVVM -O1, HIP -O0); the kernel library stays -O3 unless MXKIT_GPU_KERNEL_LIBRARY_PTX_ONLY" OFF)

if(MXKIT_GPU STREQUAL "CUDA")
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)  # nothing new where the consumer enabled it
  find_package(CUDAToolkit REQUIRED)  # CUDA::cudart for mxkit::gpu, CUDA::cublas for bench_gemm
  message(STATUS "mxkit: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")
  if(MXKIT_GPU_PROGRAMS_UNOPTIMIZED)
    foreach(config RELEASE RELWITHDEBINFO MINSIZEREL)  # one -O per nvcc command: each target gives its own
      string(REGEX REPLACE "(^| )-O[0-9s]( |$)" " " CMAKE_CUDA_FLAGS_${config} "${CMAKE_CUDA_FLAGS_${config}}")
    endforeach()
  endif()
elseif(MXKIT_GPU STREQUAL "HIP")
  # For mxkit's own device compiles (custom commands: CMake 3.25's HIP language needs a ROCm
  # layout that Debian's clang + HIP 5.2 packages do not have); a consumer's HIP targets need
  # none of it.
  _mxkit_find_hip(MXKIT_HIP_COMPILER MXKIT_ROCM_PATH)
  if(NOT MXKIT_HIP_COMPILER AND _mxkit_own_targets)
    message(FATAL_ERROR "mxkit: MXKIT_GPU=HIP needs a HIP compiler (clang++-22 or hipcc; set CMAKE_HIP_COMPILER) and "
                        "hip/hip_runtime.h (Debian: apt-get install clang-22 libamdhip64-dev)")
  endif()
  if(NOT CMAKE_HIP_ARCHITECTURES)
    set(CMAKE_HIP_ARCHITECTURES gfx942 gfx950)
  endif()
  # The AMD back end at -O3 is most of the kernel library's compile (src/gpu/quantize_mxint8.cu
  # for gfx942: 35 CPU-s at -O3, 11 at -O1 on the 2-core build machine, 2026-12-03). A build that
  # only checks the code (no AMD GPU runs it) may compile the library at -O3 for some
  # architectures and at -O1 for the rest: the back end still selects, allocates and emits every
  # kernel for each. A HIP build's entry only: a build without a GPU language makes none.
  set(MXKIT_HIP_LIBRARY_OPTIMIZED_ARCHS "" CACHE STRING
      "Architectures whose kernel library device code compiles at -O3 (empty: every CMAKE_HIP_ARCHITECTURES entry); the others at -O1 (scripts/test.sh's hip stage: gfx950)")
  # -nogpulib: no ROCm device libraries needed. __AMDGCN_WAVEFRONT_SIZE: HIP 5.2's headers read
  # it, and clang 22 no longer defines it.
  set(MXKIT_HIP_FLAGS -x hip -std=c++20 -O3 --rocm-path=${MXKIT_ROCM_PATH} -nogpulib -D__AMDGCN_WAVEFRONT_SIZE=64
                      -Wall -Wextra -Werror -I${PROJECT_SOURCE_DIR}/include)
  if(MXKIT_HIP_COMPILER)
    message(STATUS "mxkit: HIP device compile with ${MXKIT_HIP_COMPILER} for ${CMAKE_HIP_ARCHITECTURES} (ROCm path ${MXKIT_ROCM_PATH})")
  endif()
endif()
if(NOT MXKIT_GPU STREQUAL "OFF")
  add_library(mxkit_gpu INTERFACE)
  add_library(mxkit::gpu ALIAS mxkit_gpu)
  _mxkit_gpu_runtime(${MXKIT_GPU} _mxkit_gpu_runtime_libs)
  target_link_libraries(mxkit_gpu INTERFACE mxkit::mxkit ${_mxkit_gpu_runtime_libs})
endif()

# NCCL / RCCL for gpu::nccl_communicator: loaded at run time with dlopen (gpu/parallel/nccl_api.hpp), so
# nothing is linked and the builds compile without either package. MXKIT_NCCL_ROOT (a folder with
# lib/libnccl.so.2 or lib/librccl.so*, and include/nccl.h or include/rccl/rccl.h; PyTorch's wheel:
# python3 -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))") compiles that
# library's path in as the default (MXKIT_NCCL_LIBRARY still overrides it at run time), and has
# tests/gpu check our declarations against its header.
set(MXKIT_NCCL_ROOT "" CACHE PATH "NCCL or RCCL install (lib/, include/) for gpu::nccl_communicator's default library and ABI check")
set(MXKIT_NCCL_LIBRARY_FILE "")
set(MXKIT_NCCL_HEADER_DIR "")
if(MXKIT_NCCL_ROOT AND NOT MXKIT_GPU STREQUAL "OFF")
  foreach(name IN ITEMS libnccl.so.2 libnccl.so librccl.so.1 librccl.so)
    if(NOT MXKIT_NCCL_LIBRARY_FILE AND EXISTS ${MXKIT_NCCL_ROOT}/lib/${name})
      set(MXKIT_NCCL_LIBRARY_FILE ${MXKIT_NCCL_ROOT}/lib/${name})
    endif()
  endforeach()
  foreach(dir IN ITEMS include include/rccl)
    if(NOT MXKIT_NCCL_HEADER_DIR AND (EXISTS ${MXKIT_NCCL_ROOT}/${dir}/nccl.h OR EXISTS ${MXKIT_NCCL_ROOT}/${dir}/rccl.h))
      set(MXKIT_NCCL_HEADER_DIR ${MXKIT_NCCL_ROOT}/${dir})
    endif()
  endforeach()
  if(NOT MXKIT_NCCL_LIBRARY_FILE)
    message(FATAL_ERROR "mxkit: MXKIT_NCCL_ROOT=${MXKIT_NCCL_ROOT} has no lib/libnccl.so.2 or lib/librccl.so")
  endif()
  target_compile_definitions(mxkit_gpu INTERFACE MXKIT_NCCL_DEFAULT_LIBRARY="${MXKIT_NCCL_LIBRARY_FILE}")
  message(STATUS "mxkit: NCCL/RCCL default library ${MXKIT_NCCL_LIBRARY_FILE}; header ${MXKIT_NCCL_HEADER_DIR}")
endif()
if(NOT MXKIT_GPU STREQUAL "OFF")
  target_link_libraries(mxkit_gpu INTERFACE ${CMAKE_DL_LIBS})  # dlopen (in libc from glibc 2.34)
endif()

# The compiled kernel library (issue 29; include/mxkit/gpu/kernel_library.hpp says what it holds
# and how a translation unit that links it sees declarations instead of kernels).
#   MXKIT_BUILD_KERNEL_LIBRARY  build mxkit::gpu_kernels and link mxkit's own GPU tests, benchmarks
#                               and examples to it (each kernel compiled once per build). Default
#                               ON where mxkit is the top-level project with a GPU backend and its
#                               own programs; OFF compiles every program header-only, as before.
#   MXKIT_KERNEL_FAMILIES       the families the library compiles: `all` (default) or a list from
#                               MXKIT_KERNEL_FAMILIES_ALL below; a family left out is compiled
#                               header-only in every program that calls it (as
#                               CUTLASS_LIBRARY_KERNELS narrows CUTLASS's library).
# Architectures: CMAKE_CUDA_ARCHITECTURES / CMAKE_HIP_ARCHITECTURES as for everything else (one
# architecture builds fastest); sm_90 and up are built arch-specific (90a) for the wgmma paths.
# Each family is src/gpu/<family>.cu or src/gpu/<family>_*.cu (one small file per instantiation
# group, so they build in parallel), each defining MXKIT_GPU_LIBRARY_DEFINES_<FAMILY>; the
# library gives every user MXKIT_GPU_KERNEL_LIBRARY and MXKIT_GPU_LIBRARY_HAS_<FAMILY>.
set(MXKIT_KERNEL_FAMILIES_ALL device_backend gemm attention quantize nvfp4_quantize fp8_cast)
set(_mxkit_kernel_library_default OFF)
if(PROJECT_IS_TOP_LEVEL AND _mxkit_own_targets AND NOT MXKIT_GPU STREQUAL "OFF")
  set(_mxkit_kernel_library_default ON)
endif()
option(MXKIT_BUILD_KERNEL_LIBRARY "Build mxkit::gpu_kernels and link mxkit's own GPU programs to it" ${_mxkit_kernel_library_default})
# ptxas is about half of the library's compile (src/gpu/gemm.cu: 159 CPU-s to SASS, 77 to PTX on
# the 2-core build machine, 2026-12-03); a build that only checks that the code compiles can stop
# at PTX, which the driver would compile at first use (docs/perf/build.md).
# With MXKIT_GPU_PROGRAMS_UNOPTIMIZED the library is then compiled as the programs are (host -O0,
# NVVM -O1): NVVM's -O3 is most of the library's compile to PTX (docs/perf/build.md).
option(MXKIT_GPU_KERNEL_LIBRARY_PTX_ONLY
       "CUDA: compile mxkit::gpu_kernels to PTX only, no SASS (scripts/test.sh's cuda stage, which runs no kernel); unoptimized too with MXKIT_GPU_PROGRAMS_UNOPTIMIZED" OFF)
set(MXKIT_KERNEL_FAMILIES "all" CACHE STRING
    "Kernel families compiled into mxkit::gpu_kernels: all, or a list from: ${MXKIT_KERNEL_FAMILIES_ALL}")
set(MXKIT_GPU_KERNEL_LIBRARY_DEFINITIONS "")  # what a user of the library is compiled with
set(MXKIT_GPU_KERNEL_LIBRARY_SOURCES "")
if(MXKIT_BUILD_KERNEL_LIBRARY AND NOT MXKIT_GPU STREQUAL "OFF")
  list(APPEND MXKIT_GPU_KERNEL_LIBRARY_DEFINITIONS MXKIT_GPU_KERNEL_LIBRARY)
  set(families ${MXKIT_KERNEL_FAMILIES})
  if(families STREQUAL "all")
    set(families ${MXKIT_KERNEL_FAMILIES_ALL})
  endif()
  foreach(family IN LISTS families)
    if(NOT family IN_LIST MXKIT_KERNEL_FAMILIES_ALL)
      message(FATAL_ERROR "mxkit: MXKIT_KERNEL_FAMILIES: unknown family '${family}' (known: ${MXKIT_KERNEL_FAMILIES_ALL})")
    endif()
    string(TOUPPER ${family} upper)
    list(APPEND MXKIT_GPU_KERNEL_LIBRARY_DEFINITIONS MXKIT_GPU_LIBRARY_HAS_${upper})
    file(GLOB family_sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/gpu/${family}.cu ${PROJECT_SOURCE_DIR}/src/gpu/${family}_*.cu)
    list(SORT family_sources)
    list(APPEND MXKIT_GPU_KERNEL_LIBRARY_SOURCES ${family_sources})
  endforeach()
  message(STATUS "mxkit: kernel library mxkit::gpu_kernels: ${families}")
endif()

# mxkit's own CUDA targets (tests, benchmarks, examples): mxkit::gpu, the project's warnings
# (host code through nvcc, and nvcc's own warnings as errors), MXKIT_SANITIZE for host code, and
# the kernel library where it is built (HEADER_ONLY: never; the per-header checks and the
# library itself). LIBRARY: the kernel library, optimized also under MXKIT_GPU_PROGRAMS_UNOPTIMIZED.
function(mxkit_gpu_target tgt)
  cmake_parse_arguments(PARSE_ARGV 1 arg "HEADER_ONLY;LIBRARY" "" "")
  mxkit_project_target(${tgt})
  target_link_libraries(${tgt} PRIVATE mxkit::gpu)
  target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --Werror=all-warnings>)
  if(MXKIT_GPU_PROGRAMS_UNOPTIMIZED AND MXKIT_GPU STREQUAL "CUDA")
    # The library keeps -O3 unless it is compiled only to be checked as well (to PTX: no SASS is
    # made, so nothing of its -O3 machine code reaches a check; NVVM -O3 is most of its compile).
    if(arg_LIBRARY AND NOT MXKIT_GPU_KERNEL_LIBRARY_PTX_ONLY)
      target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O3>)
    else()
      # NVVM at -O1, not -O0: ptxas 13.0 crashed on -O0 PTX of the header-only wgmma kernels.
      target_compile_options(${tgt} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-O0 -Xcicc=-O1>)
    endif()
  endif()
  if(NOT arg_HEADER_ONLY)
    mxkit_link_gpu_kernels(${tgt})
  endif()
endfunction()

# Links <tgt> (a CUDA target) to mxkit::gpu_kernels where the library is built; nothing otherwise.
# Every GPU program of mxkit's gets it through mxkit_gpu_target; a target of another kind may
# call this alone.
function(mxkit_link_gpu_kernels tgt)
  if(TARGET mxkit_gpu_kernels)
    target_link_libraries(${tgt} PRIVATE mxkit::gpu_kernels)
  endif()
endfunction()

# Makes <tgt>'s CUDA architectures arch-specific (90 -> 90a-real): sm_90a instructions such as
# wgmma and setmaxnreg assemble only for such a target. A plain entry becomes -real, i.e.
# --generate-code=arch=compute_90a,code=[sm_90a]: arch-specific PTX runs on that one architecture
# only (it is not forward compatible), so embedding compute_90a PTX beside the sm_90a binary
# would add nothing but size.
function(mxkit_cuda_arch_specific tgt)
  get_target_property(archs ${tgt} CUDA_ARCHITECTURES)
  set(out "")
  foreach(a IN LISTS archs)
    if(a MATCHES "^([0-9]+)(-real|-virtual)?$" AND CMAKE_MATCH_1 GREATER_EQUAL 90)
      set(a "${CMAKE_MATCH_1}a${CMAKE_MATCH_2}")
      if(CMAKE_MATCH_2 STREQUAL "")
        set(a "${a}-real")
      endif()
    endif()
    list(APPEND out ${a})
  endforeach()
  set_target_properties(${tgt} PROPERTIES CUDA_ARCHITECTURES "${out}")
endfunction()

# The kernel library's target: CUDA, a static library; HIP, each source device-compiled for every
# architecture and host-compiled (as mxkit's other HIP sources; nothing is linked).
function(_mxkit_add_kernel_library)
  if(NOT MXKIT_GPU_KERNEL_LIBRARY_SOURCES)
    return()
  endif()
  if(MXKIT_GPU STREQUAL "CUDA")
    add_library(mxkit_gpu_kernels STATIC ${MXKIT_GPU_KERNEL_LIBRARY_SOURCES})
    add_library(mxkit::gpu_kernels ALIAS mxkit_gpu_kernels)
    mxkit_gpu_target(mxkit_gpu_kernels HEADER_ONLY LIBRARY)
    mxkit_cuda_arch_specific(mxkit_gpu_kernels)
    if(MXKIT_GPU_KERNEL_LIBRARY_PTX_ONLY)
      get_target_property(archs mxkit_gpu_kernels CUDA_ARCHITECTURES)
      list(TRANSFORM archs REPLACE "-real$" "-virtual")
      set_target_properties(mxkit_gpu_kernels PROPERTIES CUDA_ARCHITECTURES "${archs}")
    endif()
    target_compile_definitions(mxkit_gpu_kernels PUBLIC ${MXKIT_GPU_KERNEL_LIBRARY_DEFINITIONS})
    target_link_libraries(mxkit_gpu_kernels PUBLIC mxkit::gpu)
  elseif(MXKIT_GPU STREQUAL "HIP")
    foreach(src IN LISTS MXKIT_GPU_KERNEL_LIBRARY_SOURCES)
      get_filename_component(family ${src} NAME_WE)
      mxkit_hip_device_compile(gpu_kernels_${family} ${src} KERNEL_LIBRARY LIBRARY_SOURCE)
    endforeach()
  endif()
endfunction()

# HIP: compiles <src> as HIP for every CMAKE_HIP_ARCHITECTURES entry (device code only, to
# assembly: the whole back end runs, nothing is linked) and once for the host (object only).
# A device-only compile writes no dependency file, so a host-side -M pass lists the headers.
# The outputs join the target mxkit_hip_compile (part of `all`). INCLUDES: extra include paths.
# KERNEL_LIBRARY: compiled as a user of the kernel library, where one is built (the kernels it
# holds are declarations here), or as one of its own sources. LIBRARY_SOURCE: one of its own
# sources (-O3 also under MXKIT_GPU_PROGRAMS_UNOPTIMIZED). DEVICE_ONLY: no host object.
function(mxkit_hip_device_compile name src)
  cmake_parse_arguments(arg "KERNEL_LIBRARY;LIBRARY_SOURCE;DEVICE_ONLY" "" "INCLUDES" ${ARGN})
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/hip)
  file(MAKE_DIRECTORY ${dir})
  set(common ${MXKIT_HIP_FLAGS})
  if(MXKIT_GPU_PROGRAMS_UNOPTIMIZED AND NOT arg_LIBRARY_SOURCE)
    list(TRANSFORM common REPLACE "^-O3$" "-O0")
  endif()
  if(arg_KERNEL_LIBRARY)
    foreach(def IN LISTS MXKIT_GPU_KERNEL_LIBRARY_DEFINITIONS)
      list(APPEND common "-D${def}")
    endforeach()
  endif()
  foreach(inc IN LISTS arg_INCLUDES)
    list(APPEND common "-I${inc}")
  endforeach()
  # Programs compiled only to be checked (MXKIT_GPU_PROGRAMS_UNOPTIMIZED) go through the back end
  # for the last architecture listed (gfx950, the one with MX instructions); the kernel library's
  # sources, where every kernel they use lives, still for each (CI's hip stage: about a minute).
  set(archs ${CMAKE_HIP_ARCHITECTURES})
  if(MXKIT_GPU_PROGRAMS_UNOPTIMIZED AND NOT arg_LIBRARY_SOURCE)
    list(GET archs -1 archs)
  endif()
  set(outputs "")
  foreach(arch IN LISTS archs)
    set(out ${dir}/${name}.${arch}.s)
    set(arch_flags ${common})
    if(arg_LIBRARY_SOURCE AND MXKIT_HIP_LIBRARY_OPTIMIZED_ARCHS AND NOT arch IN_LIST MXKIT_HIP_LIBRARY_OPTIMIZED_ARCHS)
      list(TRANSFORM arch_flags REPLACE "^-O3$" "-O1")
    endif()
    add_custom_command(OUTPUT ${out}
      COMMAND ${MXKIT_HIP_COMPILER} ${arch_flags} --offload-arch=${arch} --cuda-host-only -M -MT ${out} -MF ${out}.d ${src}
      COMMAND ${MXKIT_HIP_COMPILER} ${arch_flags} --offload-arch=${arch} --cuda-device-only -S ${src} -o ${out}
      DEPENDS ${src} DEPFILE ${out}.d COMMAND_EXPAND_LISTS
      COMMENT "HIP device compile ${name} for ${arch}")
    list(APPEND outputs ${out})
  endforeach()
  # DEVICE_ONLY (the per-header checks): no host object. clang's device pass parses and checks the
  # whole unit, host code included, so a header that does not compile alone fails there too.
  # Programs compiled only to be checked (MXKIT_GPU_PROGRAMS_UNOPTIMIZED: tests, examples,
  # benchmarks) skip their host object the same way: nothing links it, and the host compile took
  # as long as the device one; the kernel library's sources and gpu.two_units (mxkit_hip_host_link)
  # keep theirs.
  if(MXKIT_GPU_PROGRAMS_UNOPTIMIZED AND NOT arg_LIBRARY_SOURCE)
    set(arg_DEVICE_ONLY TRUE)
  endif()
  if(NOT arg_DEVICE_ONLY)
    list(GET CMAKE_HIP_ARCHITECTURES 0 first_arch)
    set(out ${dir}/${name}.host.o)
    add_custom_command(OUTPUT ${out}
      COMMAND ${MXKIT_HIP_COMPILER} ${common} --offload-arch=${first_arch} --cuda-host-only -c ${src} -o ${out} -MD -MF ${out}.d
      DEPENDS ${src} DEPFILE ${out}.d COMMAND_EXPAND_LISTS
      COMMENT "HIP host compile ${name}")
    list(APPEND outputs ${out})
  endif()
  add_custom_target(hip_${name} DEPENDS ${outputs})
  if(NOT TARGET mxkit_hip_compile)
    add_custom_target(mxkit_hip_compile ALL)
  endif()
  add_dependencies(mxkit_hip_compile hip_${name})
endfunction()

# HIP: compiles each source for the host (object) and links the objects into one relocatable
# object <name>.o (ld -r): a symbol defined in two of them fails it as it would fail a program's
# link, while the references to the device binaries, which a host-only compile leaves out, may
# stay undefined. (A whole program would need the AMD device linker and libraries.) Joins
# mxkit_hip_compile.
function(mxkit_hip_host_link name)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/hip)
  file(MAKE_DIRECTORY ${dir})
  list(GET CMAKE_HIP_ARCHITECTURES 0 first_arch)
  set(flags ${MXKIT_HIP_FLAGS})
  if(MXKIT_GPU_PROGRAMS_UNOPTIMIZED)
    list(TRANSFORM flags REPLACE "^-O3$" "-O0")
  endif()
  set(objects "")
  foreach(src IN LISTS ARGN)
    get_filename_component(stem ${src} NAME_WE)
    set(obj ${dir}/${name}.${stem}.host.o)
    add_custom_command(OUTPUT ${obj}
      COMMAND ${MXKIT_HIP_COMPILER} ${flags} --offload-arch=${first_arch} --cuda-host-only -c ${src} -o ${obj} -MD -MF ${obj}.d
      DEPENDS ${src} DEPFILE ${obj}.d COMMAND_EXPAND_LISTS
      COMMENT "HIP host compile ${name}: ${stem}")
    list(APPEND objects ${obj})
  endforeach()
  set(out ${dir}/${name}.o)
  add_custom_command(OUTPUT ${out} COMMAND ${MXKIT_HIP_COMPILER} -r ${objects} -o ${out}
                     DEPENDS ${objects} COMMAND_EXPAND_LISTS COMMENT "HIP host link ${name} (relocatable)")
  add_custom_target(hip_${name} DEPENDS ${out})
  if(NOT TARGET mxkit_hip_compile)
    add_custom_target(mxkit_hip_compile ALL)
  endif()
  add_dependencies(mxkit_hip_compile hip_${name})
endfunction()

_mxkit_add_kernel_library()

# A GPU example: built (CUDA; a ctest runs it when tests are on) or device-compiled (HIP).
function(mxkit_add_gpu_example name src)
  cmake_parse_arguments(PARSE_ARGV 2 arg "SM90A" "" "ARGS")
  if(TARGET ${name} OR TARGET hip_${name})
    return()
  endif()
  if(MXKIT_GPU STREQUAL "CUDA")
    add_executable(${name} ${src})
    mxkit_gpu_target(${name})
    if(arg_SM90A)
      mxkit_cuda_arch_specific(${name})
    endif()
    if(MXKIT_BUILD_TESTS)
      add_test(NAME example.${name} COMMAND ${name} ${arg_ARGS})
      set_tests_properties(example.${name} PROPERTIES LABELS "gpu" SKIP_RETURN_CODE 77 ENVIRONMENT MXKIT_SKIP_EXIT_CODE=77)
    endif()
  elseif(MXKIT_GPU STREQUAL "HIP")
    mxkit_hip_device_compile(${name} ${src} KERNEL_LIBRARY)
  endif()
endfunction()
