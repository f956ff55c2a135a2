# ctest driver: the plan's memory model against the allocator. ht-plan-bench
# runs every default layout of a tiny model (every tp x pp mesh the world
# allows, ZeRO 0-3 where dp > 1, the recomputation modes) and measures each
# rank's peak bytes by category; the model's figure for the rank's stage must
# lie within 5% of what the allocator counted, for the state (parameters,
# gradients, optimizer) and for the activations. Byte counts do not depend on
# the machine's speed: unlike the step times, they are checked.
#   cmake -DEXE=<ht-plan-bench> -DMPIEXEC=<mpiexec> -DFLAGS="-n;4;..." -DMODEL=gpt|llama -P plan_memory_test.cmake
set(args --model ${MODEL} --layers 4 --heads 4 --embd 64 --vocab 256 --context 32 --seq 32 --global-batch 8
    --steps 1 --warmup 1 --json)
if(MODEL STREQUAL "llama")
  list(APPEND args --kv-heads 2)
endif()
execute_process(COMMAND ${MPIEXEC} ${FLAGS} ${EXE} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message("${out}${err}")
  message(FATAL_ERROR "ht-plan-bench: exit ${rc}")
endif()
string(REGEX MATCH "{[^\n]*\"type\":\"plan_summary\"[^\n]*}" summary "${out}")
if(summary STREQUAL "")
  message("${out}${err}")
  message(FATAL_ERROR "ht-plan-bench: no plan_summary line")
endif()
string(JSON layouts GET "${summary}" layouts)
string(JSON state GET "${summary}" worst_state_error)
string(JSON activations GET "${summary}" worst_activation_error)
message("${MODEL}: ${layouts} layouts, worst memory error ${state} (state), ${activations} (activations)")
foreach(kind state activations)
  if(${kind} GREATER 0.05)
    message("${out}")
    message(FATAL_ERROR "the memory model and the allocator disagree by ${${kind}} (over 5%) in ${kind}: see the layout lines above")
  endif()
endforeach()
if(layouts LESS 8)
  message(FATAL_ERROR "only ${layouts} layouts ran; expected every default layout")
endif()
