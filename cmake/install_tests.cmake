# Tests of the install rules (cmake/install.cmake): `cmake --install` into a
# temporary DESTDIR and a program built against the installed header and
# library with pkg-config (tests/install/install_test.sh), and the man page
# against `pagoda --help` (tests/install/man_page.sh). The Debian package
# and container image tests are heavy and live outside ctest:
# `make test-package`, `make test-image` (scripts/test-package.sh, scripts/test-image.sh).
set(_install_test_env "")
set(_install_test_wrap "")
if(CMAKE_CROSSCOMPILING AND PAGODA_ARCH STREQUAL "aarch64")
  set(_install_test_env "PKG_CONFIG_LIBDIR=$ENV{PKG_CONFIG_LIBDIR}")
  set(_install_test_wrap ${PAGODA_QEMU} -cpu max)
endif()
# Not in the sanitizer build (`make asan`): its libraries are instrumented,
# so a user's program would need ASan's flags and runtime to link and run
# them; what is installed is the Release build.
if(NOT PAGODA_SANITIZE)
  add_test(NAME install_pkgconfig
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/install_test.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_SOURCE_DIR} ${PAGODA_ASSETS}/llm/stories260K-hf ${CMAKE_C_COMPILER}
                   ${_install_test_wrap})
  set_tests_properties(install_pkgconfig PROPERTIES TIMEOUT 600 ENVIRONMENT "${_install_test_env}")
endif()
add_test(NAME install_man_page
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/man_page.sh ${CMAKE_SOURCE_DIR}/docs/pagoda.1
                 ${_install_test_wrap} $<TARGET_FILE:pagoda>)
