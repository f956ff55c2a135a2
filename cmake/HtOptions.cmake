# Every build option of hypertrain in one place, with its default and doc.

set(HT_WITH_CUDA "AUTO" CACHE STRING "Build the CUDA backend: AUTO (if the toolkit is found), ON or OFF")
set_property(CACHE HT_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set(HT_CUDA_ARCHITECTURES "90" CACHE STRING "CUDA architectures to compile for (CMAKE_CUDA_ARCHITECTURES syntax)")

if(CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR)
  set(_ht_top_level ON)
else()
  set(_ht_top_level OFF)
endif()
option(HT_BUILD_TESTS "Build the test suite" ${_ht_top_level})
option(HT_BUILD_BENCHMARKS "Build the benchmarks" ${_ht_top_level})
option(HT_BUILD_EXAMPLES "Build the examples" ${_ht_top_level})
option(HT_NATIVE "Compile host code for this machine's CPU (-march=native)" OFF)
