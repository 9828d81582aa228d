# Debian packages by CPack (`make package`, or `cpack -G DEB` in a build
# configured with -DCMAKE_INSTALL_PREFIX=/usr): pagoda_VERSION_ARCH.deb (the
# command, libpagoda.so.0, man page, docs) and pagoda-dev_VERSION_ARCH.deb
# (header, static library, pagoda.pc). ARCH is the target's Debian name:
# amd64 natively, arm64 in the aarch64 cross build (cmake/aarch64-linux-gnu.cmake).
#
# Depends of pagoda: dpkg-shlibdeps reads the ELF files' NEEDED libraries and
# the shlibs/symbols files of the Debian packages that ship them; in the
# cross build it runs with DEB_HOST_ARCH=arm64 (cmake/cpack_project.cmake.in)
# so that it searches the arm64 multiarch libraries (the :arm64 packages
# scripts/install-deps.sh installs). pagoda-dev depends on pagoda and on the
# -dev packages of the modules pagoda.pc lists (static links).
if(PAGODA_ARCH STREQUAL "aarch64")
  set(PAGODA_DEB_ARCH arm64)
elseif(PAGODA_ARCH STREQUAL "x86_64")
  set(PAGODA_DEB_ARCH amd64)
else()
  set(PAGODA_DEB_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME pagoda)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "pagoda")
set(CPACK_PACKAGE_CONTACT "pagoda developers <pagoda@localhost>")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put it before each
# component's description; their first lines are the synopses instead.
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL pagoda dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${PAGODA_DEB_ARCH})
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_PAGODA_PACKAGE_NAME pagoda)
set(CPACK_DEBIAN_PAGODA_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PAGODA_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PAGODA_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_COMPONENT_PAGODA_DESCRIPTION
    "LLM inference and serving engine for CPU servers
pagoda serves large language models on x86-64 and Arm CPUs with an
OpenAI-compatible HTTP server (pagoda serve): paged KV cache, continuous
batching, chunked prefill, prefix caching and INT8/INT4 weights. It reads
Hugging Face model directories and GGUF files. This package holds the
pagoda command and the shared library libpagoda.so.0.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME pagoda-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(_dev_depends "pagoda (= ${PROJECT_VERSION}), libpcre2-dev, libutf8proc-dev, libcjson-dev,"
                 " libmicrohttpd-dev, libcurl4-openssl-dev | libcurl-dev, nettle-dev, libxxhash-dev,"
                 " zlib1g-dev")
if(PAGODA_HAVE_AUDIO_DECODE)
  list(APPEND _dev_depends ", libsndfile1-dev, libsoxr-dev, libavformat-dev, libavcodec-dev,"
                           " libavutil-dev")
endif()
string(JOIN "" CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ${_dev_depends})
set(CPACK_COMPONENT_DEV_DESCRIPTION
    "LLM inference and serving engine for CPU servers (development files)
The C API of pagoda (pagoda.h): load a model, add requests and step the
engine. Static library, the libpagoda.so link and pagoda.pc for pkg-config.")

if(CMAKE_CROSSCOMPILING)
  configure_file(${CMAKE_SOURCE_DIR}/cmake/cpack_project.cmake.in
                 ${CMAKE_BINARY_DIR}/cpack_project.cmake @ONLY)
  set(CPACK_PROJECT_CONFIG_FILE ${CMAKE_BINARY_DIR}/cpack_project.cmake)
endif()
include(CPack)
