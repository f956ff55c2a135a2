# ctest driver of ht-parallel-bench (bench/CMakeLists.txt): each mode once on a
# tiny model under mpirun, tables and --json, and the memory mode in fp32 and
# bf16 side by side; fails on a non-zero exit (which includes ZeRO-3's memory
# ratio outside its band and 1F1B holding more activations than GPipe, and
# every schedule running: interleaved 1F1B over 4 virtual stages, ZB-H1) or a
# missing summary line (bf16: the working copies exactly half of fp32's
# parameters). Timing figures are not checked.
#   cmake -DEXE=<bench> -DMPIEXEC=<mpiexec> -DFLAGS="-n;2;..." -P parallel_bench_test.cmake
set(_tiny "--layers 4 --heads 2 --embd 64 --vocab 256 --context 32 --seq 16 --micro-batch 2")
set(_runs
  "--mode memory|ZeRO-3 / DDP"
  "--mode memory --zero 0,3 --json|\"type\":\"memory_summary\""
  "--mode memory --precision fp32,bf16|bf16 / fp32, ZeRO 3: parameters 0.500"
  "--mode overlap --steps 2 --warmup 1|hidden share"
  "--mode overlap --steps 1 --warmup 0 --no-one-bucket --json|\"type\":\"overlap_summary\""
  "--mode bubble --pp 2 --steps 1 --warmup 0 --micro-batches 2,4|1F1B peak saved bytes below"
  "--mode bubble --pp 2 --steps 1 --warmup 0 --micro-batches 3 --schedules 1f1b,gpipe --json|\"type\":\"bubble_summary\""
  "--mode bubble --pp 2 --steps 1 --warmup 0 --micro-batches 2 --schedules 1f1b,interleaved,zb-h1|interleaved")
foreach(run IN LISTS _runs)
  string(REPLACE "|" ";" parts "${run}")
  list(GET parts 0 shown)
  list(GET parts 1 expected)
  separate_arguments(args UNIX_COMMAND "${shown} ${_tiny}")
  execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${EXE} ${args}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${shown}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ht-parallel-bench ${shown}: exit ${rc}")
  endif()
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "ht-parallel-bench ${shown}: no line with '${expected}'")
  endif()
endforeach()
