# ctest driver of ht-plan-bench (bench/CMakeLists.txt): four layouts of a tiny
# GPT under mpirun -np 2 (ZB-H1 and interleaved among them), two rounds; fails on a
# non-zero exit or a missing summary line.
# Figures are not checked (the machine is noisy).
#   cmake -DEXE=<bench> -DMPIEXEC=<mpiexec> -DFLAGS="-n;2;..." -P plan_bench_test.cmake
set(args --layers 4 --heads 2 --embd 64 --vocab 256 --context 32 --seq 32 --global-batch 4 --steps 1 --warmup 1 --rounds 2
    "--layouts" "1,1,0,2;1,2,0,1,full;1,2,0,1,none,zb-h1;1,2,0,1,none,interleaved,2")
execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ht-plan-bench: exit ${rc}")
endif()
foreach(expected "Spearman rank correlation" "largest memory error" "model's step time against the measured" "tp1 pp2 dp1 zero0" "one round against another" "| rounds ")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "ht-plan-bench: no line with '${expected}'")
  endif()
endforeach()
