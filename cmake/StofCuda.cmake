# StofCuda.cmake — whether this build has the GPU backend, and what that means
# for the sources and the link lines.
#
# STOF_CUDA defaults to ON when a CUDA toolkit (nvcc) is found and to OFF
# otherwise; -DSTOF_CUDA=OFF forces a CPU-only build on a machine that has one.
# C code sees STOF_HAVE_CUDA (1 or 0). A CPU-only build compiles no .cu file,
# no *_gpu.c file and none of STOF_GPU_HOST_SOURCES, and links neither cudart
# nor cuBLASLt: code calling the CUDA runtime lives in those files or inside
# `#if STOF_HAVE_CUDA`.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  # nvcc where the toolkit installs it, when it is not on PATH.
  find_program(STOF_NVCC nvcc HINTS ENV CUDA_PATH ENV CUDA_HOME /usr/local/cuda
               PATH_SUFFIXES bin)
  if(STOF_NVCC)
    set(CMAKE_CUDA_COMPILER ${STOF_NVCC})
  endif()
endif()
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(stof_cuda_found ON)
else()
  set(stof_cuda_found OFF)
endif()
option(STOF_CUDA "Build the CUDA backend (default: ON when a CUDA toolkit is found)"
       ${stof_cuda_found})
if(STOF_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "STOF_CUDA is ON but no CUDA compiler was found; install the CUDA "
                        "toolkit (nvcc on PATH or CUDACXX) or configure with -DSTOF_CUDA=OFF")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(STOF_CUDART CUDA::cudart)
  message(STATUS "stof: GPU backend ON (CUDA ${CUDAToolkit_VERSION})")
else()
  set(STOF_CUDART)
  message(STATUS "stof: CPU-only build (STOF_CUDA=OFF)")
endif()

# Host files that reach the CUDA runtime, cuBLASLt or kernel launchers without
# the *_gpu.c name (to be renamed when their parts are next reworked): the
# fuse part is the GPU encoder's GEMM and row-op layer, nothing of it runs on
# the CPU.
set(STOF_GPU_HOST_SOURCES src/fuse/lt.c src/fuse/rowops.c src/fuse/segments.c)
# Tests labelled cpu (they run without a device) that exercise those files.
set(STOF_GPU_HOST_TESTS test_fuse_config)

# A path ending in one of these is a GPU source: .cu, *_gpu.c, STOF_GPU_HOST_SOURCES.
set(STOF_GPU_SOURCE_REGEX "(\\.cu|_gpu\\.c)$")
foreach(f ${STOF_GPU_HOST_SOURCES})
  string(REPLACE "." "\\." f ${f})
  string(APPEND STOF_GPU_SOURCE_REGEX "|/${f}$")
endforeach()

# stof_cpu_only_drop(list_var regex): in a CPU-only build, drops the entries
# matching regex (GPU sources: STOF_GPU_SOURCE_REGEX; GPU libraries: ^CUDA::).
function(stof_cpu_only_drop var regex)
  if(STOF_CUDA)
    return()
  endif()
  set(items ${${var}})
  list(FILTER items EXCLUDE REGEX "${regex}")
  set(${var} ${items} PARENT_SCOPE)
endfunction()
