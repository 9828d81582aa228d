# bench_whisper: writes its random models with the generator library
# (tools/gen/gen_whisper.c). Included from bench/CMakeLists.txt with
# ${name} = bench_whisper.
target_link_libraries(${name} PRIVATE pagoda_gen)
