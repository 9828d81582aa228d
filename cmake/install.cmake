# Install rules, the shared library, pagoda.pc and the Debian packages.
#
# `cmake --install build [--prefix P]` (or `make install PREFIX=P`, with
# DESTDIR for staging) puts, under GNUInstallDirs' paths:
#   bin/pagoda                                   the command
#   LIBDIR/libpagoda.so.0 (+ .so.0.x.y, .so)     shared library: exports only
#                                                the pagoda_* API (libpagoda.map)
#   LIBDIR/libpagoda.a                           static library (pagoda_core)
#   LIBDIR/pkgconfig/pagoda.pc                   `pkg-config --cflags --libs pagoda`
#   LIBDIR/pkgconfig/pagoda-static.pc            the same for linking libpagoda.a
#   include/pagoda.h, include/pagoda/status.h    the public API, nothing internal
#   share/man/man1/pagoda.1                      the man page (docs/pagoda.1)
#   share/doc/pagoda/README.md
# gen_model and the other tools/ programs are not installed: they make
# random-weight models for tests and measure kernels (developer tools).
#
# Components (one Debian package each, `make package`): "pagoda" (command,
# shared library, man page, docs) and "dev" -> pagoda-dev (header, static
# library, the .so link, pagoda.pc).
# GNUInstallDirs picks Debian's multiarch lib/<triplet> for prefix /usr only
# when building natively; the cross build (the arm64 package) needs it too.
if(CMAKE_CROSSCOMPILING AND CMAKE_LIBRARY_ARCHITECTURE AND EXISTS /etc/debian_version
   AND CMAKE_INSTALL_PREFIX MATCHES "^/usr/?$" AND NOT DEFINED CMAKE_INSTALL_LIBDIR)
  set(CMAKE_INSTALL_LIBDIR "lib/${CMAKE_LIBRARY_ARCHITECTURE}" CACHE PATH
      "Object code libraries (lib/<multiarch triplet>: Debian, prefix /usr)")
endif()
include(GNUInstallDirs)

# ---- libpagoda.so from pagoda_core's (position-independent) objects
get_target_property(_pagoda_core_libs pagoda_core INTERFACE_LINK_LIBRARIES)
add_library(pagoda_shared SHARED $<TARGET_OBJECTS:pagoda_core>)
set_target_properties(pagoda_shared PROPERTIES
  OUTPUT_NAME pagoda VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${CMAKE_SOURCE_DIR}/cmake/libpagoda.map)
target_link_libraries(pagoda_shared PRIVATE ${_pagoda_core_libs})
target_link_options(pagoda_shared PRIVATE
  -Wl,--version-script=${CMAKE_SOURCE_DIR}/cmake/libpagoda.map)
if(NOT PAGODA_SANITIZE)   # the sanitizer runtimes' symbols come from the executable
  target_link_options(pagoda_shared PRIVATE -Wl,--no-undefined)
endif()

# ---- pkg-config files. pagoda.pc: the shared library (`pkg-config --static`
# adds the modules libpagoda.a needs, and with them their own private
# dependencies: a fully static link). pagoda-static.pc: libpagoda.a with its
# dependencies as shared libraries, what a static link on Debian wants.
# Written for CMAKE_INSTALL_PREFIX here; the install step rewrites their
# prefix= line for the prefix really installed to (`cmake --install --prefix`).
set(PAGODA_PC_DEPS
    "libpcre2-8 libutf8proc libcjson libmicrohttpd libcurl nettle libxxhash zlib")
if(PAGODA_HAVE_AUDIO_DECODE)
  string(APPEND PAGODA_PC_DEPS " sndfile soxr libavformat libavcodec libavutil")
endif()
foreach(_dir LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_dir}}")
    set(PAGODA_PC_${_dir} "${CMAKE_INSTALL_${_dir}}")
  else()
    set(PAGODA_PC_${_dir} "\${prefix}/${CMAKE_INSTALL_${_dir}}")
  endif()
endforeach()
set(PAGODA_PC_FILES pagoda pagoda-static)
foreach(_pc ${PAGODA_PC_FILES})
  configure_file(${CMAKE_SOURCE_DIR}/cmake/${_pc}.pc.in ${CMAKE_BINARY_DIR}/${_pc}.pc @ONLY)
endforeach()

# ---- install rules
install(TARGETS pagoda RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT pagoda)
install(TARGETS pagoda_shared
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT pagoda NAMELINK_SKIP)
install(TARGETS pagoda_shared
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev NAMELINK_ONLY)
install(TARGETS pagoda_core ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(FILES ${CMAKE_SOURCE_DIR}/include/pagoda.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(FILES ${CMAKE_SOURCE_DIR}/include/pagoda/status.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pagoda COMPONENT dev)
install(CODE "set(_pagoda_pc_files \"${PAGODA_PC_FILES}\")
              set(_pagoda_bin \"${CMAKE_BINARY_DIR}\")" COMPONENT dev)
install(CODE [[
  foreach(_pc ${_pagoda_pc_files})
    file(READ "${_pagoda_bin}/${_pc}.pc" _text)
    string(REGEX REPLACE "^prefix=[^\n]*" "prefix=${CMAKE_INSTALL_PREFIX}" _text "${_text}")
    file(WRITE "${_pagoda_bin}/install/${_pc}.pc" "${_text}")
  endforeach()
]] COMPONENT dev)
foreach(_pc ${PAGODA_PC_FILES})
  install(FILES ${CMAKE_BINARY_DIR}/install/${_pc}.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
endforeach()
install(FILES ${CMAKE_SOURCE_DIR}/docs/pagoda.1
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT pagoda)
install(FILES ${CMAKE_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT pagoda)

include(cmake/package.cmake)
