# Finds the libraries hypertrain builds on; all come from Debian packages
# installed by scripts/setup.sh.

find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
if(HT_FUZZ)
  # The fuzz build runs serially, without -fopenmp (the loops' pragmas are
  # ignored; no omp_* function is called): clang 16 cannot capture a
  # structured binding in a lambda under OpenMP, which the library does.
  set_property(TARGET OpenMP::OpenMP_CXX PROPERTY INTERFACE_COMPILE_OPTIONS "")
  set_property(TARGET OpenMP::OpenMP_CXX PROPERTY INTERFACE_LINK_LIBRARIES "")
endif()
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(CLI11 REQUIRED)  # the shared training command line (include/ht/train/flags.h)
find_package(HDF5 REQUIRED COMPONENTS C)

# OpenBLAS, the OpenMP build: it shares libgomp's thread pool with our own
# OpenMP loops, so the two never fight over the cores (the pthread build keeps
# a second pool of spinning threads). Called from inside an OpenMP parallel
# region it runs single-threaded.
find_path(HT_CBLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
find_library(HT_OPENBLAS_LIBRARY openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT HT_CBLAS_INCLUDE_DIR OR NOT HT_OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS (OpenMP build) not found: run scripts/setup.sh, which installs libopenblas-openmp-dev")
endif()
add_library(ht_openblas INTERFACE)
target_include_directories(ht_openblas SYSTEM INTERFACE ${HT_CBLAS_INCLUDE_DIR})
target_link_libraries(ht_openblas INTERFACE ${HT_OPENBLAS_LIBRARY})

# CUDA: optional, auto-detected; or emulated (HT_CUDA_EMULATION).
set(HT_HAVE_CUDA OFF)
set(HT_HAVE_NCCL OFF)
set(HT_CUDA_EMULATED OFF)
if(HT_CUDA_EMULATION)
  find_package(Boost 1.74 REQUIRED COMPONENTS context)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(HT_HAVE_CUDA ON)
  set(HT_HAVE_NCCL ON)  # emu/'s, between the processes of one host
  set(HT_CUDA_EMULATED ON)
elseif(NOT HT_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt)
    find_library(HT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
    find_path(HT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
    if(HT_NCCL_LIBRARY AND HT_NCCL_INCLUDE_DIR)
      set(HT_HAVE_CUDA ON)
      set(HT_HAVE_NCCL ON)
    endif()
  endif()
  if(HT_WITH_CUDA STREQUAL "ON" AND NOT HT_HAVE_CUDA)
    message(FATAL_ERROR "HT_WITH_CUDA=ON but the CUDA toolkit (nvcc, cuBLAS, cuBLASLt, NCCL) was not found; install it or configure with -DHT_WITH_CUDA=OFF")
  endif()
endif()
if(HT_HAVE_CUDA AND NOT HT_CUDA_EMULATED)
  set(CMAKE_CUDA_ARCHITECTURES ${HT_CUDA_ARCHITECTURES})
  enable_language(CUDA)
  # CMake 3.25 cannot hand C++20 to nvcc; the .cu files hold only kernels and
  # launchers over raw pointers (kernels/launch.h) and need nothing newer than 17.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  add_library(ht_nccl INTERFACE)
  target_include_directories(ht_nccl SYSTEM INTERFACE ${HT_NCCL_INCLUDE_DIR})
  target_link_libraries(ht_nccl INTERFACE ${HT_NCCL_LIBRARY})
endif()

# MPI (Open MPI): host collectives and bootstrap.
find_package(MPI REQUIRED COMPONENTS C)
set(HT_HAVE_MPI ON)

# ICU (libicu-dev): Unicode general categories for the GPT-2 tokenizer's
# pre-tokenizer (src/data/gpt2_pretokenizer.cc).
find_package(ICU 60 COMPONENTS uc)
if(NOT ICU_FOUND)
  message(FATAL_ERROR "ICU (libicu-dev) not found: the tokenizers need its Unicode character classes; run scripts/setup.sh")
endif()
# SentencePiece (libsentencepiece-dev): optional; without it load_tokenizer()
# refuses .model files with a message saying so.
find_package(PkgConfig QUIET)
set(HT_HAVE_SENTENCEPIECE OFF)
if(PkgConfig_FOUND)
  pkg_check_modules(HT_SENTENCEPIECE QUIET IMPORTED_TARGET sentencepiece)
  if(HT_SENTENCEPIECE_FOUND)
    set(HT_HAVE_SENTENCEPIECE ON)
  endif()
endif()
