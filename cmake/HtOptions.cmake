# Every build option of hypertrain in one place, with its default and doc.

set(HT_WITH_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO (if the toolkit is found), ON or OFF")
set_property(CACHE HT_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(HT_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA architectures to compile for (CMAKE_CUDA_ARCHITECTURES syntax)")
# The emulated device (emu/): kernels/*.cu compiled by the host compiler and
# run on the CPU, the CUDA runtime, cuBLAS and NCCL stood in for by emu/'s
# libraries. No nvcc is needed; Device::cuda(i) exists and every --device
# cuda path runs. For testing the CUDA code where no GPU is: see docs/emulation.md.
option(HT_CUDA_EMULATION "Build the CUDA backend against the emulated device (no GPU, no nvcc)" OFF)

if(CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
  set(_ht_top_level ON)
else()
  set(_ht_top_level OFF)
endif()
option(HT_BUILD_TESTS "Build the test suite" ${_ht_top_level})
option(HT_BUILD_BENCHMARKS "Build the benchmarks" ${_ht_top_level})
option(HT_BUILD_EXAMPLES "Build the examples" ${_ht_top_level})
option(HT_NATIVE "Compile host code for this machine's CPU (-march=native)" OFF)
# Each target compiles its C++ files in batches, as one unit per batch: the
# headers (fmt, nlohmann/json, CLI11, GoogleTest, MPI, Eigen) are parsed once
# per batch, not once per file, which halves a fresh build (most of CI's
# time). Files of one target share a unit, so file-local names must not clash:
# an anonymous namespace is not enough, give a file's helpers a namespace of
# its own (tests/ops/*_test.cc). -DCMAKE_UNITY_BUILD=OFF builds file by file,
# quicker for editing one file again and again.
if(NOT DEFINED CMAKE_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
endif()
if(NOT DEFINED CMAKE_UNITY_BUILD_BATCH_SIZE)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE 16)
endif()
# bench/fuzz.sh's build: clang, libFuzzer's coverage and the address and
# undefined-behaviour sanitizers on everything compiled (the readers live in
# the library), and a <name>_fuzzer program per fuzz target (tests/fuzz/).
option(HT_FUZZ "Build the libFuzzer programs of tests/fuzz (clang only; instruments every target)" OFF)
if(HT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "HT_FUZZ=ON needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}: configure with "
                        "-DCMAKE_C_COMPILER=clang-16 -DCMAKE_CXX_COMPILER=clang++-16, as bench/fuzz.sh does")
  endif()
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link,address,undefined>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
                      $<$<COMPILE_LANGUAGE:C,CXX>:-g>)
  add_link_options(-fsanitize=address,undefined)
endif()
