/* gen_model: write a random-weight Llama, Qwen3, Qwen3-MoE, gpt-oss,
 * Qwen3.5 or Qwen3.5-MoE model as a Hugging Face directory and/or a GGUF
 * file (see tools/gen/gen_model.h).
 *
 *   gen_model --hf OUT_DIR [--gguf OUT.gguf] [--arch qwen3] [shape options] [--dtype bf16]
 *   gen_model --preset llama-3.2-1b --hf /tmp/llama1b --tokenizer path/to/llama-3.2-tokenizer
 *   gen_model --preset qwen3-1.7b --gguf /tmp/qwen3-1.7b-q8.gguf --dtype q8_0
 *   gen_model --preset qwen3-30b-a3b --layers 8 --gguf /tmp/qwen3-30b-a3b-l8-bf16.gguf
 *   gen_model --preset qwen3.5-9b --hf /tmp/q35-9b --gguf /tmp/q35-9b-bf16.gguf
 *   gen_model --arch qwen3_5_moe --hidden 256 --layers 4 --gguf /tmp/q35moe-tiny.gguf
 *   gen_model --from stories260K-hf --hf /tmp/s-w4 --compressed-tensors w4a16 --ct-group 32 \
 *             --tokenizer stories260K-hf          (convert a real model)
 *   gen_model --preset llama-3.2-1b --successor --gguf /tmp/succ-1b.gguf --dtype q8_0
 *             (greedy output t, t + 1, t + 2, ...: speculative decoding at a known acceptance)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"
#include "gen/gen_model.h"
#include "model/source.h"

static void usage(void) {
    fputs("usage: gen_model [--hf DIR] [--gguf FILE] [options]\n"
          "  --arch A             llama (default) | qwen3 (Qwen3ForCausalLM / GGUF qwen3:\n"
          "                       q_norm + k_norm, no Q/K permutation; theta 1e6, eps 1e-6)\n"
          "                       | qwen3_moe (Qwen3MoeForCausalLM / GGUF qwen3moe: qwen3's\n"
          "                       attention, every layer a mixture of experts: router\n"
          "                       mlp.gate [experts, hidden] (GGUF ffn_gate_inp, F32) and\n"
          "                       mlp.experts.{e}.{gate,up,down}_proj (GGUF 3-D\n"
          "                       ffn_{gate,up,down}_exps); norm_topk_prob true)\n"
          "                       | gpt_oss (GptOssForCausalLM / GGUF gpt-oss: q/k/v/o biases,\n"
          "                       sinks, even layers sliding (--sliding-window, default 128),\n"
          "                       YaRN factor 32 / 4096, router and expert biases; the HF\n"
          "                       form holds the experts per expert (the table's layout), not\n"
          "                       stacked as published checkpoints)\n"
          "                       | qwen3_5 (Qwen3_5ForConditionalGeneration / GGUF qwen35:\n"
          "                       Gated DeltaNet layers, every --full-attn-interval-th layer\n"
          "                       gated full attention; the HF form as published (text_config,\n"
          "                       model.language_model.*, zero-centred norms, A_log, MTP block\n"
          "                       mtp.*), the GGUF form as convert_hf_to_gguf.py writes it\n"
          "                       (1 + w norms, ssm_a, tiled V heads, nextn block); theta 1e7)\n"
          "                       | qwen3_5_moe (Qwen3_5MoeForConditionalGeneration / GGUF\n"
          "                       qwen35moe: qwen3_5 with every MLP a mixture of experts plus\n"
          "                       a gated shared expert; per-expert HF tensors)\n"
          "  --preset NAME        llama-3.2-1b | qwen3-0.6b | qwen3-1.7b | qwen3-30b-a3b |\n"
          "                       gpt-oss-20b | qwen3.5-9b | qwen3.5-35b-a3b\n"
          "                       (BF16; implies its --arch; explicit options override its\n"
          "                       values, e.g. --preset qwen3-30b-a3b --layers 8)\n"
          "  --hidden N --layers N --heads N --kv-heads N --ffn N --vocab N --head-dim N\n"
          "  --experts N --experts-per-tok K --moe-ffn N   (qwen3_moe, qwen3_5_moe: num_experts,\n"
          "                       num_experts_per_tok, moe_intermediate_size; default 8 / 2 /\n"
          "                       64; --ffn is then only the config's intermediate_size)\n"
          "  --lin-k-heads N --lin-v-heads N --lin-k-dim N --lin-v-dim N --conv-kernel N\n"
          "                       (qwen3_5*: Gated DeltaNet key / value heads and dims, conv\n"
          "                       width; default 2 / 4 / 16 / 16 / 4)\n"
          "  --full-attn-interval N   (qwen3_5*: default 4)\n"
          "  --partial-rotary F   (qwen3_5*: partial_rotary_factor, default 0.25)\n"
          "  --mtp-layers N       (qwen3_5*: MTP blocks written, not run; default 1)\n"
          "  --shared-ffn N       (qwen3_5_moe: shared_expert_intermediate_size, default 64;\n"
          "                       --ffn N there also writes intermediate_size, which the\n"
          "                       published config lacks (default 0: none))\n"
          "  --max-pos N          max_position_embeddings (default 2048)\n"
          "  --tie | --no-tie     tie_word_embeddings (default tie)\n"
          "  --rope-scaling llama3|none   (llama only; llama3: --rope-factor F --rope-low F\n"
          "                       --rope-high F --rope-orig N; defaults 32 / 1 / 4 / 8192)\n"
          "  --rope-theta F --rms-eps F --std F --seed N --bos N --eos N\n"
          "  --dtype T            f32|f16|bf16 for both forms (q8_0|q4_0: GGUF only)\n"
          "  --gguf-dtype T       override for the GGUF form: f32|f16|bf16|q8_0|q4_0|q2_k|q3_k|\n"
          "                       q4_k|q5_k|q6_k|iq4_nl|iq4_xs|q3_k_m|q4_k_m|q5_k_m (*_k_m:\n"
          "                       llama-quantize-like mixtures: q4/q5 keep token_embd, output,\n"
          "                       attn_v, ffn_down in Q6_K; q3_k_m output in Q6_K and attn_v,\n"
          "                       attn_output, ffn_down in Q4_K)\n"
          "  --shards N           write N safetensors shards + index\n"
          "  --tokenizer DIR      copy tokenizer.json / tokenizer_config.json into the HF dir\n"
          "  --gguf-vocab FILE    copy tokenizer.* metadata of FILE into the GGUF\n"
          "  --compressed-tensors w8a8|w4a8|w8a16|w4a16 [--ct-group N]   HF form as a\n"
          "                       compressed-tensors checkpoint (int-quantized int8 /\n"
          "                       pack-quantized int4; a16: weight-only, no input_activations;\n"
          "                       N = 0: per channel, else a multiple of 32)\n"
          "  --ct-rule ct|rtn     scales as compressed-tensors (max/127.5, max/7.5; default) or\n"
          "                       as pagoda's --quantization (exactly reproducible at load)\n"
          "  --ct-ignore PATTERN  also keep these layers dense and list them in ignore\n"
          "                       (a layer name or re:<regex>, e.g. 're:.*down_proj$')\n"
          "  --ct-dense           write the dequantized weights as a dense checkpoint instead\n"
          "  --from MODEL         take architecture, shapes and weights from this F32/F16/BF16\n"
          "                       llama, qwen3 or qwen3_moe model (HF directory or GGUF)\n"
          "  --successor          a synthetic model whose greedy output is known (llama or\n"
          "                       qwen3; implies --no-tie): after token t it emits\n"
          "                       (t + 1) mod vocab: lm_head row s = embedding of s - 1, the\n"
          "                       layers' o_proj / down_proj scaled down so the residual\n"
          "                       stream stays the current token's embedding. For measuring\n"
          "                       speculative decoding at a known acceptance rate\n"
          "  --successor-skip P   the fraction P of tokens t (a fixed hash of --seed and t)\n"
          "                       whose successor is t + 2 instead (default 0): a draft\n"
          "                       with P disagrees with a P = 0 target on those tokens\n"
          "  --successor-residual F   scale of o_proj / down_proj (default 1e-3)\n",
          stderr);
}

/* q3_k_m, q4_k_m, q5_k_m: a mixture (gen_model.h gguf_kmix). */
static bool is_kmix(const char *v) {
    const size_t n = strlen(v);
    return n > 2 && !strcasecmp(v + n - 2, "_m");
}

static int parse_dtype(const char *s, pg_dtype *out) {
    static const struct {
        const char *n;
        pg_dtype t;
    } T[] = {{"f32", PG_F32},     {"f16", PG_F16},     {"bf16", PG_BF16},     {"q8_0", PG_Q8_0},
             {"q4_0", PG_Q4_0},   {"q4_k", PG_Q4_K},   {"q5_k", PG_Q5_K},     {"q6_k", PG_Q6_K},
             {"q2_k", PG_Q2_K},   {"q3_k", PG_Q3_K},   {"iq4_nl", PG_IQ4_NL}, {"iq4_xs", PG_IQ4_XS},
             {"q3_k_m", PG_Q3_K}, {"q4_k_m", PG_Q4_K}, {"q5_k_m", PG_Q5_K}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (!strcasecmp(s, T[i].n)) {
            *out = T[i].t;
            return 0;
        }
    return -1;
}

static int to_int(const char *opt, const char *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 30) {
        fprintf(stderr, "gen_model: %s needs a non-negative integer, got '%s'\n", opt, v);
        exit(2);
    }
    return (int)x;
}
static float to_float(const char *opt, const char *v) {
    char *end;
    float x = strtof(v, &end);
    if (*end) {
        fprintf(stderr, "gen_model: %s needs a number, got '%s'\n", opt, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    pg_gen_model_options o;
    pg_gen_model_defaults(&o);
    /* --arch (with its defaults), then presets, so explicit options override them */
    const char *arch = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--arch")) {
            arch = argv[i + 1];
            if (pg_gen_model_set_arch(&o, arch)) {
                fprintf(stderr, "gen_model: %s\n", pg_last_error());
                return 2;
            }
        }
    const struct pg_arch *want = o.arch;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--preset") && pg_gen_model_preset(&o, argv[i + 1])) {
            fprintf(stderr, "gen_model: %s\n", pg_last_error());
            return 2;
        }
    pg_model_source *from = NULL;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--from") &&
            (pg_model_source_open(argv[i + 1], &from) || pg_gen_model_options_from(&o, from))) {
            fprintf(stderr, "gen_model: %s\n", pg_last_error());
            return 2;
        }
    if (arch && o.arch != want) {
        fprintf(stderr, "gen_model: --arch %s contradicts the %s's architecture\n", arch,
                from ? "--from model" : "--preset");
        return 2;
    }
    bool gguf_dtype_set = false;
    const char *hf_quant = NULL; /* --dtype q8_0/q4_0: GGUF only */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--tie")) {
            o.tie = true;
            continue;
        }
        if (!strcmp(a, "--no-tie")) {
            o.tie = false;
            continue;
        }
        if (!strcmp(a, "--ct-dense")) {
            o.ct_dense = true;
            continue;
        }
        if (!strcmp(a, "--successor")) {
            o.successor = true;
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gen_model: unknown option or missing value: %s\n", a);
            usage();
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--preset") || !strcmp(a, "--from") || !strcmp(a, "--arch"))
            continue;
        else if (!strcmp(a, "--hf"))
            o.hf_dir = v;
        else if (!strcmp(a, "--gguf"))
            o.gguf_path = v;
        else if (!strcmp(a, "--hidden"))
            o.hidden = to_int(a, v);
        else if (!strcmp(a, "--layers"))
            o.layers = to_int(a, v);
        else if (!strcmp(a, "--heads"))
            o.heads = to_int(a, v);
        else if (!strcmp(a, "--kv-heads"))
            o.kv_heads = to_int(a, v);
        else if (!strcmp(a, "--ffn"))
            o.ffn = to_int(a, v);
        else if (!strcmp(a, "--vocab"))
            o.vocab = to_int(a, v);
        else if (!strcmp(a, "--head-dim"))
            o.head_dim = to_int(a, v);
        else if (!strcmp(a, "--experts"))
            o.experts = to_int(a, v);
        else if (!strcmp(a, "--experts-per-tok"))
            o.experts_per_tok = to_int(a, v);
        else if (!strcmp(a, "--moe-ffn"))
            o.moe_ffn = to_int(a, v);
        else if (!strcmp(a, "--sliding-window"))
            o.sliding_window = to_int(a, v);
        else if (!strcmp(a, "--lin-k-heads"))
            o.lin_k_heads = to_int(a, v);
        else if (!strcmp(a, "--lin-v-heads"))
            o.lin_v_heads = to_int(a, v);
        else if (!strcmp(a, "--lin-k-dim"))
            o.lin_k_dim = to_int(a, v);
        else if (!strcmp(a, "--lin-v-dim"))
            o.lin_v_dim = to_int(a, v);
        else if (!strcmp(a, "--conv-kernel"))
            o.conv_kernel = to_int(a, v);
        else if (!strcmp(a, "--full-attn-interval"))
            o.full_attn_interval = to_int(a, v);
        else if (!strcmp(a, "--mtp-layers"))
            o.mtp_layers = to_int(a, v);
        else if (!strcmp(a, "--shared-ffn"))
            o.shared_ffn = to_int(a, v);
        else if (!strcmp(a, "--partial-rotary"))
            o.partial_rotary = to_float(a, v);
        else if (!strcmp(a, "--max-pos"))
            o.max_position = to_int(a, v);
        else if (!strcmp(a, "--rope-theta"))
            o.rope_theta = to_float(a, v);
        else if (!strcmp(a, "--rms-eps"))
            o.rms_eps = to_float(a, v);
        else if (!strcmp(a, "--std"))
            o.init_std = to_float(a, v);
        else if (!strcmp(a, "--seed"))
            o.seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--bos"))
            o.bos_token_id = to_int(a, v);
        else if (!strcmp(a, "--eos"))
            o.eos_token_id = to_int(a, v);
        else if (!strcmp(a, "--shards"))
            o.shards = to_int(a, v);
        else if (!strcmp(a, "--tokenizer"))
            o.tokenizer_dir = v;
        else if (!strcmp(a, "--gguf-vocab"))
            o.vocab_gguf = v;
        else if (!strcmp(a, "--successor-skip"))
            o.successor_skip = to_float(a, v);
        else if (!strcmp(a, "--successor-residual"))
            o.successor_residual = to_float(a, v);
        else if (!strcmp(a, "--ct-group"))
            o.ct_group = to_int(a, v);
        else if (!strcmp(a, "--ct-ignore"))
            o.ct_ignore = v;
        else if (!strcmp(a, "--compressed-tensors")) {
            if (strcmp(v, "w8a8") && strcmp(v, "w4a8") && strcmp(v, "w8a16") &&
                strcmp(v, "w4a16")) {
                fprintf(stderr, "gen_model: --compressed-tensors takes w8a8, w4a8, w8a16 or "
                                "w4a16\n");
                return 2;
            }
            o.ct_bits = v[1] == '8' ? 8 : 4;
            o.ct_weight_only = !strcmp(v + 2, "a16");
        } else if (!strcmp(a, "--ct-rule")) {
            if (strcmp(v, "ct") && strcmp(v, "rtn")) {
                fprintf(stderr, "gen_model: --ct-rule takes ct or rtn\n");
                return 2;
            }
            o.ct_rtn = !strcmp(v, "rtn");
        } else if (!strcmp(a, "--rope-factor"))
            o.rope_factor = to_float(a, v);
        else if (!strcmp(a, "--rope-low"))
            o.rope_low_freq_factor = to_float(a, v);
        else if (!strcmp(a, "--rope-high"))
            o.rope_high_freq_factor = to_float(a, v);
        else if (!strcmp(a, "--rope-orig"))
            o.rope_original_max_position = to_int(a, v);
        else if (!strcmp(a, "--rope-scaling")) {
            if (!strcmp(v, "none"))
                o.rope_scaling = PG_ROPE_SCALING_NONE;
            else if (!strcmp(v, "llama3")) {
                o.rope_scaling = PG_ROPE_SCALING_LLAMA3;
                if (!o.rope_factor) o.rope_factor = 32.0f;
                if (!o.rope_low_freq_factor) o.rope_low_freq_factor = 1.0f;
                if (!o.rope_high_freq_factor) o.rope_high_freq_factor = 4.0f;
                if (!o.rope_original_max_position) o.rope_original_max_position = 8192;
            } else {
                fprintf(stderr, "gen_model: --rope-scaling takes llama3 or none\n");
                return 2;
            }
        } else if (!strcmp(a, "--dtype") || !strcmp(a, "--gguf-dtype")) {
            pg_dtype t;
            if (parse_dtype(v, &t)) {
                fprintf(stderr, "gen_model: unknown dtype '%s'\n", v);
                return 2;
            }
            if (!strcmp(a, "--gguf-dtype")) {
                o.gguf_dtype = t;
                o.gguf_kmix = is_kmix(v); /* q3_k_m, q4_k_m, q5_k_m */
                gguf_dtype_set = true;
            } else {
                if (t == PG_F32 || t == PG_F16 || t == PG_BF16)
                    o.hf_dtype = t;
                else
                    hf_quant = v;
                if (!gguf_dtype_set) o.gguf_dtype = t, o.gguf_kmix = is_kmix(v);
            }
        } else {
            fprintf(stderr, "gen_model: unknown option %s\n", a);
            usage();
            return 2;
        }
    }
    if (!o.hf_dir && !o.gguf_path) {
        usage();
        return 2;
    }
    if (o.successor) {
        o.tie = false;
        if (o.successor_residual == 0.0f) o.successor_residual = 1e-3f;
    }
    if (hf_quant && o.hf_dir) {
        fprintf(stderr, "gen_model: HF output cannot be %s (use --gguf-dtype for the GGUF form)\n",
                hf_quant);
        return 2;
    }
    pagoda_status s = pg_gen_model_write(&o);
    pg_model_source_free(from);
    if (s) {
        fprintf(stderr, "gen_model: %s\n", pg_last_error());
        return 1;
    }
    if (o.hf_dir) printf("wrote %s\n", o.hf_dir);
    if (o.gguf_path) printf("wrote %s\n", o.gguf_path);
    return 0;
}
