# End-to-end tests of `pagoda serve` (tests/server/, tests/node/). Each
# starts the real server on 127.0.0.1 with an ephemeral port (--port 0) on
# the stories260K model. Needs curl + jq (scripts/install-deps.sh); the Node
# test needs node + npm (npm ci of tests/node/package-lock.json).
set(PAGODA_SERVE_MODEL "${PAGODA_ASSETS}/llm/stories260K-hf")
set(PAGODA_SERVE_CMD $<TARGET_FILE:pagoda>)
if(CMAKE_CROSSCOMPILING AND PAGODA_ARCH STREQUAL "aarch64")
  set(PAGODA_SERVE_CMD ${PAGODA_QEMU} -cpu max $<TARGET_FILE:pagoda>)
endif()
# The chat cases need the chat-template engine (src/tokenizer/chat_template.c).
set(PAGODA_SERVE_TEMPLATE "")
if(EXISTS ${CMAKE_SOURCE_DIR}/src/tokenizer/chat_template.c)
  set(PAGODA_SERVE_TEMPLATE ${CMAKE_SOURCE_DIR}/tests/data/chat_simple.jinja)
endif()
find_program(PAGODA_CURL curl)
find_program(PAGODA_JQ jq)
if(PAGODA_CURL AND PAGODA_JQ)
  add_test(NAME serve_e2e_curl COMMAND bash ${CMAKE_SOURCE_DIR}/tests/server/e2e_curl.sh
           ${PAGODA_SERVE_MODEL} "${PAGODA_SERVE_TEMPLATE}" ${PAGODA_SERVE_CMD})
  set_tests_properties(serve_e2e_curl PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
  # strict request parsing (malformed JSON, limits, seeds, continue_final_message)
  add_test(NAME serve_e2e_strict COMMAND bash ${CMAKE_SOURCE_DIR}/tests/server/e2e_strict.sh
           ${PAGODA_SERVE_MODEL} "${PAGODA_SERVE_TEMPLATE}" ${PAGODA_SERVE_CMD})
  set_tests_properties(serve_e2e_strict PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
  # 64 streaming clients, at least one request each, then more until 10 s
  # (no throughput threshold; native only: too slow under qemu);
  # `make loadtest` runs the 60 s version.
  if(NOT CMAKE_CROSSCOMPILING)
    add_test(NAME serve_load_10s COMMAND bash ${CMAKE_SOURCE_DIR}/tests/server/load.sh
             ${PAGODA_SERVE_MODEL} 10 ${PAGODA_SERVE_CMD})
    set_tests_properties(serve_load_10s PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
    if(PAGODA_SANITIZE OR PAGODA_TSAN)
      # ASan's quarantine holds freed memory and TSan's shadow memory grows
      # (RSS grows by design); LeakSanitizer checks the server at exit instead.
      set_tests_properties(serve_load_10s PROPERTIES ENVIRONMENT "PAGODA_LOAD_SKIP_RSS=1")
    endif()
    # graceful shutdown under load: SIGTERM drains, --shutdown-timeout aborts
    # the rest with finish_reason "abort" (native only: timing-based)
    add_test(NAME serve_shutdown COMMAND bash ${CMAKE_SOURCE_DIR}/tests/server/shutdown.sh
             ${PAGODA_SERVE_MODEL} ${PAGODA_SERVE_CMD})
    set_tests_properties(serve_shutdown PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
    # faults: KV exhaustion (preemption keeps greedy outputs equal to an
    # unloaded run), a model file truncated before the start and while mapped
    add_test(NAME serve_faults COMMAND bash ${CMAKE_SOURCE_DIR}/tests/server/faults.sh
             ${PAGODA_SERVE_MODEL} ${PAGODA_SERVE_CMD})
    set_tests_properties(serve_faults PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
    # the fault soak (tests/server/soak.mjs, Node's fetch, no npm): 64 clients
    # with disconnects, slow readers, n > 1, logprobs, cancellations and
    # oversized requests for 20 s; `make soak` runs it for 10 minutes
    find_program(PAGODA_NODE_SOAK node)
    if(PAGODA_NODE_SOAK)
      add_test(NAME serve_soak_20s COMMAND bash ${CMAKE_SOURCE_DIR}/tests/server/soak.sh
               ${PAGODA_SERVE_MODEL} 20 "${PAGODA_SERVE_TEMPLATE}" ${PAGODA_SERVE_CMD})
      set_tests_properties(serve_soak_20s PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
      if(PAGODA_SANITIZE OR PAGODA_TSAN)
        set_tests_properties(serve_soak_20s PROPERTIES ENVIRONMENT "SOAK_SKIP_RSS=1")
      endif()
    endif()
  endif()
else()
  message(WARNING "curl or jq not found: the `pagoda serve` end-to-end tests are not registered "
                  "(run scripts/install-deps.sh)")
endif()

# Downloads from a mock Hugging Face hub (tests/hub/: a Python 3 stdlib HTTP
# server with the hub's URL layout and headers): `pagoda download`, repo ids in
# `generate` and `serve`. Native build only: the mock hub is host Python, and
# the download code has no architecture-specific path (under qemu its ten
# model loads would take minutes); test_hub covers the parsing and cache
# logic in the Arm build.
find_program(PAGODA_PYTHON3 python3)
if(PAGODA_CURL AND PAGODA_PYTHON3 AND NOT CMAKE_CROSSCOMPILING)
  add_test(NAME hub_download_e2e COMMAND bash ${CMAKE_SOURCE_DIR}/tests/hub/e2e_hub.sh
           ${PAGODA_ASSETS} ${PAGODA_SERVE_CMD})
  set_tests_properties(hub_download_e2e PROPERTIES TIMEOUT 600)
elseif(NOT CMAKE_CROSSCOMPILING)
  message(WARNING "curl or python3 not found: the hub download test (hub_download_e2e) is not "
                  "registered (run scripts/install-deps.sh)")
endif()

# The official openai npm client against the server (tests/node/).
find_program(PAGODA_NODE node)
find_program(PAGODA_NPM npm)
if(PAGODA_NODE AND PAGODA_NPM AND PAGODA_JQ)
  add_test(NAME serve_openai_node COMMAND bash ${CMAKE_SOURCE_DIR}/tests/node/run.sh
           ${CMAKE_SOURCE_DIR}/tests/node ${CMAKE_BINARY_DIR}/node ${PAGODA_SERVE_MODEL}
           "${PAGODA_SERVE_TEMPLATE}" ${PAGODA_SERVE_CMD})
  set_tests_properties(serve_openai_node PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
  # structured outputs (tests/node/structured.test.mjs): the tiny real model,
  # and a random model with Llama 3's 128k-token vocabulary (gen_model)
  add_test(NAME serve_openai_node_structured
           COMMAND bash -c "NODE_TEST=structured.test.mjs exec bash '${CMAKE_SOURCE_DIR}/tests/node/run.sh' \"$@\"" _
                   ${CMAKE_SOURCE_DIR}/tests/node ${CMAKE_BINARY_DIR}/node ${PAGODA_SERVE_MODEL}
                   ${CMAKE_SOURCE_DIR}/tests/data/chat_simple.jinja ${PAGODA_SERVE_CMD})
  set_tests_properties(serve_openai_node_structured PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
  set(PAGODA_GEN_MODEL_CMD $<TARGET_FILE:gen_model>)
  if(CMAKE_CROSSCOMPILING AND PAGODA_ARCH STREQUAL "aarch64")
    set(PAGODA_GEN_MODEL_CMD "${PAGODA_QEMU} -cpu max $<TARGET_FILE:gen_model>")
  endif()
  # the 128k-vocabulary run natively (its trie and 128k-row logits are
  # minutes under qemu; the stories260K run above covers the aarch64 build)
  if(EXISTS ${PAGODA_ASSETS}/tokenizers/llama3/tokenizer.json AND NOT CMAKE_CROSSCOMPILING)
    add_test(NAME serve_openai_node_structured_llama3vocab
             COMMAND bash -c "${PAGODA_GEN_MODEL_CMD} --hf '${CMAKE_BINARY_DIR}/random-llama3vocab' --hidden 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --vocab 128256 --bos 128000 --eos 128001 --dtype bf16 --tokenizer '${PAGODA_ASSETS}/tokenizers/llama3' >/dev/null && STRUCT_RANDOM=1 NODE_TEST=structured.test.mjs exec bash '${CMAKE_SOURCE_DIR}/tests/node/run.sh' \"$@\"" _
                     ${CMAKE_SOURCE_DIR}/tests/node ${CMAKE_BINARY_DIR}/node ${CMAKE_BINARY_DIR}/random-llama3vocab
                     ${CMAKE_SOURCE_DIR}/tests/data/chat_simple.jinja ${PAGODA_SERVE_CMD})
    set_tests_properties(serve_openai_node_structured_llama3vocab PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
  endif()
  # tool calls, reasoning and the request-field audit (tests/node/tools.test.mjs):
  # a random Qwen3 with the real Qwen3 tokenizer and chat template (natively
  # only: a 151k-token vocabulary's grammar trie is minutes under qemu; the
  # parsers and grammars are unit-tested in both builds)
  if(NOT CMAKE_CROSSCOMPILING)
    add_test(NAME serve_openai_node_tools
             COMMAND bash -c "${PAGODA_GEN_MODEL_CMD} --hf '${CMAKE_BINARY_DIR}/random-qwen3-tools' --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 128 --vocab 151936 --bos 151643 --eos 151645 --dtype bf16 --tokenizer '${PAGODA_ASSETS}/tokenizers/qwen3' >/dev/null && NODE_TEST=tools.test.mjs exec bash '${CMAKE_SOURCE_DIR}/tests/node/run.sh' \"$@\"" _
                     ${CMAKE_SOURCE_DIR}/tests/node ${CMAKE_BINARY_DIR}/node ${CMAKE_BINARY_DIR}/random-qwen3-tools
                     "" ${PAGODA_SERVE_CMD})
    set_tests_properties(serve_openai_node_tools PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
  endif()
  # gpt-oss tool calls: the scripted model (tests/node/scripted_gpt_oss.py)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    add_test(NAME serve_openai_node_harmony
             COMMAND bash -c "${Python3_EXECUTABLE} '${CMAKE_SOURCE_DIR}/tests/node/scripted_gpt_oss.py' '${PAGODA_ASSETS}/oracles/gpt-oss-tiny/hf' '${CMAKE_BINARY_DIR}/scripted-gpt-oss' && ${Python3_EXECUTABLE} '${CMAKE_SOURCE_DIR}/tests/node/scripted_gpt_oss.py' '${PAGODA_ASSETS}/oracles/gpt-oss-tiny/hf' '${CMAKE_BINARY_DIR}/scripted-gpt-oss-final' final && PAGODA_FINAL_MODEL='${CMAKE_BINARY_DIR}/scripted-gpt-oss-final' NODE_TEST=harmony.test.mjs exec bash '${CMAKE_SOURCE_DIR}/tests/node/run.sh' \"$@\"" _
                     ${CMAKE_SOURCE_DIR}/tests/node ${CMAKE_BINARY_DIR}/node
                     ${CMAKE_BINARY_DIR}/scripted-gpt-oss "" ${PAGODA_SERVE_CMD})
    set_tests_properties(serve_openai_node_harmony PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
  endif()
  # the web chat page at / in headless Chromium (tests/node/webui.test.mjs,
  # playwright-core driving Debian's chromium). Native only (a browser under
  # qemu adds nothing: the page is the same bytes, the server paths are
  # serve_e2e_curl's); not under ASan (Makefile ASAN_EXCLUDE).
  find_program(PAGODA_CHROMIUM chromium)
  if(PAGODA_CHROMIUM AND NOT CMAKE_CROSSCOMPILING)
    add_test(NAME serve_webui_chromium
             COMMAND ${CMAKE_COMMAND} -E env NODE_TEST=webui.test.mjs CHROMIUM=${PAGODA_CHROMIUM}
                     bash ${CMAKE_SOURCE_DIR}/tests/node/run.sh ${CMAKE_SOURCE_DIR}/tests/node
                     ${CMAKE_BINARY_DIR}/node ${PAGODA_SERVE_MODEL}
                     ${CMAKE_SOURCE_DIR}/tests/data/chat_simple.jinja ${PAGODA_SERVE_CMD})
    set_tests_properties(serve_webui_chromium PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
  elseif(NOT CMAKE_CROSSCOMPILING)
    message(WARNING "chromium not found: the web chat page's browser test (serve_webui_chromium) "
                    "is not registered (scripts/install-deps.sh)")
  endif()
else()
  message(WARNING "node/npm (or jq) not found: the openai-client test of `pagoda serve` "
                 "(tests/node) is not registered; install Node.js >= 20 to run it")
endif()

# The audio endpoints with the openai client (tests/node/audio.test.mjs): the
# chat model and the Whisper oracle (random weights, openai/whisper's
# multilingual tokenizer) in one server; ffmpeg converts the test audio.
find_program(PAGODA_FFMPEG ffmpeg)
find_program(PAGODA_FFPROBE ffprobe)
# Native build only: with the random-weight oracle every window runs the whole
# temperature fallback, ~25 s natively and over 20 minutes under qemu; the
# audio endpoints run under qemu in tests/test_server_audio.c.
set(PAGODA_AUDIO_LONG_S 600)
if(PAGODA_NODE AND PAGODA_NPM AND PAGODA_JQ AND PAGODA_HAVE_AUDIO_DECODE
   AND PAGODA_FFMPEG AND PAGODA_FFPROBE AND NOT CMAKE_CROSSCOMPILING)
  add_test(NAME serve_openai_node_audio
           COMMAND ${CMAKE_COMMAND} -E env NODE_TEST=audio.test.mjs
                   PAGODA_WHISPER_MODEL=${PAGODA_ASSETS}/oracles/whisper-tiny-random/hf
                   PAGODA_WHISPER_TOKENIZER=${PAGODA_ASSETS}/whisper/multilingual.tiktoken
                   PAGODA_AUDIO_DIR=${PAGODA_ASSETS}/whisper
                   PAGODA_AUDIO_LONG_S=${PAGODA_AUDIO_LONG_S}
                   bash ${CMAKE_SOURCE_DIR}/tests/node/run.sh ${CMAKE_SOURCE_DIR}/tests/node
                   ${CMAKE_BINARY_DIR}/node ${PAGODA_SERVE_MODEL} "${PAGODA_SERVE_TEMPLATE}"
                   ${PAGODA_SERVE_CMD})
  set_tests_properties(serve_openai_node_audio PROPERTIES TIMEOUT 1200 RUN_SERIAL TRUE)
elseif(PAGODA_NODE AND PAGODA_NPM AND NOT CMAKE_CROSSCOMPILING)
  message(WARNING "the audio endpoints' openai-client test (serve_openai_node_audio) is not "
                  "registered: it needs audio decoding and ffmpeg/ffprobe")
endif()

# Data parallelism: 2 replicas behind nginx with deploy/nginx/pagoda-dp.conf
# (streaming unbuffered, failover, 502 when all are down). Native only (two
# servers and nginx under qemu add minutes and no Arm code path), not under
# ASan (Makefile ASAN_EXCLUDE: the server paths are serve_e2e_curl's).
find_program(PAGODA_NGINX nginx PATHS /usr/sbin /sbin)
find_program(PAGODA_PYTHON3 python3)
if(PAGODA_NGINX AND PAGODA_CURL AND PAGODA_JQ AND PAGODA_PYTHON3 AND NOT CMAKE_CROSSCOMPILING)
  add_test(NAME serve_data_parallel_nginx COMMAND ${CMAKE_COMMAND} -E env NGINX=${PAGODA_NGINX}
           bash ${CMAKE_SOURCE_DIR}/tests/server/data_parallel_nginx.sh ${PAGODA_SERVE_MODEL}
           "${PAGODA_SERVE_TEMPLATE}" ${CMAKE_SOURCE_DIR}/deploy/nginx/pagoda-dp.conf ${PAGODA_SERVE_CMD})
  set_tests_properties(serve_data_parallel_nginx PROPERTIES TIMEOUT 600 RUN_SERIAL TRUE)
elseif(NOT CMAKE_CROSSCOMPILING)
  message(WARNING "nginx, curl, jq or python3 not found: serve_data_parallel_nginx is not registered "
                  "(scripts/install-deps.sh)")
endif()
