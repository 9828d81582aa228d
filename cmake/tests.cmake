# One cmocka executable per tests/test_*.c, each registered with CTest,
# linked with the library, the random-model generator (pagoda_gen) and
# tests/helpers/*.c.
# Tests find the shared assets through PAGODA_ASSETS and the build tree
# through PAGODA_BUILD_DIR; tests that start the `pagoda` binary prefix it with
# PAGODA_EXEC_WRAPPER (empty natively, qemu in the cross build).
#
# The aarch64 cross build runs tests under qemu (CMAKE_CROSSCOMPILING_EMULATOR:
# -cpu max, SVE vector length 64 bytes) -- emulation is ~50x slower than the
# host, and CI's whole run must stay well under 30 minutes, so tests fall in
# three sets:
#   * kernel tests (PAGODA_SVE_VL_TESTS): the tests of the SIMD kernels
#     themselves, each against its scalar reference. Run under -cpu max AND
#     again as "<name>_sve256" under -cpu max,sve256=on (vector-length-agnostic
#     code at a second VL). Model-level tests (oracles, whisper, llama) use the
#     same kernels, so one VL is enough for them.
#   * every other test: under -cpu max once (models, engine, scheduler,
#     parsers: the Arm build of the code, at one vector length).
#   * PAGODA_HOST_ONLY_TESTS: tests of code with no architecture-specific
#     path of ours that take minutes under emulation: audio decoding through
#     libav*/libsndfile; command-line parsing (~150 starts of the `pagoda`
#     binary, each ~0.5 s of emulated dynamic linking); the grammar engine
#     (integer automata and tries over a 128k vocabulary); Whisper's decoding
#     loop, encoder scheduling and `pagoda transcribe` (test_speech,
#     test_whisper_engine, test_speech_cli: 150-400 s each under qemu, where
#     the Whisper model's Arm kernels are checked against the oracle by
#     test_whisper and the audio endpoints by test_server_audio); and the
#     data-parallel nginx test (cmake/server_tests.cmake registers it for
#     native builds only: two servers + nginx, no Arm code path of ours).
#     They run in the native build only.
# Those runs also tell tests what the emulated CPU must show
# (PAGODA_EXPECT_FEATURES, and PAGODA_EXPECT_SVE_VL_BYTES).
set(PAGODA_SVE_VL_TESTS
    test_attention test_cpu test_dispatch test_dtype test_gated_delta test_gemm
    test_gemm_grouped test_kquant test_moe test_mxfp4 test_ops test_qgemm test_vexp
    test_vops)
set(PAGODA_HOST_ONLY_TESTS test_audio_decode test_cli_args test_grammar test_speech test_speech_cli
    test_whisper_engine test_tp test_chat)
# Features qemu-aarch64 -cpu max must show (names as in `pagoda env`).
set(PAGODA_QEMU_MAX_FEATURES "asimd,fp16,dotprod,i8mm,bf16,sve,sve2,lse")

file(GLOB PAGODA_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/test_*.c)
if(NOT PAGODA_HAVE_AUDIO_DECODE)   # see CMakeLists.txt: the decoders were not built
  list(FILTER PAGODA_TESTS EXCLUDE REGEX "/test_audio_decode\\.c$")
endif()
file(GLOB PAGODA_TEST_HELPERS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/helpers/*.c)
foreach(src ${PAGODA_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src} ${PAGODA_TEST_HELPERS})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/helpers)
  target_link_libraries(${name} PRIVATE pagoda_gen pagoda_core ${CMOCKA_LIB})
  if(name STREQUAL "test_detok_alloc") # counts the library's allocations
    target_link_options(${name} PRIVATE "LINKER:--wrap=malloc,--wrap=calloc,--wrap=realloc")
  endif()
  set(env "PAGODA_ASSETS=${PAGODA_ASSETS};PAGODA_BUILD_DIR=${CMAKE_BINARY_DIR};PAGODA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
  set(_cross_arm OFF)
  if(CMAKE_CROSSCOMPILING AND PAGODA_ARCH STREQUAL "aarch64")
    set(_cross_arm ON)
  endif()
  if(_cross_arm AND name IN_LIST PAGODA_HOST_ONLY_TESTS)
    continue()    # built (it must compile for Arm), run natively only
  endif()
  add_test(NAME ${name} COMMAND ${name})
  if(_cross_arm)
    set(qemu_env "${env};PAGODA_EXPECT_FEATURES=${PAGODA_QEMU_MAX_FEATURES}")
    # test_engine takes ~250 s alone under qemu and passed 600 s on a loaded
    # 2-core machine (a hang guard, not a speed check).
    set(_qemu_timeout 600)
    if(name STREQUAL "test_engine")
      set(_qemu_timeout 1500)
    endif()
    # Tests that start the pagoda binary prepend PAGODA_EXEC_WRAPPER (qemu).
    set_tests_properties(${name} PROPERTIES TIMEOUT ${_qemu_timeout}
                         ENVIRONMENT "${qemu_env};PAGODA_EXPECT_SVE_VL_BYTES=64;PAGODA_EXEC_WRAPPER=${PAGODA_QEMU} -cpu max")
    if(name IN_LIST PAGODA_SVE_VL_TESTS)
      add_test(NAME ${name}_sve256 COMMAND ${PAGODA_QEMU} -cpu max,sve256=on $<TARGET_FILE:${name}>)
      set_tests_properties(${name}_sve256 PROPERTIES TIMEOUT 900
                           ENVIRONMENT "${qemu_env};PAGODA_EXPECT_SVE_VL_BYTES=32;PAGODA_EXEC_WRAPPER=${PAGODA_QEMU} -cpu max,sve256=on")
    endif()
  else()
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${env}" TIMEOUT 600)
  endif()
endforeach()

# CI machines differ: some x86 hosts have AVX-512 + AVX512_BF16, some only
# AVX2, and the model-level tests' tolerances must hold on both (a test tuned
# on one failed CI on the other). The tests comparing whole models against
# references run again with the kernels forced down to AVX2 (PAGODA_ISA), so
# an AVX-512 host checks the AVX2 paths' numerics too (on an AVX2 host these
# repeat the default run).
set(PAGODA_ISA_AVX2_TESTS test_oracles test_quant_formats test_llama test_whisper test_tp test_mtp test_mtp_engine)
if(PAGODA_ARCH STREQUAL "x86_64" AND NOT CMAKE_CROSSCOMPILING)
  foreach(name ${PAGODA_ISA_AVX2_TESTS})
    add_test(NAME ${name}_avx2 COMMAND ${name})
    set_tests_properties(${name}_avx2 PROPERTIES TIMEOUT 600 ENVIRONMENT
      "PAGODA_ASSETS=${PAGODA_ASSETS};PAGODA_BUILD_DIR=${CMAKE_BINARY_DIR};PAGODA_SOURCE_DIR=${CMAKE_SOURCE_DIR};PAGODA_ISA=avx2")
  endforeach()
endif()

# tools/gguf_kl (issue 23's KL comparison with llama-perplexity): self KL 0, Q8_0 closer than
# Q2_K, malformed .kld files refused (tests/check_gguf_kl.sh; host build only: the script runs
# the tools directly).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME check_gguf_kl COMMAND bash ${CMAKE_SOURCE_DIR}/tests/check_gguf_kl.sh
           $<TARGET_FILE:gen_model> $<TARGET_FILE:gguf_kl>)
  set_tests_properties(check_gguf_kl PROPERTIES TIMEOUT 600)
endif()

# `pagoda env` end to end (under qemu -cpu max for the aarch64 build: the
# emulator is prepended to target-name commands automatically).
add_test(NAME pagoda_env COMMAND pagoda env)
add_test(NAME pagoda_env_forced_scalar COMMAND pagoda env)
set_tests_properties(pagoda_env_forced_scalar PROPERTIES ENVIRONMENT "PAGODA_ISA=scalar"
                     PASS_REGULAR_EXPRESSION "chosen +scalar\n")
# The findings section names the forced level, its cost and the fix (every
# build machine has a SIMD level above scalar).
add_test(NAME pagoda_env_finding_forced_isa COMMAND pagoda env)
set_tests_properties(pagoda_env_finding_forced_isa PROPERTIES ENVIRONMENT "PAGODA_ISA=scalar"
  PASS_REGULAR_EXPRESSION "\nfindings\n(.*\n)?  - kernels run at ISA level scalar \\(PAGODA_ISA\\) while this CPU supports [a-z0-9]+\n      cost: no SIMD[^\n]*\n      fix:  unset PAGODA_ISA")
add_test(NAME pagoda_env_bad_isa COMMAND pagoda env)
set_tests_properties(pagoda_env_bad_isa PROPERTIES ENVIRONMENT "PAGODA_ISA=bogus"
                     PASS_REGULAR_EXPRESSION "pagoda env: PAGODA_ISA=bogus: unknown ISA level")
if(CMAKE_CROSSCOMPILING AND PAGODA_ARCH STREQUAL "aarch64")
  add_test(NAME pagoda_env_qemu_max_features COMMAND pagoda env)
  set_tests_properties(pagoda_env_qemu_max_features PROPERTIES PASS_REGULAR_EXPRESSION
    "dotprod +yes\n +i8mm +yes\n +bf16 +yes\n +sve +yes\n +sve2 +yes\n +lse +yes\n +sve vector len +64 bytes.*chosen +sve\n.*dot_f32 +sve\n")
  add_test(NAME pagoda_env_sve256 COMMAND ${PAGODA_QEMU} -cpu max,sve256=on $<TARGET_FILE:pagoda> env)
  set_tests_properties(pagoda_env_sve256 PROPERTIES PASS_REGULAR_EXPRESSION "sve vector len +32 bytes")
endif()
add_test(NAME pagoda_env_bad_isa_fails COMMAND pagoda env)
set_tests_properties(pagoda_env_bad_isa_fails PROPERTIES ENVIRONMENT "PAGODA_ISA=bogus" WILL_FAIL TRUE)

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

# `pagoda env` shows the pool's settings and reports a bad PAGODA_CPUS.
add_test(NAME pagoda_env_pool COMMAND pagoda env)
set_tests_properties(pagoda_env_pool PROPERTIES ENVIRONMENT "PAGODA_BLOCKTIME_US=77"
                     PASS_REGULAR_EXPRESSION "pool blocktime +77 us spin, then futex sleep \\(PAGODA_BLOCKTIME_US\\)")
add_test(NAME pagoda_env_bad_cpus COMMAND pagoda env)
set_tests_properties(pagoda_env_bad_cpus PROPERTIES ENVIRONMENT "PAGODA_CPUS=0-"
                     PASS_REGULAR_EXPRESSION "PAGODA_CPUS: '0-' ends at offset 2 where a range end was expected; using the default")

# `pagoda bench serve` option handling (the client itself is tested end to
# end by tests/test_bench_serve.c against an in-process fake server).
add_test(NAME pagoda_bench_serve_bad_option COMMAND pagoda bench serve --bogus)
set_tests_properties(pagoda_bench_serve_bad_option PROPERTIES
                     PASS_REGULAR_EXPRESSION "pagoda bench serve: unknown option '--bogus'")
add_test(NAME pagoda_bench_serve_bad_rate COMMAND pagoda bench serve --request-rate 0)
set_tests_properties(pagoda_bench_serve_bad_rate PROPERTIES
                     PASS_REGULAR_EXPRESSION "bad value '0' for --request-rate")
add_test(NAME pagoda_bench_serve_needs_tokenizer COMMAND pagoda bench serve --model m)
set_tests_properties(pagoda_bench_serve_needs_tokenizer PROPERTIES
                     PASS_REGULAR_EXPRESSION "needs --tokenizer PATH")
# Nothing listens on port 1: every request fails, the table says so, exit 1.
add_test(NAME pagoda_bench_serve_refused COMMAND pagoda bench serve --base-url http://127.0.0.1:1
         --model m --prompt-as-ids --vocab-size 50 --num-prompts 2 --ready-check-timeout-sec 0)
set_tests_properties(pagoda_bench_serve_refused PROPERTIES
                     PASS_REGULAR_EXPRESSION "Failed requests: +2 ")
add_test(NAME pagoda_bench_serve_refused_fails COMMAND pagoda bench serve --base-url http://127.0.0.1:1
         --model m --prompt-as-ids --vocab-size 50 --num-prompts 2 --ready-check-timeout-sec 0)
set_tests_properties(pagoda_bench_serve_refused_fails PROPERTIES WILL_FAIL TRUE)
# `pagoda serve` output parser flags: unknown names are usage errors
add_test(NAME pagoda_serve_bad_tool_parser COMMAND pagoda serve m --tool-call-parser pythonic)
set_tests_properties(pagoda_serve_bad_tool_parser PROPERTIES PASS_REGULAR_EXPRESSION
                     "bad value 'pythonic' for --tool-call-parser \\(want hermes, llama3_json, mistral or harmony\\)")
add_test(NAME pagoda_serve_bad_reasoning_parser COMMAND pagoda serve m --reasoning-parser granite)
set_tests_properties(pagoda_serve_bad_reasoning_parser PROPERTIES PASS_REGULAR_EXPRESSION
                     "bad value 'granite' for --reasoning-parser \\(want qwen3 or deepseek_r1\\)")
# `pagoda chat-template` end to end: a template file, and a model without one.
add_test(NAME pagoda_chat_template COMMAND pagoda chat-template
         ${PAGODA_ASSETS}/chat-templates/Qwen-Qwen3-0.6B.jinja
         --messages "[{\"role\":\"user\",\"content\":\"Hi\"}]" --add-generation-prompt
         --kwargs "{\"enable_thinking\":false}")
set_tests_properties(pagoda_chat_template PROPERTIES PASS_REGULAR_EXPRESSION
  "^<\\|im_start\\|>user\nHi<\\|im_end\\|>\n<\\|im_start\\|>assistant\n<think>\n\n</think>\n\n$")
add_test(NAME pagoda_chat_template_missing COMMAND pagoda chat-template
         ${PAGODA_ASSETS}/llm/stories260K-hf --messages "[]")
set_tests_properties(pagoda_chat_template_missing PROPERTIES PASS_REGULAR_EXPRESSION
  "no chat template .*pass --chat-template FILE")
add_test(NAME pagoda_chat_template_missing_fails COMMAND pagoda chat-template
         ${PAGODA_ASSETS}/llm/stories260K-hf --messages "[]")
set_tests_properties(pagoda_chat_template_missing_fails PROPERTIES WILL_FAIL TRUE)

# `pagoda transcribe` end to end on the whisper-tiny-random oracle (random
# weights: only the shape of each response format is checked; the text is
# checked against the oracle's ids by tests/test_speech.c).
# (native build only: five Whisper transcriptions, ~45 s each under qemu;
# test_whisper and test_server_audio cover Whisper in the Arm build)
if(PAGODA_HAVE_AUDIO_DECODE AND NOT CMAKE_CROSSCOMPILING)
  set(_tr_args ${PAGODA_ASSETS}/oracles/whisper-tiny-random/hf ${PAGODA_ASSETS}/whisper/jfk.wav
      --tokenizer ${PAGODA_ASSETS}/whisper/multilingual.tiktoken --dtype float32 --kv-cache-memory 8MiB
      --language en --temperature 0.3 --seed 3)
  # (the regexes see stderr too, where the engine logs a line)
  add_test(NAME pagoda_transcribe_json COMMAND pagoda transcribe ${_tr_args} --response-format json)
  set_tests_properties(pagoda_transcribe_json PROPERTIES PASS_REGULAR_EXPRESSION "\\{\"text\":\"[^\n]*\"\\}\n")
  add_test(NAME pagoda_transcribe_text COMMAND pagoda transcribe ${_tr_args} --response-format text)
  add_test(NAME pagoda_transcribe_srt COMMAND pagoda transcribe ${_tr_args} --response-format srt)
  set_tests_properties(pagoda_transcribe_srt PROPERTIES PASS_REGULAR_EXPRESSION
    "1\n[0-9][0-9]:[0-5][0-9]:[0-5][0-9],[0-9][0-9][0-9] --> [0-9][0-9]:[0-5][0-9]:[0-5][0-9],[0-9][0-9][0-9]\n[^\n]*\n\n")
  add_test(NAME pagoda_transcribe_vtt COMMAND pagoda transcribe ${_tr_args} --response-format vtt)
  set_tests_properties(pagoda_transcribe_vtt PROPERTIES PASS_REGULAR_EXPRESSION
    "WEBVTT\n\n[0-5][0-9]:[0-5][0-9]\\.[0-9][0-9][0-9] --> [0-5][0-9]:[0-5][0-9]\\.[0-9][0-9][0-9]\n[^\n]*\n\n")
  add_test(NAME pagoda_transcribe_verbose_json COMMAND pagoda transcribe ${_tr_args} --response-format verbose_json)
  set_tests_properties(pagoda_transcribe_verbose_json PROPERTIES PASS_REGULAR_EXPRESSION
    "\\{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":11,\"text\":\"[^\n]*\",\"segments\":\\[\\{\"id\":0,\"seek\":0,")
  add_test(NAME pagoda_transcribe_bad_format COMMAND pagoda transcribe ${_tr_args} --response-format xml)
  set_tests_properties(pagoda_transcribe_bad_format PROPERTIES PASS_REGULAR_EXPRESSION
    "pagoda transcribe: bad value 'xml' for --response-format")
  add_test(NAME pagoda_transcribe_bad_format_fails COMMAND pagoda transcribe ${_tr_args} --response-format xml)
  set_tests_properties(pagoda_transcribe_bad_format_fails PROPERTIES WILL_FAIL TRUE)
endif()

# A --kv-cache-memory larger than the machine fails at start with the numbers
# (no machine this runs on has 1024 TiB; its pages would only be touched
# under load, so without the check the server starts and is OOM-killed later).
add_test(NAME pagoda_kv_cache_memory_too_big COMMAND pagoda generate
         ${PAGODA_ASSETS}/llm/stories260K-hf --prompt "Once" --max-tokens 1 --kv-cache-memory 1024TiB)
set_tests_properties(pagoda_kv_cache_memory_too_big PROPERTIES PASS_REGULAR_EXPRESSION
  "kv_cache_memory 1048576.00 GiB is more than this machine's memory \\(MemTotal [0-9.]+ GiB, MemAvailable [0-9.]+ GiB\\): lower --kv-cache-memory")
add_test(NAME pagoda_kv_cache_memory_too_big_fails COMMAND pagoda generate
         ${PAGODA_ASSETS}/llm/stories260K-hf --prompt "Once" --max-tokens 1 --kv-cache-memory 1024TiB)
set_tests_properties(pagoda_kv_cache_memory_too_big_fails PROPERTIES WILL_FAIL TRUE)

# The MPI backend (src/dist/comm_mpi.c) under mpirun with 2 and 3 ranks on
# loopback: tests/mpi/comm_mpi_check.c runs the checks of test_comm
# (tests/helpers/comm_check.c). Native builds with MPI only. CI runs as root
# (--allow-run-as-root) on few cores (--oversubscribe); shared memory and
# self transports only, CMA single-copy off (containers forbid ptrace).
if(PAGODA_HAVE_MPI)
  add_executable(comm_mpi_check ${CMAKE_SOURCE_DIR}/tests/mpi/comm_mpi_check.c
                 ${CMAKE_SOURCE_DIR}/tests/helpers/comm_check.c)
  target_include_directories(comm_mpi_check PRIVATE ${CMAKE_SOURCE_DIR}/tests/helpers)
  target_link_libraries(comm_mpi_check PRIVATE pagoda_mpi pagoda_core)
  set(PAGODA_MPI_TEST_ENV "OMPI_MCA_btl=self,vader;OMPI_MCA_btl_vader_single_copy_mechanism=none;OMPI_MCA_plm_rsh_agent=false;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_hwloc_base_binding_policy=none")
  if(PAGODA_SANITIZE)
    # Open MPI keeps allocations of its initialisation past MPI_Finalize (not
    # ours): LeakSanitizer would report them; ASan's other checks stay on.
    set(PAGODA_MPI_TEST_ENV "${PAGODA_MPI_TEST_ENV};ASAN_OPTIONS=detect_leaks=0")
  endif()
  foreach(np 2 3)
    add_test(NAME comm_mpi_np${np} COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe
             -np ${np} $<TARGET_FILE:comm_mpi_check>)
    # (mpirun exits non-zero when any rank does)
    set_tests_properties(comm_mpi_np${np} PROPERTIES TIMEOUT 300 ENVIRONMENT "${PAGODA_MPI_TEST_ENV}")
  endforeach()
  # `pagoda bench allreduce` under mpirun, and a -tp that disagrees with it
  add_test(NAME pagoda_bench_allreduce_mpi COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root
           --oversubscribe -np 2 $<TARGET_FILE:pagoda> bench allreduce --floats 16,2048 --repeats 3 --iters 20)
  set_tests_properties(pagoda_bench_allreduce_mpi PROPERTIES TIMEOUT 300 ENVIRONMENT "${PAGODA_MPI_TEST_ENV}"
                       PASS_REGULAR_EXPRESSION "backend mpi, 2 ranks.*\n +2048 +20 +[0-9.]+ ")
  add_test(NAME pagoda_bench_allreduce_mpi_bad_tp COMMAND ${MPIEXEC_EXECUTABLE} --allow-run-as-root
           --oversubscribe -np 2 $<TARGET_FILE:pagoda> bench allreduce -tp 3 --floats 16)
  set_tests_properties(pagoda_bench_allreduce_mpi_bad_tp PROPERTIES TIMEOUT 300 ENVIRONMENT "${PAGODA_MPI_TEST_ENV}"
                       PASS_REGULAR_EXPRESSION "pagoda bench allreduce: -tp 3 but mpirun started 2 ranks")
endif()
# `pagoda bench allreduce` over shared memory (forked ranks; also under qemu)
add_test(NAME pagoda_bench_allreduce_shm COMMAND pagoda bench allreduce --tensor-parallel-size 3
         --floats 16,2048 --repeats 3 --iters 20)
set_tests_properties(pagoda_bench_allreduce_shm PROPERTIES
                     PASS_REGULAR_EXPRESSION "backend shm, 3 ranks.*\n +2048 +20 +[0-9.]+ ")
# an empty item in --floats was skipped (1,,2 measured 1 and 2)
add_test(NAME pagoda_bench_allreduce_bad_floats COMMAND pagoda bench allreduce --floats 1,,2)
set_tests_properties(pagoda_bench_allreduce_bad_floats PROPERTIES
                     PASS_REGULAR_EXPRESSION "bad value '1,,2' for --floats")
add_test(NAME pagoda_bench_allreduce_bad_tp COMMAND pagoda bench allreduce -tp 65)
set_tests_properties(pagoda_bench_allreduce_bad_tp PROPERTIES
                     PASS_REGULAR_EXPRESSION "bad value '65' for -tp \\(want an integer in \\[1, 64\\]\\)")

# Tensor parallelism through the command (tests/tp/tp_e2e.sh; issue 22):
# -tp 2 on forked ranks and under mpirun -np 2 print the -tp 1 greedy text of
# stories260K, mismatched MPI ranks are refused, a killed rank ends the
# server with a non-zero status naming it. Native builds (they fork / start
# mpirun; the model code they run is test_tp's, which runs everywhere it
# builds natively).
if(NOT CMAKE_CROSSCOMPILING)
  set(_tp_model ${PAGODA_ASSETS}/llm/stories260K-hf)
  set(_tp_sh ${CMAKE_SOURCE_DIR}/tests/tp/tp_e2e.sh)
  add_test(NAME tp_generate_shm COMMAND bash ${_tp_sh} generate_shm $<TARGET_FILE:pagoda> ${_tp_model})
  add_test(NAME tp_rank_dies COMMAND bash ${_tp_sh} rank_dies $<TARGET_FILE:pagoda> ${_tp_model})
  # a draft model under -tp 2 (its all-reduces had no partner: "mismatched collectives")
  add_test(NAME tp_spec_draft_shm COMMAND bash ${_tp_sh} spec_draft_shm $<TARGET_FILE:pagoda> ${_tp_model})
  # a rank killed while the server is idle: it exits by itself (it answered
  # /health 200 until a request came)
  add_test(NAME tp_rank_dies_idle COMMAND bash ${_tp_sh} rank_dies_idle $<TARGET_FILE:pagoda> ${_tp_model})
  set_tests_properties(tp_generate_shm tp_rank_dies tp_rank_dies_idle tp_spec_draft_shm PROPERTIES
                       TIMEOUT 300)
  add_test(NAME tp_heads_not_divisible COMMAND pagoda generate ${_tp_model} --prompt "Once"
           --max-tokens 1 --kv-cache-memory 16MiB -tp 3)
  set_tests_properties(tp_heads_not_divisible PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION
    "pagoda generate: [^\n]*tensor-parallel size 3 must divide num_attention_heads 8 and num_key_value_heads 4")
  add_test(NAME tp_heads_not_divisible_fails COMMAND pagoda generate ${_tp_model} --prompt "Once"
           --max-tokens 1 --kv-cache-memory 16MiB -tp 3)
  set_tests_properties(tp_heads_not_divisible_fails PROPERTIES TIMEOUT 120 WILL_FAIL TRUE)
  if(PAGODA_HAVE_MPI)
    foreach(mode generate_mpi mismatch_mpi no_tp_mpi)
      add_test(NAME tp_${mode} COMMAND bash ${_tp_sh} ${mode} $<TARGET_FILE:pagoda> ${_tp_model}
               ${MPIEXEC_EXECUTABLE})
      set_tests_properties(tp_${mode} PROPERTIES TIMEOUT 300 ENVIRONMENT "${PAGODA_MPI_TEST_ENV}")
    endforeach()
    # ranks given two models of one shape but other weights: refused
    add_test(NAME tp_mismatch_weights_mpi COMMAND bash ${_tp_sh} mismatch_weights_mpi
             $<TARGET_FILE:pagoda> ${_tp_model} ${MPIEXEC_EXECUTABLE} $<TARGET_FILE:gen_model>)
    set_tests_properties(tp_mismatch_weights_mpi PROPERTIES TIMEOUT 300
                         ENVIRONMENT "${PAGODA_MPI_TEST_ENV}")
  endif()
endif()
