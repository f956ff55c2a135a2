# ctest driver of ht-collectives-bench (bench/CMakeLists.txt): every operation
# (-o all, one launch), then every dtype and reduction of all_reduce, at tiny
# sizes with -c 1, under mpirun; fails on a non-zero exit (wrong results
# included) or a missing footer (one per operation).
#   cmake -DEXE=<bench> -DMPIEXEC=<mpiexec> -DFLAGS="-n;2;..." -P collectives_bench_test.cmake
set(_runs
  "-o all --root 1"
  "-o all_reduce -d half -r avg" "-o all_reduce -d bfloat16 -r max" "-o reduce_scatter -d int32 -r min"
  "-o all_gather -d half" "-o all_reduce --compare-raw --rounds 1" "-o all_reduce --json")
foreach(shown IN LISTS _runs)
  separate_arguments(args UNIX_COMMAND "${shown}")
  execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${EXE} -b 4 -e 70K -f 7 -n 2 -w 1 -c 1 ${args}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${shown}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ht-collectives-bench ${shown}: exit ${rc}")
  endif()
  set(want 1)
  if(shown MATCHES "-o all ")
    set(want 8)
  endif()
  string(REGEX MATCHALL "Out of bounds values : 0 OK" footers "${out}")
  list(LENGTH footers clean)
  if(NOT clean EQUAL want AND NOT out MATCHES "\"type\":\"summary\",\"wrong\":0|\"wrong\":0[,}].*\"type\":\"summary\"")
    message(FATAL_ERROR "ht-collectives-bench ${shown}: ${clean} clean footer(s), not ${want}")
  endif()
endforeach()
# -o all times each operation alone: --overlap (all_reduce against compute) refuses it, saying what to drop.
execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${EXE} -o all --overlap
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT "${out}${err}" MATCHES "--overlap measures all_reduce alone: drop -o all")
  message(FATAL_ERROR "ht-collectives-bench -o all --overlap: exit ${rc}, want 2 and a message\n${out}${err}")
endif()
