# libFuzzer targets (`make fuzz`, docs/FUZZING.md): one executable per
# fuzz/fuzz_*.c, linked with libFuzzer's main, ASan and UBSan, the library
# and the shared helpers fuzz/fz_*.c (temporary files, asset paths, common
# drivers). Built only when PAGODA_FUZZ is on (clang); the custom target
# `fuzz_targets` builds them all; scripts/fuzz.sh makes the seed corpora and
# runs them.
add_custom_target(fuzz_targets)
file(GLOB PAGODA_FUZZERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/fuzz_*.c)
file(GLOB PAGODA_FUZZ_HELPERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/fuzz/fz_*.c)
if(NOT PAGODA_HAVE_AUDIO_DECODE)
  list(FILTER PAGODA_FUZZERS EXCLUDE REGEX "/fuzz_audio_decode\\.c$")
endif()
add_library(pagoda_fuzz_helpers STATIC ${PAGODA_FUZZ_HELPERS})
target_link_libraries(pagoda_fuzz_helpers PUBLIC pagoda_core)
target_compile_definitions(pagoda_fuzz_helpers PRIVATE PAGODA_FUZZ_ASSETS="${PAGODA_ASSETS}")
set_target_properties(pagoda_fuzz_helpers PROPERTIES EXCLUDE_FROM_ALL ON)
foreach(src ${PAGODA_FUZZERS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} EXCLUDE_FROM_ALL ${src})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/fuzz)
  target_link_libraries(${name} PRIVATE pagoda_fuzz_helpers pagoda_core)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(fuzz_targets ${name})
endforeach()
