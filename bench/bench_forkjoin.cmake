# bench_forkjoin: the pool vs OpenMP. Included from bench/CMakeLists.txt with
# ${name} = bench_forkjoin and ${src} = its source.
#  - bench_forkjoin itself: -fopenmp, linked with GCC's libgomp.
#  - peer_forkjoin_llvmomp: the same source, compiled with -fopenmp but linked
#    against LLVM's libomp (Debian libomp-dev), which exports the GOMP_* entry
#    points GCC emits. Named without the bench_ prefix so bench/run.sh does
#    not run it on its own: the bench_forkjoin driver runs it.
find_package(OpenMP COMPONENTS C)
if(NOT OpenMP_C_FOUND)
  message(WARNING "bench_forkjoin: OpenMP not found; the benchmark needs -fopenmp")
  return()
endif()
target_compile_options(${name} PRIVATE ${OpenMP_C_FLAGS} -O3)
target_link_libraries(${name} PRIVATE OpenMP::OpenMP_C)

if(NOT CMAKE_CROSSCOMPILING)   # the host's libomp would not link into an aarch64 binary
  find_library(PAGODA_LIBOMP NAMES omp libomp.so.5
               PATHS /usr/lib/llvm-16/lib /usr/lib/llvm-15/lib /usr/lib/llvm-14/lib
               NO_DEFAULT_PATH)
endif()
if(PAGODA_LIBOMP)
  add_executable(peer_forkjoin_llvmomp EXCLUDE_FROM_ALL ${src})
  target_compile_options(peer_forkjoin_llvmomp PRIVATE ${OpenMP_C_FLAGS} -O3)
  target_link_libraries(peer_forkjoin_llvmomp PRIVATE pagoda_core ${PAGODA_LIBOMP})
  get_filename_component(_libomp_dir ${PAGODA_LIBOMP} DIRECTORY)
  set_target_properties(peer_forkjoin_llvmomp PROPERTIES BUILD_RPATH ${_libomp_dir})
  add_dependencies(benchmarks peer_forkjoin_llvmomp)
else()
  message(STATUS "bench_forkjoin: LLVM libomp not found; comparing with libgomp only")
endif()
