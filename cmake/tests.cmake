# One cmocka executable per tests/test_*.c, each registered with CTest.
# Tests find the shared assets through PAGODA_ASSETS and the build tree
# through PAGODA_BUILD_DIR. When cross-compiling for aarch64, CTest runs each
# test under qemu (CMAKE_CROSSCOMPILING_EMULATOR: -cpu max) and registers a
# second copy "<name>_sve256" under -cpu max,sve256=on.
file(GLOB PAGODA_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
file(GLOB PAGODA_TEST_HELPERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/helpers/*.c)
foreach(src ${PAGODA_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${PAGODA_TEST_HELPERS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/helpers)
  target_link_libraries(${name} PRIVATE pagoda_core ${CMOCKA_LIB})
  set(env "PAGODA_ASSETS=${PAGODA_ASSETS};PAGODA_BUILD_DIR=${CMAKE_BINARY_DIR};PAGODA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}" TIMEOUT 600)
  if(CMAKE_CROSSCOMPILING AND PAGODA_ARCH STREQUAL "aarch64")
    add_test(NAME ${name}_sve256 COMMAND ${PAGODA_QEMU} -cpu max,sve256=on $<TARGET_FILE:${name}>)
    set_tests_properties(${name}_sve256 PROPERTIES ENVIRONMENT "${env}" TIMEOUT 900)
  endif()
endforeach()

# aarch64 only: the thread pool's atomics must be LSE instructions, not
# ldxr/stxr loops (tests/check_lse.sh disassembles the pool's objects).
if(CMAKE_CROSSCOMPILING AND PAGODA_ARCH STREQUAL "aarch64")
  find_program(PAGODA_OBJDUMP NAMES aarch64-linux-gnu-objdump)
  if(PAGODA_OBJDUMP)
    add_test(NAME check_lse COMMAND bash ${CMAKE_SOURCE_DIR}/tests/check_lse.sh
             ${PAGODA_OBJDUMP} "$<TARGET_OBJECTS:pagoda_core>")
  else()
    message(WARNING "aarch64-linux-gnu-objdump not found: check_lse test not registered")
  endif()
endif()
