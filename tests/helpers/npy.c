#include "npy.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

void pg_test_npy_load(const char *path, pg_npy *out) {
    memset(out, 0, sizeof *out);
    size_t len;
    char *buf = pg_test_read_file(path, &len);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0) fail_msg("%s: not a .npy file", path);
    const unsigned char *u = (const unsigned char *)buf;
    const int major = u[6];
    size_t hlen, hoff;
    if (major == 1) {
        hlen = u[8] | (size_t)u[9] << 8;
        hoff = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) fail_msg("%s: short header", path);
        hlen = u[8] | (size_t)u[9] << 8 | (size_t)u[10] << 16 | (size_t)u[11] << 24;
        hoff = 12;
    } else {
        fail_msg("%s: .npy version %d", path, major);
        return;
    }
    if (hoff + hlen > len) fail_msg("%s: header past end of file", path);
    char *hdr = malloc(hlen + 1);
    assert_non_null(hdr);
    memcpy(hdr, buf + hoff, hlen);
    hdr[hlen] = 0;
    const char *d = strstr(hdr, "'descr'");
    if (!d || !strstr(d, "'<f4'")) fail_msg("%s: dtype is not '<f4': %s", path, hdr);
    const char *fo = strstr(hdr, "'fortran_order'");
    if (!fo || !strstr(fo, "False")) fail_msg("%s: Fortran order: %s", path, hdr);
    const char *sh = strstr(hdr, "'shape'");
    if (!sh || !(sh = strchr(sh, '('))) {
        fail_msg("%s: no shape: %s", path, hdr);
        free(hdr);
        return;
    }
    sh++;
    out->count = 1;
    while (*sh && *sh != ')') {
        char *end;
        long long v = strtoll(sh, &end, 10);
        if (end == sh) {
            sh++;
            continue;
        }
        if (out->ndim == PG_NPY_MAX_DIMS) fail_msg("%s: too many dims", path);
        out->shape[out->ndim++] = v;
        out->count *= v;
        sh = end;
    }
    free(hdr);
    const size_t bytes = (size_t)out->count * sizeof(float);
    if (hoff + hlen + bytes > len) fail_msg("%s: data shorter than the shape says", path);
    out->data = malloc(bytes ? bytes : 1);
    assert_non_null(out->data);
    memcpy(out->data, buf + hoff + hlen, bytes);
    free(buf);
}

void pg_test_npy_free(pg_npy *a) {
    free(a->data);
    memset(a, 0, sizeof *a);
}

const char *pg_test_npz_extract(const char *npz, const char *member, const char *dir) {
    static char path[PATH_MAX];
    char cmd[3 * PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, member);
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import sys, zipfile; open(sys.argv[3], \"wb\").write("
             "zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))' '%s' '%s' '%s' 2>&1",
             npz, member, path);
    char *outp = NULL;
    int rc = pg_test_run_command(cmd, &outp);
    if (rc != 0) fail_msg("extracting %s from %s failed (%d): %s", member, npz, rc, outp);
    free(outp);
    return path;
}

static uint32_t rd32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

float *pg_test_wav_load_s16(const char *path, int64_t *frames, int *rate, int *channels) {
    size_t len;
    unsigned char *b = (unsigned char *)pg_test_read_file(path, &len);
    if (len < 12 || memcmp(b, "RIFF", 4) != 0 || memcmp(b + 8, "WAVE", 4) != 0)
        fail_msg("%s: not RIFF/WAVE", path);
    size_t pos = 12;
    int fmt_seen = 0, ch = 0, bits = 0;
    uint32_t sr = 0;
    float *out = NULL;
    while (pos + 8 <= len) {
        uint32_t sz = rd32(b + pos + 4);
        const unsigned char *c = b + pos + 8;
        if (memcmp(b + pos, "fmt ", 4) == 0) {
            if (sz < 16 || pos + 8 + sz > len) fail_msg("%s: bad fmt chunk", path);
            if ((c[0] | c[1] << 8) != 1) fail_msg("%s: not integer PCM", path);
            ch = c[2] | c[3] << 8;
            sr = rd32(c + 4);
            bits = c[14] | c[15] << 8;
            if (bits != 16 || ch < 1) fail_msg("%s: %d-bit, %d channels", path, bits, ch);
            fmt_seen = 1;
        } else if (memcmp(b + pos, "data", 4) == 0) {
            if (!fmt_seen || ch < 1) {
                fail_msg("%s: data before fmt", path);
                break;
            }
            if (pos + 8 + sz > len) fail_msg("%s: data chunk past end of file", path);
            const int64_t n = sz / 2;
            out = malloc((size_t)(n ? n : 1) * sizeof(float));
            assert_non_null(out);
            for (int64_t i = 0; i < n; i++)
                out[i] = (float)(int16_t)(c[2 * i] | c[2 * i + 1] << 8) / 32768.0f;
            *frames = n / ch;
            *rate = (int)sr;
            *channels = ch;
            break;
        }
        pos += 8 + sz + (sz & 1);
    }
    free(b);
    if (!out) fail_msg("%s: no data chunk", path);
    return out;
}

static void put32(unsigned char *p, uint32_t v) {
    p[0] = v & 255;
    p[1] = v >> 8 & 255;
    p[2] = v >> 16 & 255;
    p[3] = v >> 24 & 255;
}

void pg_test_wav_write_s16(const char *path, const float *x, int64_t frames, int rate,
                           int channels) {
    const size_t n = (size_t)frames * (size_t)channels, bytes = 44 + 2 * n;
    unsigned char *b = malloc(bytes);
    assert_non_null(b);
    memcpy(b, "RIFF", 4);
    put32(b + 4, (uint32_t)(bytes - 8));
    memcpy(b + 8, "WAVEfmt ", 8);
    put32(b + 16, 16);
    b[20] = 1, b[21] = 0, b[22] = (unsigned char)channels, b[23] = 0;
    put32(b + 24, (uint32_t)rate);
    put32(b + 28, (uint32_t)(rate * channels * 2));
    b[32] = (unsigned char)(channels * 2), b[33] = 0, b[34] = 16, b[35] = 0;
    memcpy(b + 36, "data", 4);
    put32(b + 40, (uint32_t)(2 * n));
    for (size_t i = 0; i < n; i++) {
        double v = round((double)x[i] * 32768.0);
        v = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
        int16_t s = (int16_t)v;
        b[44 + 2 * i] = (unsigned char)(s & 255);
        b[45 + 2 * i] = (unsigned char)((uint16_t)s >> 8);
    }
    pg_test_write_file(path, b, bytes);
    free(b);
}
