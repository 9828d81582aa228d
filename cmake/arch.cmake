# Architecture selection and per-file ISA flags.
#
# Kernels for one ISA live in files whose name ends in a suffix naming it;
# only those files are compiled with that ISA's flags, and the run-time
# dispatch table (src/kernels/dispatch.c) decides whether they are ever called.
# The rest of the binary targets the baseline (x86-64 / armv8.2-a), so one
# binary runs on every machine of its architecture.
#
#   x86_64:  *_avx2.c  *_avx512.c  *_avx512bf16.c  *_avx512vnni.c  *_avxvnni.c  *_amx.c
#   aarch64: *_neon.c  *_dotprod.c  *_bf16.c  *_i8mm.c  *_sve.c  *_sve2.c
#
# Files under src/kernels/x86/ are built only for x86_64, src/kernels/arm/
# only for aarch64.

if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(PAGODA_ARCH x86_64)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(PAGODA_ARCH aarch64)
else()
  message(FATAL_ERROR "pagoda supports x86_64 and aarch64, not ${CMAKE_SYSTEM_PROCESSOR}")
endif()
message(STATUS "pagoda: building for ${PAGODA_ARCH}")

if(PAGODA_ARCH STREQUAL "aarch64")
  # armv8.2-a includes LSE atomics (v8.1): C11 atomics compile to ldadd/cas/swp.
  add_compile_options(-march=armv8.2-a)
endif()

function(pagoda_filter_arch_sources var)
  set(list ${${var}})
  if(PAGODA_ARCH STREQUAL "x86_64")
    list(FILTER list EXCLUDE REGEX "/arm/")
  else()
    list(FILTER list EXCLUDE REGEX "/x86/")
  endif()
  set(${var} ${list} PARENT_SCOPE)
endfunction()

set(PAGODA_X86_AVX512 "-mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mavx2 -mf16c")
set(PAGODA_ISA_SUFFIX_FLAGS
  "_avx2.c=-mavx2 -mfma -mf16c"
  "_avx512.c=${PAGODA_X86_AVX512}"
  "_avx512bf16.c=${PAGODA_X86_AVX512} -mavx512bf16"
  "_avx512vnni.c=${PAGODA_X86_AVX512} -mavx512vnni"
  "_avxvnni.c=-mavx2 -mfma -mf16c -mavxvnni"
  "_amx.c=${PAGODA_X86_AVX512} -mavx512bf16 -mamx-tile -mamx-int8 -mamx-bf16"
  "_neon.c=-march=armv8.2-a+fp16"
  "_dotprod.c=-march=armv8.2-a+fp16+dotprod"
  "_bf16.c=-march=armv8.2-a+fp16+dotprod+bf16"
  "_i8mm.c=-march=armv8.2-a+fp16+dotprod+bf16+i8mm"
  "_sve.c=-march=armv8.2-a+fp16+dotprod+bf16+i8mm+sve"
  "_sve2.c=-march=armv8.2-a+fp16+dotprod+bf16+i8mm+sve2"
)

function(pagoda_set_isa_flags sources)
  foreach(src ${sources})
    foreach(entry ${PAGODA_ISA_SUFFIX_FLAGS})
      # Split at the FIRST "=" only: the flags themselves contain "=" (-march=...).
      string(FIND "${entry}" "=" eq)
      string(SUBSTRING "${entry}" 0 ${eq} suffix)
      math(EXPR fstart "${eq} + 1")
      string(SUBSTRING "${entry}" ${fstart} -1 flags)
      string(LENGTH "${suffix}" slen)
      string(LENGTH "${src}" len)
      if(len GREATER slen)
        math(EXPR start "${len} - ${slen}")
        string(SUBSTRING "${src}" ${start} ${slen} tail)
        if(tail STREQUAL suffix)
          separate_arguments(fl UNIX_COMMAND "${flags}")
          set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS "${fl}")
        endif()
      endif()
    endforeach()
  endforeach()
endfunction()
