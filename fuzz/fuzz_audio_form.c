/* libFuzzer target: the form of POST /v1/audio/transcriptions and
 * /translations as libmicrohttpd's post processor hands it to
 * pg_audio_form_add (part name, file name, chunks at increasing offsets),
 * then pg_audio_form_finish's validation of every field. The multipart
 * framing itself is libmicrohttpd's; the input is a list of records:
 *   u8 flags (bit 0: the part has a file name; bits 1-2: split the data
 *            into 1-4 chunks), u8 key length, key bytes, u16 LE data
 *            length, data bytes.
 * The form allows 4 KiB of file so the size limit is reached too. Seeds:
 * scripts/fuzz.sh writes valid forms.
 * Dictionary: fuzz/audio_form.dict
 */
#include <string.h>

#include "fz_util.h"
#include "server/audio_form.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fz_init();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pg_audio_form *f = pg_audio_form_create(4096);
    if (!f) return 0;
    pg_api_error err;
    memset(&err, 0, sizeof err);
    size_t i = 0;
    bool ok = true;
    while (ok && i + 2 <= size) {
        uint8_t flags = data[i], klen = data[i + 1];
        i += 2;
        if (i + klen + 2 > size) break;
        char key[256];
        memcpy(key, data + i, klen);
        key[klen] = 0;
        i += klen;
        size_t dlen = (size_t)data[i] | (size_t)data[i + 1] << 8;
        i += 2;
        if (dlen > size - i) dlen = size - i;
        const char *part = (const char *)data + i;
        i += dlen;
        const char *filename = (flags & 1) ? "speech.wav" : NULL;
        size_t chunks = (size_t)((flags >> 1) & 3) + 1, step = dlen / chunks + 1;
        /* MHD calls the iterator at least once per part, with size 0 for an
         * empty one */
        for (size_t off = 0; ok && (off < dlen || off == 0); off += step) {
            size_t n = dlen - off < step ? dlen - off : step;
            ok = pg_audio_form_add(f, key, filename, part + off, off, n, &err) == PAGODA_OK;
            if (!dlen) break;
        }
    }
    pg_audio_params p;
    if (ok) pg_audio_form_finish(f, &p, &err);
    pg_audio_form_free(f);
    return 0;
}
