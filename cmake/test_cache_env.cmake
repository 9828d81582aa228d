# Every test gets its own packed-weight cache directory under the build tree
# (PAGODA_CACHE_DIR, model/pack_cache.h), so that tests never read or write
# ~/.cache and parallel tests never share cache files. Included after every
# file that adds tests.
get_property(_pagoda_all_tests DIRECTORY PROPERTY TESTS)
foreach(_t ${_pagoda_all_tests})
  set_property(TEST ${_t} APPEND PROPERTY ENVIRONMENT
               "PAGODA_CACHE_DIR=${CMAKE_BINARY_DIR}/test-cache/${_t}")
endforeach()
