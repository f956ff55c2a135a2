# Test registration helpers.
#
#   ht_add_test(NAME SOURCES a.cc ... LABELS unit ...)
#       one GoogleTest binary, one ctest entry.
#   ht_add_mpi_test(NAME SOURCES ... NP 2 4 LABELS mpi ...)
#       one binary, one ctest entry per process count, launched by FindMPI's
#       mpiexec with the flags CI needs (oversubscription, running as root).
include(GoogleTest)
find_package(GTest REQUIRED)

set(HT_MPIEXEC_EXTRA_FLAGS --oversubscribe --bind-to none CACHE STRING "Extra mpiexec flags for tests")

function(ht_add_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LABELS;LIBS" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE hypertrain::hypertrain GTest::gtest GTest::gtest_main ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive")
  if("gpu" IN_LIST T_LABELS)
    # A GPU test whose every case skipped (no device) is reported as skipped, not passed.
    set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  PASSED  \\] 0 tests")
  endif()
endfunction()

function(ht_add_mpi_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LABELS;LIBS;NP" ${ARGN})
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE hypertrain::hypertrain GTest::gtest ${T_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  foreach(np IN LISTS T_NP)
    add_test(NAME ${name}_np${np}
      COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${HT_MPIEXEC_EXTRA_FLAGS}
              ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${name}> ${MPIEXEC_POSTFLAGS})
    set_tests_properties(${name}_np${np} PROPERTIES LABELS "mpi;${T_LABELS}" TIMEOUT ${T_TIMEOUT}
      PROCESSORS ${np}
      ENVIRONMENT "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
  endforeach()
endfunction()
