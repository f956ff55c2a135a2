# ctest driver of checkpoint_bench (bench/CMakeLists.txt): a tiny model saved
# by 2 ranks under ZeRO-3 and loaded again, also into tp 2; fails on a
# non-zero exit or a missing line. Timing figures are not checked.
#   cmake -DEXE=<bench> -DMPIEXEC=<mpiexec> -DFLAGS="-n;2;..." -DWORK=<dir> -P checkpoint_bench_test.cmake
execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${EXE} --dir ${WORK} --zero 3 --reshard-tp 2 --reshard-zero 0
                        --layers 2 --heads 2 --embd 64 --vocab 256 --snapshot-steps 4
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "checkpoint_bench: exit ${rc}")
endif()
foreach(expected "stall ratio" "write " "reshard load" "snapshot ")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "checkpoint_bench: no line with '${expected}'")
  endif()
endforeach()
