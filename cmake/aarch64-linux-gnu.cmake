# Toolchain file: cross-compile pagoda for aarch64 Linux with Debian's
# gcc-aarch64-linux-gnu, linking the arm64 multiarch -dev packages, and run
# the tests under qemu-aarch64 (-cpu max: NEON, dotprod, BF16, I8MM, SVE/SVE2).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr/lib/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# qemu runs the tests (CMakeLists.txt requires it when PAGODA_BUILD_TESTS is
# on); packaging the cross build (`make package-arm64`) does not need it.
find_program(PAGODA_QEMU qemu-aarch64)
if(PAGODA_QEMU)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${PAGODA_QEMU} -cpu max)
endif()
