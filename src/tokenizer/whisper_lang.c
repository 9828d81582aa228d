/* Whisper's language table and special-token texts (see whisper_lang.h). */
#include "tokenizer/whisper_lang.h"

#include <stdio.h>
#include <strings.h>

const pg_whisper_language PG_WHISPER_LANGUAGES[PG_WHISPER_MAX_LANGUAGES] = {
    {"en", "english"},
    {"zh", "chinese"},
    {"de", "german"},
    {"es", "spanish"},
    {"ru", "russian"},
    {"ko", "korean"},
    {"fr", "french"},
    {"ja", "japanese"},
    {"pt", "portuguese"},
    {"tr", "turkish"},
    {"pl", "polish"},
    {"ca", "catalan"},
    {"nl", "dutch"},
    {"ar", "arabic"},
    {"sv", "swedish"},
    {"it", "italian"},
    {"id", "indonesian"},
    {"hi", "hindi"},
    {"fi", "finnish"},
    {"vi", "vietnamese"},
    {"he", "hebrew"},
    {"uk", "ukrainian"},
    {"el", "greek"},
    {"ms", "malay"},
    {"cs", "czech"},
    {"ro", "romanian"},
    {"da", "danish"},
    {"hu", "hungarian"},
    {"ta", "tamil"},
    {"no", "norwegian"},
    {"th", "thai"},
    {"ur", "urdu"},
    {"hr", "croatian"},
    {"bg", "bulgarian"},
    {"lt", "lithuanian"},
    {"la", "latin"},
    {"mi", "maori"},
    {"ml", "malayalam"},
    {"cy", "welsh"},
    {"sk", "slovak"},
    {"te", "telugu"},
    {"fa", "persian"},
    {"lv", "latvian"},
    {"bn", "bengali"},
    {"sr", "serbian"},
    {"az", "azerbaijani"},
    {"sl", "slovenian"},
    {"kn", "kannada"},
    {"et", "estonian"},
    {"mk", "macedonian"},
    {"br", "breton"},
    {"eu", "basque"},
    {"is", "icelandic"},
    {"hy", "armenian"},
    {"ne", "nepali"},
    {"mn", "mongolian"},
    {"bs", "bosnian"},
    {"kk", "kazakh"},
    {"sq", "albanian"},
    {"sw", "swahili"},
    {"gl", "galician"},
    {"mr", "marathi"},
    {"pa", "punjabi"},
    {"si", "sinhala"},
    {"km", "khmer"},
    {"sn", "shona"},
    {"yo", "yoruba"},
    {"so", "somali"},
    {"af", "afrikaans"},
    {"oc", "occitan"},
    {"ka", "georgian"},
    {"be", "belarusian"},
    {"tg", "tajik"},
    {"sd", "sindhi"},
    {"gu", "gujarati"},
    {"am", "amharic"},
    {"yi", "yiddish"},
    {"lo", "lao"},
    {"uz", "uzbek"},
    {"fo", "faroese"},
    {"ht", "haitian creole"},
    {"ps", "pashto"},
    {"tk", "turkmen"},
    {"nn", "nynorsk"},
    {"mt", "maltese"},
    {"sa", "sanskrit"},
    {"lb", "luxembourgish"},
    {"my", "myanmar"},
    {"bo", "tibetan"},
    {"tl", "tagalog"},
    {"mg", "malagasy"},
    {"as", "assamese"},
    {"tt", "tatar"},
    {"haw", "hawaiian"},
    {"ln", "lingala"},
    {"ha", "hausa"},
    {"ba", "bashkir"},
    {"jw", "javanese"},
    {"su", "sundanese"},
    {"yue", "cantonese"},
};

/* tokenizer.py TO_LANGUAGE_CODE's aliases beyond the names above. */
static const struct {
    const char *alias, *code;
} ALIASES[] = {
    {"burmese", "my"},   {"valencian", "ca"}, {"flemish", "nl"},   {"haitian", "ht"},
    {"letzeburgesch", "lb"}, {"pushto", "ps"}, {"panjabi", "pa"},  {"moldavian", "ro"},
    {"moldovan", "ro"},  {"sinhalese", "si"}, {"castilian", "es"}, {"mandarin", "zh"},
};

int pg_whisper_language_index(const char *s) {
    if (!s || !*s) return -1;
    for (int i = 0; i < PG_WHISPER_MAX_LANGUAGES; i++)
        if (!strcasecmp(s, PG_WHISPER_LANGUAGES[i].code)) return i;
    for (int i = 0; i < PG_WHISPER_MAX_LANGUAGES; i++)
        if (!strcasecmp(s, PG_WHISPER_LANGUAGES[i].name)) return i;
    for (size_t k = 0; k < sizeof ALIASES / sizeof ALIASES[0]; k++)
        if (!strcasecmp(s, ALIASES[k].alias)) return pg_whisper_language_index(ALIASES[k].code);
    return -1;
}

int pg_whisper_num_languages(int32_t n_vocab) {
    if (n_vocab < 51864) return 99;
    int n = (int)(n_vocab - 51765 - (n_vocab >= 51865 ? 1 : 0));
    return n >= 1 && n <= PG_WHISPER_MAX_LANGUAGES ? n : 99;
}

int pg_whisper_special_text(int num_languages, int i, char buf[32]) {
    if (num_languages < 0 || num_languages > PG_WHISPER_MAX_LANGUAGES || i < 0 ||
        i >= pg_whisper_n_specials(num_languages))
        return -1;
    static const char *const TASKS[6] = {"<|translate|>", "<|transcribe|>", "<|startoflm|>",
                                         "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"};
    if (i == 0) return snprintf(buf, 32, "<|endoftext|>");
    if (i == 1) return snprintf(buf, 32, "<|startoftranscript|>");
    i -= 2;
    if (i < num_languages) return snprintf(buf, 32, "<|%s|>", PG_WHISPER_LANGUAGES[i].code);
    i -= num_languages;
    if (i < 6) return snprintf(buf, 32, "%s", TASKS[i]);
    i -= 6;
    /* f"<|{i * 0.02:.2f}|>": the double product, correctly rounded to 2 decimals */
    return snprintf(buf, 32, "<|%.2f|>", (double)i * 0.02);
}
