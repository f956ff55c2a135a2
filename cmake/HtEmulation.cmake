# The emulated device (HT_CUDA_EMULATION): a .cu file becomes C++ for the
# host compiler once emu/rewrite_launches.py has rewritten its launches.
#   ht_emu_sources(OUT_VAR file.cu ...): OUT_VAR gets the generated .cc paths.
function(ht_emu_sources out_var)
  set(outs)
  foreach(src IN LISTS ARGN)
    get_filename_component(abs ${src} ABSOLUTE)
    file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${abs})
    string(REGEX REPLACE "\\.cu$" ".cc" rel ${rel})
    set(out ${PROJECT_BINARY_DIR}/emu_sources/${rel})
    get_filename_component(dir ${out} DIRECTORY)
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/emu/rewrite_launches.py ${abs} ${out}
      DEPENDS ${abs} ${PROJECT_SOURCE_DIR}/emu/rewrite_launches.py
      COMMENT "Rewriting the launches of ${rel} for the emulated device")
    list(APPEND outs ${out})
  endforeach()
  set(${out_var} ${outs} PARENT_SCOPE)
endfunction()
