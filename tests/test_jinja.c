/* Unit tests of the Jinja subset (through the chat template API): values
 * printed the way Python prints them, operators, filters, tests, methods,
 * control flow, scoping, macros, whitespace control, errors with line
 * numbers and the limits that stop hostile templates. Expected strings are
 * what Python jinja2 3.1 (trim_blocks, lstrip_blocks, loopcontrols) prints. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tokenizer/chat_template.h"

/* Render `src` with the JSON object `vars` (NULL: none) as top-level
 * variables. Returns malloc'ed text, or NULL with *st set on error. */
static char *render_st(const char *src, const char *vars, pagoda_status *st) {
    pg_chat_template *t = NULL;
    *st = pg_chat_template_compile(src, &t);
    if (*st != PAGODA_OK) return NULL;
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"}]");
    cJSON *kw = vars ? cJSON_Parse(vars) : NULL;
    if (vars) assert_non_null(kw);
    struct tm now = {0};
    now.tm_year = 125;
    now.tm_mon = 5;
    now.tm_mday = 15;
    pg_chat_special_tokens sp = {"<s>", "</s>", NULL, NULL};
    char *out = NULL;
    *st = pg_chat_template_render_at(t, msgs, NULL, kw, true, &sp, &now, &out);
    cJSON_Delete(msgs);
    cJSON_Delete(kw);
    pg_chat_template_free(t);
    return out;
}

static void check(const char *src, const char *vars, const char *want) {
    pagoda_status st;
    char *out = render_st(src, vars, &st);
    if (st != PAGODA_OK) fprintf(stderr, "template: %s\nerror: %s\n", src, pg_last_error());
    assert_int_equal(st, PAGODA_OK);
    if (strcmp(out, want) != 0) fprintf(stderr, "template: %s\nwant: [%s]\ngot:  [%s]\n", src, want, out);
    assert_string_equal(out, want);
    free(out);
}
#define CHECK(src, want) check((src), NULL, (want))

static void check_err(const char *src, const char *vars, pagoda_status want_st, const char *part) {
    pagoda_status st;
    char *out = render_st(src, vars, &st);
    if (st == PAGODA_OK) fprintf(stderr, "template: %s\nunexpected output: [%s]\n", src, out);
    free(out);
    assert_int_equal(st, want_st);
    if (!strstr(pg_last_error(), part))
        fprintf(stderr, "template: %s\nwant error containing [%s], got [%s]\n", src, part,
                pg_last_error());
    assert_non_null(strstr(pg_last_error(), part));
    assert_null(strchr(pg_last_error(), '\n'));
}

static void test_literals_and_printing(void **state) {
    (void)state;
    CHECK("{{ 1 }} {{ -2 }} {{ 1.5 }} {{ true }} {{ False }} {{ none }} {{ 'a' }}",
          "1 -2 1.5 True False None a");
    CHECK("{{ [1, 'a', none, true, 1.5] }}", "[1, 'a', None, True, 1.5]");
    CHECK("{{ {'a': 1, 'b': [2]} }}", "{'a': 1, 'b': [2]}");
    CHECK("{{ (1, 2) }} {{ (1,) }} {{ () }}", "(1, 2) (1,) ()");
    CHECK("{{ [\"it's\"] }}", "[\"it's\"]");
    CHECK("{{ 0.1 + 0.2 }} {{ 1/3 }} {{ 4 / 2 }} {{ 1e16 }} {{ 2.5e-5 }} {{ 123456789.0 }}",
          "0.30000000000000004 0.3333333333333333 2.0 1e+16 2.5e-05 123456789.0");
    CHECK("{{ 'a\\nb' }}|{{ \"\\u00e9\\t\" }}|{{ 'x' 'y' }}", "a\nb|\xc3\xa9\t|xy");
    CHECK("{{ 1_000 }}", "1000");
    CHECK("{{ undefined_thing }}|{{ x }}", "|");
}

static void test_operators(void **state) {
    (void)state;
    CHECK("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}", "7 9 1024 0.5");
    CHECK("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 7.5 // 2 }}",
          "3 -4 1 2 3.5 3.0");
    CHECK("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'a' + 'b' }}",
          "a1NoneTrue ababab [1, 2] ab");
    CHECK("{{ 3 in [1, 2, 3] }} {{ 'b' in 'abc' }} {{ 'k' not in {'k': 1} }} {{ 1 == 1.0 }}",
          "True True False True");
    CHECK("{{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }}",
          "True False True True True");
    CHECK("{{ not none and 'y' or 'n' }} {{ 0 or '' or 'last' }} {{ 1 and 2 }}", "y last 2");
    CHECK("{{ 'x' if false }}|{{ 'a' if 1 > 2 else 'b' }}|{{ -3 | abs }}", "|b|3");
    CHECK("{{ 'abc'[::-1] }} {{ 'hello'[1:3] }} {{ [1, 2, 3, 4][-2:] }} {{ [1, 2, 3, 4][::2] }}",
          "cba el [3, 4] [1, 3]");
    CHECK("{{ 'h\xc3\xa9llo'[1] }} {{ [1, 2][-1] }} {{ [1, 2][5] is defined }}", "\xc3\xa9 2 False");
    CHECK("{{ '%s=%d' % ('a', 3) }}", "a=3");
    CHECK("{{ '%05.1f|%-4s|%x|%(k)s' % (3.14159, 'ab', 255, 1) if false else '%05.1f|%-4s|%x' % (3.14159, 'ab', 255) }}",
          "003.1|ab  |ff");
    CHECK("{{ '%(a)s-%(b)05d' % {'a': 'x', 'b': 42} }} {{ '%+d %#o %c %.2s|%5s' % (5, 8, 65, 'h\xc3\xa9llo', 'x') }}",
          "x-00042 +5 0o10 A h\xc3\xa9|    x");
    CHECK("{% for x in [1, 1, 2, 2, 1] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %}", "121");
}

static void test_filters(void **state) {
    (void)state;
    CHECK("{{ \"a\\tb\\n\\\"\" | tojson }}", "\"a\\tb\\n\\\"\"");
    CHECK("{{ {'b': 1, 'a': [1, 2.5, none, true]} | tojson }}",
          "{\"b\": 1, \"a\": [1, 2.5, null, true]}");
    CHECK("{{ {'a': [1, {}], 'b': []} | tojson(indent=2) }}",
          "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    CHECK("{{ 'Gr\xc3\xbc\xc3\x9f""e \xe4\xb8\x96' | tojson }}", "\"Gr\xc3\xbc\xc3\x9f""e \xe4\xb8\x96\"");
    CHECK("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}", "{\"a\": 2, \"b\": 1}");
    CHECK("{{ '\xc3\x89""COLE' | lower }} {{ '\xc3\xa9lan vital' | upper }} {{ 'hELLO wORLD' | capitalize }}",
          "\xc3\xa9""cole \xc3\x89LAN VITAL Hello world");
    CHECK("{{ 'hello world-foo' | title }}", "Hello World-Foo");
    /* full case mappings that expand (SpecialCasing): ß -> SS, ligatures */
    CHECK("{{ 'stra\xc3\x9f""e \xef\xac\x81ne' | upper }} {{ '\xc3\x9f""a' | capitalize }}",
          "STRASSE FINE Ssa");
    CHECK("[{{ '  x \\n' | trim }}] [{{ 'xxhixx' | trim('x') }}]", "[x] [hi]");
    CHECK("{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }}", "1, 2, 3 ab");
    CHECK("{{ u | default('d') }} {{ none | default('d') }} {{ '' | default('d', true) }} {{ '' | d('e', true) }}",
          "d None d e");
    CHECK("{{ 'h\xc3\xa9llo' | length }} {{ [1, 2] | length }} {{ {'a': 1} | count }} {{ nope | length }}",
          "5 2 1 0");
    CHECK("{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
    CHECK("{{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ 'abc' | list }} {{ 'abc' | reverse }}",
          "3 2 ['a', 'b', 'c'] cba");
    CHECK("{{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.7 | int }} {{ '2.5' | float }} {{ 2.567 | round(2) }}",
          "43 0 3 2.5 2.57");
    CHECK("{{ 3 | string ~ 'x' }} {{ [1] | string }} {{ 2.0 | round | int }}", "3x [1] 2");
    CHECK("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }}",
          "[1, 3] [1, 3]");
    CHECK("{{ [0, 1, '', 'a'] | select | list }} {{ none | select | list }}", "[1, 'a'] []");
    const char *users =
        "{\"users\":[{\"name\":\"ann\",\"active\":true,\"age\":30},"
        "{\"name\":\"bob\",\"active\":false,\"age\":25},{\"name\":\"Cid\",\"active\":true,\"age\":41}]}";
    check("{{ users | selectattr('active') | map(attribute='name') | join(',') }}", users, "ann,Cid");
    check("{{ users | rejectattr('name', 'equalto', 'bob') | map(attribute='age') | list }}", users,
          "[30, 41]");
    check("{{ users | selectattr('age', 'gt', 26) | list | length }}", users, "2");
    check("{{ users | sort(attribute='age') | map(attribute='name') | join }}", users, "bobannCid");
    check("{{ users | map(attribute='name') | sort | join }}", users, "annbobCid");
    check("{{ users | join(', ', attribute='name') }}", users, "ann, bob, Cid");
    check("{{ users | map(attribute='missing', default='?') | join }}", users, "???");
    CHECK("{{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }}", "['A', 'b', 'c'] [3, 2, 1]");
    CHECK("{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ ['a', 'b'] | map('upper') | join }}", "['a', 'b'] AB");
    CHECK("{{ {'b': 1, 'A': 2} | dictsort }}", "[('A', 2), ('b', 1)]");
    CHECK("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n' | indent }}",
          "a\n  b\n\n  c|  a\n  b|a\n");
    CHECK("{{ 'aaa' | replace('a', 'b', 2) }} {{ 'a-b' | replace('-', '') }}", "bba ab");
    CHECK("{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | sum }} {{ [3, 9, 2] | max }}",
          "[[1, 2], [3, 4], [5]] 6 9");
    CHECK("{{ '<a href=\"x\">&' | escape }} {{ 'one two  three' | wordcount }}",
          "&lt;a href=&#34;x&#34;&gt;&amp; 3");
    CHECK("{{ '{\"a\": [1, 2]}' | from_json | tojson }}", "{\"a\": [1, 2]}");
    CHECK("{{ 'x' | safe }} {{ [1, 2] | list | length }}", "x 2");
}

/* markupsafe.Markup from |safe / |escape: concatenating a plain string
 * escapes it (transformers templates rely on it, e.g. functionary's
 * `"..."|safe + tool | tojson`); `~` gives a plain string. map/select/...
 * give generators: always true, no length, not JSON serializable. */
static void test_markup_and_generators(void **state) {
    (void)state;
    CHECK("{{ '<a>'|safe + '<b>' }} {{ '<b>' + '<a>'|safe }} {{ '<a>'|safe ~ '<b>' }}",
          "<a>&lt;b&gt; &lt;b&gt;<a> <a><b>");
    CHECK("{{ '<' | e | e }} {{ '\"&\\'' | escape }} {{ ('<a>'|safe).replace('a', '<') }}",
          "&lt; &#34;&amp;&#39; <&lt;>");
    CHECK("{{ '%s'|safe % '<' }} {{ ('<x> '|safe).strip() + '&' }} {{ ('<'|safe) * 2 + '>' }}",
          "&lt; <x>&amp; <<&gt;");
    CHECK("{{ ('<' | safe | upper) + '<' }} {{ {'a': '<'} | tojson | safe }}", "<&lt; {\"a\": \"<\"}");
    CHECK("{{ ([] | select) and 'truthy' }} {{ [1] | select is sequence }} {{ [1] | select is iterable }}",
          "truthy False True");
    CHECK("{{ [1, 2] | reverse | list }} {{ {'a': 1} | items | list }} {{ {'a': 1}.items() | length }}",
          "[2, 1] [('a', 1)] 1");
    check_err("{{ [1] | map('string') | tojson }}", NULL, PAGODA_ERR_FORMAT, "not JSON serializable");
    check_err("{{ [1] | select | length }}", NULL, PAGODA_ERR_FORMAT, "has no len()");
}

static void test_tests(void **state) {
    (void)state;
    CHECK("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} {{ {} is mapping }}",
          "False True True True True");
    CHECK("{{ [] is iterable }} {{ 'a' is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }}",
          "True True True True True");
    CHECK("{{ 1 is number }} {{ 1.0 is integer }} {{ 1 is integer }} {{ true is boolean }} {{ 1.5 is float }}",
          "True False True True True");
    CHECK("{{ 2 is in [1, 2] }} {{ 'a' is equalto 'a' }} {{ 'a' is eq('b') }} {{ 3 is ne 4 }}",
          "True True False True");
    CHECK("{{ true is true }} {{ 1 is true }} {{ false is false }} {{ x is not defined }} {{ 1 is not none }}",
          "True False True True True");
    CHECK("{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 3 is gt 2 }} {{ 2 is le 1 }}", "True True True False");
}

static void test_methods(void **state) {
    (void)state;
    CHECK("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }}",
          "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
    CHECK("{{ 'a.b.c'.rsplit('.', 1) }} {{ 'a.b.c'.rsplit('.') }} {{ ' a b '.rsplit(None, 1) }}",
          "['a.b', 'c'] ['a', 'b', 'c'] [' a', 'b']");
    CHECK("{{ ' a b c '.split(None, 1) }} {{ 'a  '.split(None, 1) }} {{ ' x\ty '.rsplit(None, 5) }}",
          "['a', 'b c '] ['a'] ['x', 'y']");
    CHECK("[{{ 'xxhixx'.strip('x') }}] [{{ '  hi \\n'.strip() }}] [{{ '  hi '.lstrip() }}] [{{ '  hi '.rstrip() }}]",
          "[hi] [hi] [hi ] [  hi]");
    CHECK("{{ 'abc'.startswith('ab') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abc'.endswith('bc') }}",
          "True True True");
    CHECK("{{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }}",
          "2 3 -1 2");
    CHECK("{{ 'ab'.upper() }} {{ 'AB'.lower() }} {{ \"they're bill's\".title() }} {{ 'hi x'.capitalize() }}",
          "AB ab They'Re Bill'S Hi x");
    CHECK("{{ 'a-b'.replace('-', '+') }} {{ ', '.join(['x', 'y']) }} {{ '{} and {}'.format(1, 'b') }}",
          "a+b x, y 1 and b");
    CHECK("{{ 'a\\nb'.splitlines() }} {{ '12'.isdigit() }} {{ 'a1'.isalpha() }}",
          "['a', 'b'] True False");
    CHECK("{% set d = {'a': 1, 'b': 2} %}{{ d.get('a') }} {{ d.get('x', 'no') }} {{ d.get('x') }} "
          "{{ d.keys() | list }} {{ d.values() | list }} {% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}",
          "1 no None ['a', 'b'] [1, 2] a1b2");
    CHECK("{% set l = [] %}{% do l.append(1) %}{% set _ = l.append(2) %}{{ l }} {{ l.pop(0) }} {{ l }}",
          "[1, 2] 1 [2]");
    CHECK("{% set d = {'a': 1} %}{{ d.a }} {{ d['a'] }} {{ d.zz is defined }} {{ d['zz'] is defined }}",
          "1 1 False False");
}

static void test_control_flow(void **state) {
    (void)state;
    CHECK("{% for x in [1, 2, 3] %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}",
          "1/3,2/3,3/3");
    CHECK("{% for x in 'ab' %}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{% endfor %}",
          "021True110False");
    CHECK("{% for x in [] %}a{% else %}empty{% endfor %}", "empty");
    CHECK("{% for x in range(10) if x is odd %}{{ x }}{{ loop.length }}{% endfor %}", "1535557595");
    CHECK("{% for x in range(10) %}{% if x == 3 %}{% break %}{% endif %}{% if x == 1 %}{% continue %}"
          "{% endif %}{{ x }}{% endfor %}",
          "02");
    CHECK("{% for x in [1, 2, 3] %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }} {% endfor %}",
          "-2 13 2- ");
    CHECK("{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}", "37");
    CHECK("{% for x in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}", "aba");
    CHECK("{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}{% endfor %}",
          "001 012 101 112 ");
    CHECK("{% for x in range(5, 0, -2) %}{{ x }}{% endfor %}", "531");
    CHECK("{% if 0 %}a{% elif '' %}b{% elif [1] %}c{% else %}d{% endif %}", "c");
    CHECK("{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", "xy");
    CHECK("{% for m in messages %}{{ m.role }}:{{ m['content'] }}{% endfor %}", "user:hi");
}

static void test_scoping_and_macros(void **state) {
    (void)state;
    CHECK("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", "1");
    CHECK("{% set ns = namespace(x=1, y='a') %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}"
          "{{ ns.x }}{{ ns.y }}",
          "4a");
    CHECK("{% set b %}hi {{ 1 }}{% endset %}[{{ b }}]", "[hi 1]");
    CHECK("{% set b | upper %}hi{% endset %}{{ b }}", "HI");
    CHECK("{% set a, b = 1, 2 %}{{ b }}{{ a }}", "21");
    CHECK("{% macro greet(name, greeting='Hi') %}{{ greeting }} {{ name }}{% endmacro %}"
          "{{ greet('Bob') }}|{{ greet('Al', greeting='Yo') }}|{{ greet(name='Z') }}",
          "Hi Bob|Yo Al|Hi Z");
    CHECK("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", "321");
    CHECK("{% macro wrap(t) %}<{{ t }}:{{ caller() }}>{% endmacro %}{% call wrap('p') %}x{% endcall %}",
          "<p:x>");
    CHECK("{% macro m() %}{{ varargs | length }}{{ kwargs.k }}{% endmacro %}{{ m(1, 2, k=3) }}", "23");
    CHECK("{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}", "G");
    CHECK("{% filter upper %}ab{{ 'c' }}{% endfilter %}", "ABC");
    CHECK("{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}{{ c is defined }}",
          "211False");
    CHECK("{% raw %}{{ x }}{% if %}{% endraw %}", "{{ x }}{% if %}");
    CHECK("{{ bos_token }}{{ eos_token }}{{ pad_token is defined }}{{ add_generation_prompt }}",
          "<s></s>FalseTrue");
    CHECK("{{ tools }} {{ tools is none }} {{ documents is defined }}", "None True True");
    check("{{ enable_thinking }} {{ n + 1 }}", "{\"enable_thinking\":false,\"n\":1}", "False 2");
    CHECK("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }}", "15 Jun 2025 2025-06-15");
    CHECK("{% set d = dict(a=1) %}{{ d }} {{ namespace(x=1).x }}", "{'a': 1} 1");
}

static void test_whitespace_control(void **state) {
    (void)state;
    CHECK("a  {{- 'b' -}}  c", "abc");
    CHECK("{% if true %}\nx\n{% endif %}\ny", "x\ny");
    CHECK("  {% if true %}x{% endif %}", "x");
    CHECK("a  {% if true %}x{% endif %}", "a  x");
    CHECK("  {%+ if true %}x{% endif %}", "  x");
    CHECK("{% if true +%}\nx{% endif %}", "\nx");
    CHECK("a\n", "a");
    CHECK("a\n\n", "a\n");
    CHECK("a\r\nb", "a\nb");
    CHECK("a {#- c -#} b", "ab");
    CHECK("{# c #}\nx", "x");
    CHECK("x\n    {# c #}\ny", "x\ny");
    CHECK("{{ 1 }}\n{{ 2 }}", "1\n2");
    CHECK("<\n  {%- for x in [1, 2] %}\n  {{ x }}\n  {%- endfor %}\n>", "<  1  2>");
    CHECK("{%- if true -%}\n\n  x  \n\n{%- endif -%}", "x");
    CHECK("{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}", "  1\n  2\n");
    CHECK("{% raw -%}\n {{ r }}\n  {% endraw %}|{% raw %}a  {%- endraw %}|", "{{ r }}\n|a|");
}

static void test_errors(void **state) {
    (void)state;
    check_err("line1\n{{ raise_exception('boom here') }}", NULL, PAGODA_ERR_FORMAT, "line 2: boom here");
    check_err("{% if x %}\n{% for %}", NULL, PAGODA_ERR_FORMAT, "line 2");
    check_err("{{ 1 + }}", NULL, PAGODA_ERR_FORMAT, "line 1: unexpected");
    check_err("a\nb\n{{ x", NULL, PAGODA_ERR_FORMAT, "line 3: unclosed");
    check_err("{% if true %}", NULL, PAGODA_ERR_FORMAT, "expected 'endif'");
    check_err("{% endfor %}", NULL, PAGODA_ERR_FORMAT, "unexpected 'endfor'");
    check_err("{% include 'x.j2' %}", NULL, PAGODA_ERR_FORMAT, "unsupported statement 'include'");
    check_err("{{ 'abc }}", NULL, PAGODA_ERR_FORMAT, "unterminated string");
    check_err("{{ x | nosuchfilter }}", NULL, PAGODA_ERR_FORMAT, "unknown filter 'nosuchfilter'");
    check_err("{{ x is nosuchtest }}", NULL, PAGODA_ERR_FORMAT, "unknown test 'nosuchtest'");
    check_err("\n\n{{ x.y }}", NULL, PAGODA_ERR_FORMAT, "line 3: 'x' is undefined");
    check_err("{{ 'a' + 1 }}", NULL, PAGODA_ERR_FORMAT, "unsupported operand type(s) for +: 'str' and 'int'");
    check_err("{{ 'a' + x }}", NULL, PAGODA_ERR_FORMAT, "'x' is undefined");
    check_err("{{ 1 / 0 }}", NULL, PAGODA_ERR_FORMAT, "division by zero");
    check_err("{{ 1 // 0 }}", NULL, PAGODA_ERR_FORMAT, "division by zero");
    check_err("{{ 9223372036854775807 + 1 }}", NULL, PAGODA_ERR_FORMAT, "integer overflow");
    check_err("{{ 99999999999999999999 }}", NULL, PAGODA_ERR_FORMAT, "too large");
    check_err("{% for x in 3 %}{% endfor %}", NULL, PAGODA_ERR_FORMAT, "'int' object is not iterable");
    check_err("{% for a, b in [1] %}{% endfor %}", NULL, PAGODA_ERR_FORMAT, "not iterable");
    check_err("{% set x = 1 %}{% set x.y = 2 %}", NULL, PAGODA_ERR_FORMAT, "namespace");
    check_err("{{ x | tojson }}", NULL, PAGODA_ERR_FORMAT, "not JSON serializable");
    check_err("{{ 1 < 'a' }}", NULL, PAGODA_ERR_FORMAT, "not supported between");
    check_err("{{ 'x'() }}", NULL, PAGODA_ERR_FORMAT, "not callable");
    check_err("{{ [].nosuch() }}", NULL, PAGODA_ERR_FORMAT, "has no attribute 'nosuch'");
    check_err("{{ 'a' @ 1 }}", NULL, PAGODA_ERR_FORMAT, "unexpected character '@'");
    check_err("{# never closed", NULL, PAGODA_ERR_FORMAT, "unclosed comment");
}

static void test_limits(void **state) {
    (void)state;
    check_err("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, PAGODA_ERR_LIMIT,
              "macro recursion");
    check_err("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL,
              PAGODA_ERR_LIMIT, "step limit");
    check_err("\n{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL, PAGODA_ERR_LIMIT,
              "line 2: template output exceeds");
    check_err("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
              "{% endfor %}",
              NULL, PAGODA_ERR_LIMIT, "exceeds");
    check_err("{{ range(1000000) | length }}", NULL, PAGODA_ERR_LIMIT, "range too big");
    check_err("{{ 'x' * 100000000 }}", NULL, PAGODA_ERR_LIMIT, "too large");
    check_err("{% set l = [1] %}{% for i in range(30) %}{% set l = l + l %}{% endfor %}{{ l | length }}",
              NULL, PAGODA_ERR_LIMIT, "limit");
    /* deep nesting in the parser */
    size_t depth = 5000;
    char *deep = malloc(depth * 2 + 16);
    size_t n = 0;
    memcpy(deep + n, "{{ ", 3);
    n += 3;
    for (size_t i = 0; i < depth; i++) deep[n++] = '(';
    deep[n++] = '1';
    for (size_t i = 0; i < depth; i++) deep[n++] = ')';
    memcpy(deep + n, " }}", 4);
    check_err(deep, NULL, PAGODA_ERR_FORMAT, "nested too deeply");
    n = 0;
    for (size_t i = 0; i < 1000; i++) n += (size_t)sprintf(deep + n, "{%% if 1 %%}");
    check_err(deep, NULL, PAGODA_ERR_FORMAT, "nested too deeply");
    free(deep);
    /* quadratic work is charged to the step limit */
    check_err("{% set l = range(100000) | list %}{% for i in range(100000) %}{% if i in l %}{% endif %}"
              "{% endfor %}",
              NULL, PAGODA_ERR_LIMIT, "step limit");
    check_err("{{ range(100000) | list | unique | length }}", NULL, PAGODA_ERR_LIMIT, "step limit");
    /* self-containing values end with an error or an output, never a crash */
    check_err("{% set l = [] %}{% do l.append(l) %}{% do l.append(l) %}{{ l }}", NULL,
              PAGODA_ERR_LIMIT, "output exceeds");
    check_err("{% set l = [] %}{% do l.append(l) %}{{ l | tojson }}", NULL, PAGODA_ERR_FORMAT,
              "not JSON serializable");
    check_err("{% set l = [] %}{% do l.append(l) %}{{ l < l }}", NULL, PAGODA_ERR_FORMAT,
              "recursion depth");
    CHECK("{% set l = [] %}{% do l.append(l) %}{{ (l == l) is boolean }}", "True");
    /* a loop appending to the list it iterates terminates (snapshot) */
    CHECK("{% set l = [1, 2] %}{% for x in l %}{% do l.append(x) %}{% endfor %}{{ l | length }}", "4");
}

/* deep but legal recursion on a thread with a small stack: a LIMIT error,
 * not a stack overflow (the budget follows the thread's stack) */
static char *g_deep_src;
static pagoda_status g_deep_st;
static void *deep_thread(void *arg) {
    (void)arg;
    char *out = render_st(g_deep_src, NULL, &g_deep_st);
    free(out);
    return NULL;
}

static void test_small_thread_stack(void **state) {
    (void)state;
    char *src = malloc(4096);
    size_t n = (size_t)sprintf(src, "{%% macro f(n) %%}{%% if n > 0 %%}{{ ");
    for (int i = 0; i < 40; i++) n += (size_t)sprintf(src + n, "('' ~ ");
    n += (size_t)sprintf(src + n, "f(n - 1)");
    for (int i = 0; i < 40; i++) src[n++] = ')';
    sprintf(src + n, " }}{%% endif %%}{%% endmacro %%}{{ f(99) }}");
    g_deep_src = src;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t th;
    assert_int_equal(pthread_create(&th, &attr, deep_thread, NULL), 0);
    pthread_join(th, NULL);
    pthread_attr_destroy(&attr);
    assert_int_equal(g_deep_st, PAGODA_ERR_LIMIT);
    free(src);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_and_printing),
        cmocka_unit_test(test_operators),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_markup_and_generators),
        cmocka_unit_test(test_tests),
        cmocka_unit_test(test_methods),
        cmocka_unit_test(test_control_flow),
        cmocka_unit_test(test_scoping_and_macros),
        cmocka_unit_test(test_whitespace_control),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_small_thread_stack),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
