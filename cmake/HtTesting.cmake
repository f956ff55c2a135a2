# Test registration helpers.
#
#   ht_add_test(NAME SOURCES a.cc ... LABELS unit ...)
#       one GoogleTest binary, one ctest entry.
#   ht_add_mpi_test(NAME SOURCES ... NP 2 4 LABELS mpi ...)
#       one binary, one ctest entry per process count, launched by FindMPI's
#       mpiexec with the flags CI needs (oversubscription, running as root),
#       linked with the MPI-aware GoogleTest main (tests/mpi_gtest_main.cc).
include(GoogleTest)
find_package(GTest REQUIRED)

set(HT_MPIEXEC_EXTRA_FLAGS --oversubscribe --bind-to none CACHE STRING "Extra mpiexec flags for tests")

# Every program the tests labelled gpu run: `cmake --build B --target
# ht_gpu_tests` builds just them (the emulated device's build tree, which
# runs only `ctest -L gpu`).
add_custom_target(ht_gpu_tests)
function(_ht_gpu_test target labels)
  if("gpu" IN_LIST labels)
    add_dependencies(ht_gpu_tests ${target})
  endif()
endfunction()

# Test binaries parse GoogleTest, the standard library and the library's
# tensor once, from one precompiled header (tests/test_util.h, which most
# tests include) instead of once per binary. The first test of each kind
# (GoogleTest's main; the MPI tests, whose main defines OMPI_SKIP_MPICXX)
# builds it and the others of that kind reuse it, so its flags are theirs (a
# library's -fPIC would not fit an executable's -fpie). A test whose flags
# differ (LIBS OpenMP::OpenMP_CXX) builds it for itself.
function(_ht_test_pch target kind libs)
  set(flags "")
  if("${libs}" MATCHES "OpenMP")
    set(flags "openmp")  # -fopenmp: another PCH (include directories do not matter to one)
  endif()
  get_property(owner GLOBAL PROPERTY ht_${kind}_test_pch)
  get_property(owner_flags GLOBAL PROPERTY ht_${kind}_test_pch_flags)
  if(owner AND owner_flags STREQUAL flags)
    target_precompile_headers(${target} REUSE_FROM ${owner})
    return()
  endif()
  target_precompile_headers(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/test_util.h)
  if(NOT owner)
    set_property(GLOBAL PROPERTY ht_${kind}_test_pch ${target})
    set_property(GLOBAL PROPERTY ht_${kind}_test_pch_flags "${flags}")
  endif()
endfunction()

function(ht_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LABELS;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE hypertrain::hypertrain GTest::gtest GTest::gtest_main ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  _ht_test_pch(${name} plain "${T_LIBS}")
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
  _ht_gpu_test(${name} "${T_LABELS}")
  if("gpu" IN_LIST T_LABELS)
    # A GPU test whose every case skipped (no device) is reported as skipped, not passed.
    set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
  endif()
endfunction()

# The MPI-aware GoogleTest main (tests/mpi_gtest_main.cc) that every
# ht_add_mpi_test binary links unless it has its own main (OWN_MAIN).
function(_ht_mpi_gtest_main)
  if(NOT TARGET ht_mpi_gtest_main)
    add_library(ht_mpi_gtest_main STATIC ${PROJECT_SOURCE_DIR}/tests/mpi_gtest_main.cc)
    target_link_libraries(ht_mpi_gtest_main PUBLIC hypertrain::hypertrain GTest::gtest MPI::MPI_C)
    target_compile_definitions(ht_mpi_gtest_main PUBLIC OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  endif()
endfunction()

#   ht_add_mpi_test(NAME SOURCES ... NP 2 4 [LABELS ...] [LIBS ...] [ARGS ...] [TIMEOUT s] [OWN_MAIN])
#       ARGS are passed to the program; "@NP@" in one is replaced by the
#       process count. OWN_MAIN: the sources define main() (no GoogleTest main).
function(ht_add_mpi_test name)
  cmake_parse_arguments(T "OWN_MAIN" "TIMEOUT" "SOURCES;LABELS;LIBS;NP;ARGS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  if(T_OWN_MAIN)
    target_link_libraries(${name} PRIVATE hypertrain::hypertrain ${T_LIBS})
  else()
    _ht_mpi_gtest_main()
    target_link_libraries(${name} PRIVATE ht_mpi_gtest_main ${T_LIBS})
    _ht_test_pch(${name} mpi "${T_LIBS}")
  endif()
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  _ht_gpu_test(${name} "${T_LABELS}")
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  foreach(np IN LISTS T_NP)
    string(REPLACE "@NP@" "${np}" args "${T_ARGS}")
    add_test(NAME ${name}_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${HT_MPIEXEC_EXTRA_FLAGS}
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS} ${args})
    set_tests_properties(${name}_np${np} PROPERTIES LABELS "mpi;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      PROCESSORS ${np}
      ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()
