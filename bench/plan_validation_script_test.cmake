# ctest driver of bench/plan_validation.sh at one rank (two rounds of one
# step): fails on a non-zero exit or when a model's row is missing.
#   cmake -DSCRIPT=<plan_validation.sh> -DEXE=<ht-plan-bench> -P plan_validation_script_test.cmake
execute_process(COMMAND ${SCRIPT} ${EXE} 1 2 1 fp32 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "plan_validation.sh: exit ${rc}")
endif()
foreach(expected "| model | ranks | layouts | round against round |" "| gpt | 1 | 3 | " "| llama | 1 | 3 | ")
  string(FIND "${out}" "${expected}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "plan_validation.sh: no line with '${expected}'")
  endif()
endforeach()
