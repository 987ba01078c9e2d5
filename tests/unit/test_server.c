/*
 * test_server.c - the parts of `tern serve` that need no socket (src/server/
 * request.c and sched.c, linked into this test):
 *   - the request parser: every accepted field, defaults, and a table of bad
 *     bodies (type and range errors) that must give 400 with a message;
 *   - the response builders: error, chat / completion objects, SSE chunks
 *     (parsed back with cJSON);
 *   - the streaming splitter: fed in every two-way split and byte by byte,
 *     its reasoning / content equal tern_chat_parse of the whole text;
 *   - compat.c: Anthropic / Responses bodies translated to chat (checked by parsing the
 *     result), replies and streams translated back (event names and order);
 *   - the front door's request-line verdict on awkward first bytes, and that
 *     a verdict, once given, holds for every longer prefix;
 *   - the scheduler on the embedded default model: greedy jobs run at the
 *     same time in 2 slots give exactly tern_generate's tokens and text, stop
 *     strings and max_tokens end them as there, a cancelled job frees its slot,
 *     a full queue answers 503, and stopping ends waiting jobs.
 */
#include "check.h"
#include "formats/gguf.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <unistd.h>

static srv_request R;
static char E[512];

static int parse(srv_kind k, const char *body) {
    srv_request_free(&R);
    return srv_parse_request(k, body, strlen(body), &R, E, sizeof E);
}

TEST(parse_chat_fields) {
    const char *b =
        "{\"model\":\"x\",\"messages\":[{\"role\":\"developer\",\"content\":\"sys\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"r\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\",\"content\":\"42\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],\"tool_choice\":\"auto\","
        "\"max_completion_tokens\":7,\"max_tokens\":9,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":5,\"min_p\":0.1,"
        "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"seed\":42,\"n\":1,"
        "\"stop\":[\"A\",\"\",\"BC\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,"
        "\"chat_template_kwargs\":{\"enable_thinking\":false},\"logprobs\":false,\"user\":\"u\",\"metadata\":{},\"store\":false}";
    CHECK_EQ_INT(parse(SRV_CHAT, b), 0);
    CHECK_EQ_INT(R.n_msgs, 4);
    CHECK_STR(R.msgs[0].role, "system");
    CHECK_STR(R.msgs[1].content, "a\nb");
    CHECK_STR(R.msgs[2].content, "");
    CHECK_STR(R.msgs[2].reasoning_content, "r");
    CHECK_EQ_INT(R.msgs[2].n_tool_calls, 1);
    if (R.msgs[2].n_tool_calls) {
        CHECK_STR(R.msgs[2].tool_calls[0].name, "f");
        CHECK_STR(R.msgs[2].tool_calls[0].arguments, "{\"x\":1}");
    }
    CHECK_STR(R.msgs[3].role, "tool");
    CHECK(R.tools_json && strstr(R.tools_json, "\"name\":\"f\""));
    CHECK_EQ_INT(R.max_tokens, 7);
    CHECK(R.temp_set && R.top_p_set && R.top_k_set && R.min_p_set && R.seed_set);
    CHECK_NEAR(R.sp.temperature, 0.5, 1e-6);
    CHECK_NEAR(R.sp.top_p, 0.9, 1e-6);
    CHECK_EQ_INT(R.sp.top_k, 5);
    CHECK_NEAR(R.sp.min_p, 0.1, 1e-6);
    CHECK_NEAR(R.sp.presence_penalty, 0.5, 1e-6);
    CHECK_NEAR(R.sp.frequency_penalty, -0.5, 1e-6);
    CHECK_NEAR(R.sp.repeat_penalty, 1.1, 1e-6);
    CHECK_EQ_INT(R.sp.seed, 42);
    CHECK_EQ_INT(R.n_stop, 2);
    if (R.n_stop == 2) { CHECK_STR(R.stop[0], "A"); CHECK_STR(R.stop[1], "BC"); }
    CHECK(R.stream && R.include_usage && R.ignore_eos);
    CHECK_EQ_INT(R.thinking, 0);
    /* tool_choice none drops the tools; a stop string alone; defaults */
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\","
                                 "\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"none\",\"stop\":\"\\n\"}"), 0);
    CHECK(R.tools_json == NULL);
    CHECK_EQ_INT(R.n_stop, 1);
    CHECK(!R.stream && !R.temp_set && !R.seed_set && R.max_tokens == 0 && R.thinking == -1);
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"enable_thinking\":true,\"seed\":-1}"), 0);
    CHECK_EQ_INT(R.thinking, 1);
    CHECK(!R.seed_set);
}

TEST(parse_completion_fields) {
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"Hello\",\"max_tokens\":3,\"temperature\":0}"), 0);
    CHECK_STR(R.prompt, "Hello");
    CHECK_EQ_INT(R.max_tokens, 3);
    CHECK(R.temp_set && R.sp.temperature == 0);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":[\"one\"],\"top_p\":0,\"top_k\":-1}"), 0);
    CHECK_STR(R.prompt, "one");
    CHECK(R.sp.top_p > 0 && R.sp.top_k == 0);
    /* unsupported fields given their neutral value are accepted */
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"best_of\":1,\"suffix\":\"\",\"logit_bias\":{},"
                                       "\"response_format\":{\"type\":\"text\"},\"top_logprobs\":0,\"grammar\":null}"), 0);
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\","
                                 "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}"), 0);
    CHECK(R.tools_json != NULL);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"17\":-100,\"3\":2.5}}"), 0);
    CHECK_EQ_INT((int)R.n_bias, 2);
    CHECK_EQ_INT(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":4}"), 0);
    CHECK_EQ_INT(R.logprobs, 4);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":null}"), 0);
    /* llama.cpp's fields: n_predict is max_tokens (the same value twice is fine), the sampler stages */
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":3}"), 0);
    CHECK_EQ_INT(R.max_tokens, 3);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":3,\"max_tokens\":3,\"n_probs\":2}"), 0);
    CHECK_EQ_INT(R.max_tokens, 3);
    CHECK_EQ_INT(R.n_probs, 2);
    CHECK_EQ_INT(R.logprobs, 2);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":-1,\"typical_p\":0.5,\"min_keep\":2,"
                                       "\"top_n_sigma\":1.5,\"xtc_probability\":0.5,\"xtc_threshold\":0.2,"
                                       "\"dry_multiplier\":0.8,\"dry_base\":2,\"dry_allowed_length\":3,"
                                       "\"dry_penalty_last_n\":-1,\"dry_sequence_breakers\":[\"\\n\",\"x\"],"
                                       "\"samplers\":[\"dry\",\"top_k\",\"temperature\"],\"mirostat\":0,"
                                       "\"mirostat_tau\":5,\"id_slot\":-1,\"cache_prompt\":true,\"user\":\"u\"}"), 0);
    CHECK_EQ_INT(R.max_tokens, 0);
    CHECK_NEAR(R.sp.typical_p, 0.5, 1e-6);
    CHECK_EQ_INT(R.sp.min_keep, 2);
    CHECK_NEAR(R.sp.top_n_sigma, 1.5, 1e-6);
    CHECK_NEAR(R.sp.xtc_probability, 0.5, 1e-6);
    CHECK_NEAR(R.sp.xtc_threshold, 0.2, 1e-6);
    CHECK_NEAR(R.sp.dry_multiplier, 0.8, 1e-6);
    CHECK_NEAR(R.sp.dry_base, 2, 1e-6);
    CHECK_EQ_INT(R.sp.dry_allowed_length, 3);
    CHECK_EQ_INT(R.sp.dry_penalty_last_n, 8192);
    CHECK_EQ_INT((int)R.n_dry_breakers, 2);
    CHECK(R.samplers && !strcmp(R.samplers, "dry;top_k;temperature"));
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"samplers\":\"kypt\"}"), 0);
    CHECK(R.samplers && !strcmp(R.samplers, "top_k;typ_p;top_p;temperature"));
    /* prompts: token ids, a list of strings and id lists */
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":[9707,11,1879]}"), 0);
    CHECK_EQ_INT((int)R.n_prompts, 1);
    CHECK(R.prompt == NULL && R.prompts[0].n_ids == 3 && R.prompts[0].ids[2] == 1879);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":[\"a\",[1,2],\"b\"]}"), 0);
    CHECK_EQ_INT((int)R.n_prompts, 3);
    CHECK_STR(R.prompt, "a");
    CHECK(R.prompts[1].n_ids == 2 && R.prompts[2].text && !strcmp(R.prompts[2].text, "b"));
    CHECK_EQ_INT(R.logprobs, -1);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":3,\"logit_bias\":{\"17\":-100,\"3\":2.5}}"), 0);
    CHECK_EQ_INT(R.logprobs, 3);
    CHECK(R.bias_ids[0] == 17 && R.bias[0] == -100.0f && R.bias_ids[1] == 3 && R.bias[1] == 2.5f);
    CHECK_EQ_INT(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":2,\"stream\":true}"), 0); /* streamed logprobs */
    CHECK_EQ_INT(R.logprobs, 2);
    CHECK(R.stream);
}

TEST(parse_errors) {
    static const struct { srv_kind k; const char *body, *msg; } bad[] = {
        {SRV_CHAT, "", "not valid JSON"},
        {SRV_CHAT, "{\"messages\":", "not valid JSON"},
        {SRV_CHAT, "[1,2]", "JSON object"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}xyz", "more after its JSON value (at byte 45)"},
        {SRV_COMPLETION, "{\"prompt\":\"x\"} {\"prompt\":\"y\"}", "more after its JSON value"},
        {SRV_CHAT, "{}", "'messages' is required"},
        {SRV_CHAT, "{\"messages\":\"hi\"}", "must be an array"},
        {SRV_CHAT, "{\"messages\":[]}", "must not be empty"},
        {SRV_CHAT, "{\"messages\":[1]}", "must be an object"},
        {SRV_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "role must be a string"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", "role must be"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "content must be"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "text"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", "tool_calls must be an array"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}", "name must be a string"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", "'tools' must be an array"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}", "tools[0]"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"maybe\"}", "tool_choice"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":1}", "must be an object"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"chat_template_kwargs\":{\"enable_thinking\":1}}", "boolean"},
        {SRV_COMPLETION, "{}", "'prompt' is required"},
        {SRV_COMPLETION, "{\"prompt\":3}", "'prompt' must be"},
        {SRV_COMPLETION, "{\"prompt\":[]}", "'prompt' must not be"},
        {SRV_COMPLETION, "{\"prompt\":[1,-2]}", "token ids"},
        {SRV_COMPLETION, "{\"prompt\":[[1],5]}", "'prompt'[1] must be"},
        {SRV_COMPLETION, "{\"prompt\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\"]}", "more than 8 prompts"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"mirostat_tau_zz\":5}", "unknown field 'mirostat_tau_zz'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"unknown\":[1,2]}", "unknown field 'unknown'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"prompt\":\"y\"}", "unknown field 'prompt'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"input_prefix\":\"y\"}", "unknown field 'input_prefix'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"mirostat\":2}", "'mirostat' is not supported"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"return_tokens\":true}", "'return_tokens' is not supported"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":3,\"max_tokens\":4}", "disagree"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"n_predict\":0}", "n_predict"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"typical_p\":2}", "typical_p"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"xtc_probability\":-1}", "xtc_probability"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"dry_base\":0.5}", "dry_base"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"dry_sequence_breakers\":[\"\"]}", "dry_sequence_breakers"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"samplers\":[\"top_k\",\"warp\"]}", "'samplers'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"samplers\":\"kq\"}", "'samplers'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"n_probs\":21}", "n_probs"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"top_logprobs\":2}", "chat field"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "integer"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":\"9\"}", "must be a number"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"temperature\":1e999}", "temperature"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"top_p\":1.5}", "top_p"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"min_p\":true}", "min_p"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"presence_penalty\":3}", "presence_penalty"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"repetition_penalty\":0}", "repetition_penalty"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"repetition_penalty\":5e-324}", "repetition_penalty"},   /* 0 as a float */
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"seed\":0.5}", "integer"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"n\":9}", "'n'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"n\":0}", "'n'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"stop\":5}", "'stop'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"a\",5]}", "'stop'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}", "more than"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "'stream' must be a boolean"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":[]}", "stream_options"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":1}}", "include_usage"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"ignore_eos\":1}", "'ignore_eos' must be a boolean"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":6}", "logprobs"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":1}", "boolean"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"top_logprobs\":21}", "top_logprobs"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "echo"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"bogus\"}}", "'response_format' type \"bogus\""},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\",\"schema\":3}}", "'response_format.schema'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\"}}", "'response_format.json_schema'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":1}}}", "'response_format.json_schema.schema'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":\"json\"}", "'response_format'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"best_of\":2}", "'best_of'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "'suffix'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":-101}}", "'logit_bias' value"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"a\":1}}", "not a token id"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"-1\":1}}", "not a token id"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"5x\":1}}", "not a token id"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":{\"5\":\"1\"}}", "'logit_bias' value"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"logit_bias\":[1]}", "'logit_bias' must be an object"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":3}", "needs 'logprobs'"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"grammar\":5}", "'grammar' must be a string"},
        {SRV_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\",\"json_schema\":{}}", "one of"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"functions\":[]}", "'functions'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}", "'g', which is not in 'tools'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"required\",\"grammar\":\"root ::= \\\"a\\\"\"}", "cannot be combined"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}", "needs 'tools'"},
        {SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":{\"function\":{}}}", "tool_choice.function.name"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = parse(bad[i].k, bad[i].body);
        CHECK_MSG(rc == 400, "body %s: rc %d", bad[i].body, rc);
        CHECK_MSG(strstr(E, bad[i].msg) != NULL, "body %s: message '%s' lacks '%s'", bad[i].body, E, bad[i].msg);
    }
    /* a long stop string */
    char big[600] = "{\"prompt\":\"x\",\"stop\":\"";
    size_t l = strlen(big);
    memset(big + l, 'a', 300);
    strcpy(big + l + 300, "\"}");
    CHECK_EQ_INT(parse(SRV_COMPLETION, big), 400);
    srv_request_free(&R);
}

/* srv_constraint_grammar: each kind of constraint gives a grammar that accepts
 * a well-formed reply and refuses a malformed one (no model: the byte matcher). */
static int accepts(const tern_str *g, const char *root, const char *text) {
    tern_grammar *G = NULL;
    tern_grammar_matcher *m = NULL;
    int r = -1;
    if (!tern_grammar_parse(g->data, g->len, root, &G) && !tern_grammar_matcher_new(G, NULL, &m))
        r = tern_grammar_matcher_accept_bytes(m, text, strlen(text)) && tern_grammar_matcher_is_done(m);
    tern_grammar_matcher_free(m);
    tern_grammar_free(G);
    return r;
}

TEST(constraint_grammar) {
    static const char *tools = ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
        "\"unit\":{\"enum\":[\"C\",\"F\"]}},\"required\":[\"city\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";
    static const struct { const char *body; int fmt; const char *good, *bad; } cases[] = {
        {"\"response_format\":{\"type\":\"json_object\"}", 0, "{\"a\": [1, true]}", "[1]"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\","
         "\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}}}", 0, "{\"n\": 3}", "{\"n\": \"3\"}"},
        {"\"grammar\":\"root ::= [ab]+\"", 0, "abba", "abc"},
        {"\"tool_choice\":\"required\"", TERN_CHAT_QWEN3,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"C\"}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"},
        {"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}", TERN_CHAT_QWEN3,
         "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>",
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"},
        {"\"tool_choice\":\"required\"", TERN_CHAT_QWEN35,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=unit>\nF\n</parameter>\n"
         "</function>\n</tool_call>",
         "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char body[2048];
        snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]%s,%s}", tools, cases[i].body);
        CHECK_MSG(parse(SRV_CHAT, body) == 0, "case %zu: %s", i, E);
        tern_str g = {0};
        const char *root = NULL;
        char err[256] = "";
        CHECK_MSG(srv_constraint_grammar(&R, (tern_chat_format)cases[i].fmt, &g, &root, err, sizeof err) == 0, "case %zu: %s", i, err);
        CHECK_MSG(accepts(&g, root, cases[i].good) == 1, "case %zu: good text refused\n%s", i, g.data);
        CHECK_MSG(accepts(&g, root, cases[i].bad) == 0, "case %zu: bad text accepted", i);
        tern_str_free(&g);
    }
    /* an unsupported schema keyword / a bad grammar: 400 naming it */
    CHECK(parse(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
                         "\"json_schema\":{\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}}") == 0);
    tern_str g = {0};
    const char *root;
    char err[256] = "";
    CHECK(srv_constraint_grammar(&R, TERN_CHAT_QWEN3, &g, &root, err, sizeof err) == 400 && strstr(err, "pattern"));
    tern_str_free(&g);
    CHECK(parse(SRV_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"a\\\"\\nx ::= (\"}") == 0);
    CHECK(srv_constraint_grammar(&R, TERN_CHAT_QWEN3, &g, &root, err, sizeof err) == 400 && strstr(err, "line 2"));
    tern_str_free(&g);
    srv_request_free(&R);
}

/* Parse a builder's output back; NULL when it is not JSON. */
static cJSON *back(const char *s) { return s ? cJSON_Parse(s) : NULL; }

/* srv_logprob_of against a float64 log-softmax and a brute-force ranking */
TEST(logprob_of) {
    enum { NV = 37 };
    float lg[NV];
    for (int i = 0; i < NV; i++) lg[i] = (float)((i * 7919) % 23) * 0.37f - 3.0f;   /* has ties */
    double mx = -1e30, sum = 0;
    for (int i = 0; i < NV; i++) if (lg[i] > mx) mx = lg[i];
    for (int i = 0; i < NV; i++) sum += exp(lg[i] - mx);
    srv_logprob e;
    srv_logprob_of(lg, NV, 5, 6, &e);
    CHECK(fabs(e.lp - (lg[5] - mx - log(sum))) < 1e-5);
    CHECK_EQ_INT(e.n_top, 6);
    bool used[NV] = {false};
    for (int k = 0; k < 6; k++) {      /* k-th best: the largest unused logit, lowest id on ties */
        int best = -1;
        for (int i = 0; i < NV; i++) if (!used[i] && (best < 0 || lg[i] > lg[best])) best = i;
        used[best] = true;
        CHECK_MSG(e.top_id[k] == best, "rank %d: %d, want %d", k, e.top_id[k], best);
        CHECK(fabs(e.top_lp[k] - (lg[best] - mx - log(sum))) < 1e-5);
    }
    srv_logprob_of(lg, NV, 0, 0, &e);
    CHECK_EQ_INT(e.n_top, 0);
}

TEST(request_line_verdict) {
    enum { P = SRV_REQLINE_PENDING, V = SRV_REQLINE_VALID, I = SRV_REQLINE_INVALID };
    char a32[33], a33[34], a31sp[34], a32sp[35], crlf17[35];
    memset(a32, 'A', 32), a32[32] = 0;
    memset(a33, 'A', 33), a33[33] = 0;
    memset(a31sp, 'A', 31), memcpy(a31sp + 31, " /", 3);  /* the target is byte 32: the last one looked at */
    memset(a32sp, 'A', 32), memcpy(a32sp + 32, " /", 3);  /* byte 33: too far */
    for (int k = 0; k < 17; k++) memcpy(crlf17 + 2 * k, "\r\n", 2);
    crlf17[34] = 0;
#define L(s) s, sizeof s - 1
    struct { const char *s; size_t n; int want; } t[] = {
        {L(""), P},
        {L(" "), I},                        /* no method */
        {L("   "), I},
        {L(" / HTTP/1.1"), I},
        {L("GET\t/ HTTP/1.1"), I},          /* a tab is not a space */
        {L("GARBAGE\r\n\r\n"), I},
        {L("GET\r\n\r\n"), I},
        {L("GET\n"), I},
        {L("GET"), P},
        {L("GET "), P},
        {L("GET   "), P},
        {L("GET \r\n"), I},                 /* a line end where the target should be */
        {L("GET /"), V},
        {L("GET  /health HTTP/1.1"), V},    /* libmicrohttpd tolerates extra spaces */
        {L("OPTIONS * HTTP/1.1"), V},
        {L("get /health HTTP/1.1"), V},     /* a token: the handler answers 405 */
        {L("M-SEARCH * HTTP/1.1"), V},
        {L("FOO BAR BAZ"), V},              /* a bad version: libmicrohttpd's own 400 */
        {L("\r\nGET / HTTP/1.1"), V},       /* empty lines before the request line */
        {L("\n\nGET /"), V},
        {L("\r"), P},
        {L("\r\n\r\n"), P},
        {L("\rGET /"), I},                  /* a bare CR is no line end */
        {crlf17, 34, I},                    /* empty lines only, past the window */
        {a32, 32, P},
        {a33, 33, I},                       /* 33 bytes, no space */
        {a31sp, 33, V},
        {a32sp, 34, I},
        {L("G\xc3\xa9T / HTTP/1.1"), I},    /* non-ASCII in the method */
        {L("\x16\x03\x01\x02\x00"), I},     /* a TLS ClientHello */
        {L("GET\0/ HTTP/1.1"), I},
        {L("GET /\xff\xfe"), V},            /* the target is libmicrohttpd's business */
    };
#undef L
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int got = srv_request_line_verdict(t[i].s, t[i].n);
        CHECK_MSG(got == t[i].want, "case %zu: verdict %d, want %d", i, got, t[i].want);
        /* every prefix: pending until the verdict, the verdict from then on */
        int first = P;
        for (size_t k = 0; k <= t[i].n; k++) {
            int v = srv_request_line_verdict(t[i].s, k);
            if (first != P) CHECK_MSG(v == first, "case %zu prefix %zu: verdict %d after %d", i, k, v, first);
            else if (v != P) CHECK_MSG(v == t[i].want, "case %zu prefix %zu: verdict %d, want %d", i, k, v, t[i].want);
            if (v != P) first = v;
        }
    }
    CHECK_EQ_INT(SRV_REQLINE_PEEK, 33);     /* the window the cases above are built around */
}

TEST(builders) {
    char *e = srv_json_error(413, "too \xff big");
    cJSON *j = back(e);
    CHECK(j != NULL);
    cJSON *err = cJSON_GetObjectItem(j, "error");
    CHECK(cJSON_IsString(cJSON_GetObjectItem(err, "message")));
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(err, "message")), "too \xEF\xBF\xBD big");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(err, "code")), "request_too_large");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(err, "type")), "invalid_request_error");
    cJSON_Delete(j);
    free(e);

    srv_resp_id id = {SRV_CHAT, "chatcmpl-abc", 1700000000, "m"};
    srv_usage u = {5, 3, 10, 30};
    tern_tool_call tc = {"get", "{\"a\":1}"};
    tern_chat_reply rep = {"why", "", &tc, 1};
    char *s = srv_json_response(&id, "raw", &rep, SRV_FINISH_STOP, &u);
    j = back(s);
    CHECK(j != NULL);
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    cJSON *msg = cJSON_GetObjectItem(c0, "message");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(j, "object")), "chat.completion");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason")), "tool_calls");
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(msg, "content")));
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "reasoning_content")), "why");
    cJSON *call = cJSON_GetArrayItem(cJSON_GetObjectItem(msg, "tool_calls"), 0);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(call, "function"), "arguments")), "{\"a\":1}");
    CHECK_EQ_INT(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valueint, 8);
    CHECK_NEAR(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "timings"), "predicted_per_second")->valuedouble, 100, 1e-9);
    cJSON_Delete(j);
    free(s);

    srv_resp_id cid = {SRV_COMPLETION, "cmpl-1", 1, "m"};
    s = srv_json_response(&cid, "hello", NULL, SRV_FINISH_LENGTH, &u);
    j = back(s);
    c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "text")), "hello");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(c0, "finish_reason")), "length");
    cJSON_Delete(j);
    free(s);

    tern_str out = {0};
    srv_delta d = {0};
    d.role = true;
    CHECK_EQ_INT(srv_sse_chunk(&id, &d, NULL, &out), TERN_OK);
    memset(&d, 0, sizeof d);
    d.content = "hi";
    CHECK_EQ_INT(srv_sse_chunk(&id, &d, NULL, &out), TERN_OK);
    CHECK_EQ_INT(srv_sse_chunk(&id, &d, &u, &out), TERN_OK);
    CHECK(out.data && !strncmp(out.data, "data: {", 7));
    int events = 0;
    for (char *p = out.data; p && (p = strstr(p, "data: "));) {
        char *end = strstr(p, "\n\n");
        CHECK(end != NULL);
        if (!end) break;
        *end = 0;
        cJSON *ev = back(p + 6);
        CHECK(ev != NULL);
        CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(ev, "object")), "chat.completion.chunk");
        cJSON *ch = cJSON_GetObjectItem(ev, "choices");
        if (events == 0) CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "delta"), "role")), "assistant");
        if (events == 1) CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(ch, 0), "delta"), "content")), "hi");
        if (events == 2) CHECK(cJSON_GetArraySize(ch) == 0 && cJSON_GetObjectItem(ev, "usage"));
        cJSON_Delete(ev);
        events++;
        p = end + 1;
    }
    CHECK_EQ_INT(events, 3);
    tern_str_free(&out);
    CHECK_STR(srv_finish_str(SRV_FINISH_STOP), "stop");
    CHECK(srv_finish_str(SRV_FINISH_CANCELLED) == NULL);
}

/* Split `text` into pieces at `cut` (and byte by byte when cut < 0); compare
 * with tern_chat_parse of the whole. */
static void split_check(const char *text, bool open, int cut) {
    srv_split sp;
    srv_split_init(&sp, open);
    tern_str c = {0}, r = {0};
    tern_str_append(&c, "", 0);
    tern_str_append(&r, "", 0);
    size_t n = strlen(text);
    if (cut < 0) {
        for (size_t i = 0; i < n; i++) srv_split_push(&sp, text + i, 1, &c, &r);
    } else {
        srv_split_push(&sp, text, (size_t)cut, &c, &r);
        srv_split_push(&sp, text + cut, n - (size_t)cut, &c, &r);
    }
    srv_split_finish(&sp, &c, &r);
    tern_chat_reply rep;
    CHECK(tern_chat_parse(TERN_CHAT_QWEN35, text, n, open, &rep) == TERN_OK);
    CHECK_MSG(!strcmp(c.data, rep.content), "text [%s] open %d cut %d: content [%s] want [%s]", text, open, cut, c.data, rep.content);
    CHECK_MSG(!strcmp(r.data, rep.reasoning), "text [%s] open %d cut %d: reasoning [%s] want [%s]", text, open, cut, r.data, rep.reasoning);
    tern_chat_reply_free(&rep);
    tern_str_free(&c);
    tern_str_free(&r);
    srv_split_free(&sp);
}

TEST(splitter_matches_parse) {
    static const char *texts[] = {
        "Hello world", "  \n Hello \n world \n\n", "\n\nThe answer.\n", "", "<think>", "<thi", "<think",
        "<think>\nI think.\n</think>\n\nAnswer.", "\n<think>x</think>y", "<think>\n\n</think>\n\nDone \n",
        "I reason\n\nmore\n</think>\n\nFinal\n", "cut off reasoning\n\n", "a</think", "</thinkx",
        "a </think> b </think> c", "tab\tend\t", "caf\xc3\xa9 \xe2\x82\xac\n",
    };
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++)
        for (int open = 0; open < 2; open++) {
            /* not covered: a reply that re-opens <think> although the prompt
             * opened it (the parser drops that tag only once </think> follows) */
            if (open && strstr(texts[t], "<think>") && strstr(texts[t], "</think>")) continue;
            int n = (int)strlen(texts[t]);
            for (int cut = -1; cut <= n; cut++) split_check(texts[t], open, cut);
        }
    /* a tool call: content before it is streamed, the rest held back */
    srv_split sp;
    srv_split_init(&sp, false);
    tern_str c = {0}, r = {0};
    tern_str_append(&c, "", 0);
    tern_str_append(&r, "", 0);
    const char *t = "Let me look. <tool_call>\n<function=get>\n</function>\n</tool_call>";
    for (size_t i = 0; t[i]; i++) srv_split_push(&sp, t + i, 1, &c, &r);
    srv_split_finish(&sp, &c, &r);
    CHECK_STR(c.data, "Let me look.");
    CHECK(sp.tool);
    tern_str_free(&c);
    tern_str_free(&r);
    srv_split_free(&sp);
}

/* ------------------------------------------------------------- scheduler */

static tern_model *M;
static tern_tokenizer *T;

static bool load_default(void) {
    if (M) return true;
    const char *src = getenv("TERN_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/tern-default.gguf", src ? src : ".");
    if (access(path, R_OK)) return false;
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    if (tern_tokenizer_load(path, &T) || tern_model_load(path, &mp, &M)) return false;
    return true;
}

/* The reference: tern_generate on a fresh session. */
static void reference(const char *prompt, const tern_sampler_params *sp, int max_tokens, const char *const *stop,
                      size_t n_stop, tern_gen_result *res) {
    tern_session *s = NULL;
    tern_sampler *smp = NULL;
    tern_tokens ids = {0};
    CHECK(tern_session_new(M, NULL, &s) == TERN_OK);
    CHECK(tern_sampler_new(sp, tern_model_get_info(M)->n_vocab, &smp) == TERN_OK);
    CHECK(tern_tokenize(T, prompt, strlen(prompt), true, &ids) == TERN_OK);
    tern_gen_params gp = {max_tokens, stop, n_stop, NULL, NULL, NULL};
    CHECK(tern_generate(s, T, smp, ids.ids, ids.n, &gp, res) == TERN_OK);
    tern_tokens_free(&ids);
    tern_sampler_free(smp);
    tern_session_free(s);
}

static srv_job *job_for(const char *prompt, const tern_sampler_params *sp, int max_tokens, const char *stop) {
    srv_job *j = srv_job_new();
    CHECK(tern_tokenize(T, prompt, strlen(prompt), true, &j->prompt) == TERN_OK);
    j->sp = *sp;
    j->max_tokens = max_tokens;
    if (stop) {
        j->stop = calloc(1, sizeof *j->stop);
        j->stop[0] = strdup(stop);
        j->n_stop = 1;
    }
    return j;
}

static void wait_done(srv_job *j) {
    size_t seen = 0;
    for (int i = 0; i < 6000 && !srv_job_wait(j, 100, &seen, NULL); i++) {}
}

/* The scheduler loop runs on this (the main) thread, as in `tern serve`; the
 * checks run on a client thread that stops the loop when done. References
 * (tern_generate) are computed on the main thread first: the library's
 * per-thread scratch of a thread that exits is never freed. */
typedef struct client { srv_sched *s; void (*fn)(struct client *); } client;
static void *client_main(void *arg) {
    client *c = arg;
    c->fn(c);
    srv_sched_stop(c->s);
    return NULL;
}
static int g_sample_threads;  /* srv_sched_params.sample_threads of with_sched's scheduler */
static void with_sched(int n_parallel, int n_ctx, int queue, void (*fn)(client *)) {
    srv_sched_params p = {n_parallel, n_ctx, queue};
    p.sample_threads = g_sample_threads;
    client c = {NULL, fn};
    CHECK(srv_sched_new(M, T, &p, &c.s) == TERN_OK);
    if (!c.s) return;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, client_main, &c) == 0);
    srv_sched_run(c.s);
    pthread_join(th, NULL);
    srv_sched_free(c.s);
}

#define N_EQ 3
static char longp[2048];
static const char *prompts[N_EQ];
static tern_sampler_params greedy, seeded;
static const tern_sampler_params *sps[N_EQ];
static const int maxt[N_EQ] = {24, 20, 28};
static tern_gen_result refs[N_EQ], ref_stop;
static char stop_str[4];

static void eq_client(client *c) {
    srv_job *jobs[N_EQ];
    for (int k = 0; k < N_EQ; k++) {
        jobs[k] = job_for(prompts[k], sps[k], maxt[k], NULL);
        CHECK_EQ_INT(srv_sched_submit(c->s, jobs[k]), 0);
    }
    for (int k = 0; k < N_EQ; k++) {
        wait_done(jobs[k]);
        CHECK(jobs[k]->done);
        CHECK_EQ_INT(jobs[k]->finish, SRV_FINISH_LENGTH);
        CHECK_EQ_INT(jobs[k]->usage.completion_tokens, refs[k].tokens.n);
        CHECK_EQ_INT(jobs[k]->usage.prompt_tokens, refs[k].n_prompt);
        CHECK_MSG(!strcmp(jobs[k]->text.data, refs[k].text.data), "job %d: [%s] vs generate [%s]", k,
                  jobs[k]->text.data, refs[k].text.data);
        srv_job_unref(jobs[k]);
    }
    /* a stop string inside that text ends the job as tern_generate ends */
    if (stop_str[0]) {
        srv_job *j = job_for(prompts[0], &greedy, 24, stop_str);
        CHECK_EQ_INT(srv_sched_submit(c->s, j), 0);
        wait_done(j);
        CHECK_EQ_INT(j->finish, SRV_FINISH_STOP);
        CHECK_EQ_INT(ref_stop.reason, TERN_STOP_STRING);
        CHECK_STR(j->text.data, ref_stop.text.data);
        srv_job_unref(j);
    }
    int busy = -1, queued = -1;
    srv_sched_stats(c->s, &busy, &queued, NULL, NULL);
    CHECK_EQ_INT(busy, 0);
    CHECK_EQ_INT(queued, 0);
}

TEST(sched_equals_generate) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    tern_sampler_params_default(&greedy);
    greedy.temperature = 0;
    tern_sampler_params_default(&seeded);
    seeded.temperature = 0.8f;
    seeded.top_k = 40;
    seeded.seed = 1234;
    /* a prompt longer than one prefill chunk (64) exercises chunk interleaving */
    longp[0] = 0;
    for (int i = 0; i < 12; i++) strcat(longp, "The kernel module loader resolves symbols. ");
    prompts[0] = "The Linux kernel provides";
    prompts[1] = longp;
    prompts[2] = "import os\nimport sys\n\ndef main";
    sps[0] = &greedy; sps[1] = &greedy; sps[2] = &seeded;
    for (int k = 0; k < N_EQ; k++) reference(prompts[k], sps[k], maxt[k], NULL, 0, &refs[k]);
    stop_str[0] = 0;
    if (refs[0].text.len > 8) {
        stop_str[0] = refs[0].text.data[refs[0].text.len / 2];
        stop_str[1] = refs[0].text.data[refs[0].text.len / 2 + 1];
        stop_str[2] = 0;
        const char *st[1] = {stop_str};
        reference(prompts[0], &greedy, 24, st, 1, &ref_stop);
    }
    with_sched(2, 512, 4, eq_client);
    /* the tokens chosen on a pool of threads (forced: the embedded vocabulary is small) */
    g_sample_threads = 3;
    with_sched(3, 512, 4, eq_client);
    g_sample_threads = 0;
    for (int k = 0; k < N_EQ; k++) tern_gen_result_free(&refs[k]);
    tern_gen_result_free(&ref_stop);
}

/* Prefill beside decode: while one slot decodes, two long prompts arriving together are
 * evaluated at most --prefill-budget tokens per round (default one chunk), oldest first;
 * every reply still equals tern_generate's; decode passes never exceed --decode-batch. */
static tern_gen_result bud_ref[3];
static char bud_long[2][4096];
static int bud_budget, bud_chunk;
static void budget_client(client *c) {
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = 0;
    /* a's short prompt is done in the first round; it then decodes (the reference
     * shows it generates >= 16 tokens) while b and c are still prefilling */
    srv_job *a = job_for("The Linux kernel provides", &sp, 48, NULL), *b[2];
    for (int k = 0; k < 2; k++) b[k] = job_for(bud_long[k], &sp, 4, NULL);
    srv_job *all[3] = {a, b[0], b[1]};
    CHECK_EQ_INT(srv_sched_submit_all(c->s, all, 3), 0);
    wait_done(a);
    CHECK_STR(a->text.data, bud_ref[0].text.data);
    for (int k = 0; k < 2; k++) {
        wait_done(b[k]);
        CHECK_MSG(b[k]->done && !strcmp(b[k]->text.data, bud_ref[1 + k].text.data), "long prompt %d: [%s] vs [%s]", k,
                  b[k]->text.data, bud_ref[1 + k].text.data);
        CHECK(b[k]->usage.prompt_tokens > 256);
        srv_job_unref(b[k]);
    }
    srv_job_unref(a);
    srv_step_stats st;
    srv_sched_step_stats(c->s, &st);
    CHECK_EQ_INT(st.chunk, bud_chunk);
    CHECK_EQ_INT(st.prefill_budget, bud_budget > bud_chunk ? bud_budget : bud_chunk);
    CHECK_EQ_INT(st.decode_batch, 2);
    CHECK_MSG(st.max_prefill_decoding > 0 && st.max_prefill_decoding <= (size_t)st.prefill_budget,
              "a round evaluated %zu prompt tokens beside decoding (budget %d)", st.max_prefill_decoding, st.prefill_budget);
    unsigned long long passes = 0;
    for (int k = 0; k <= SRV_BATCH_BUCKETS; k++) passes += st.batch_bucket[k];
    CHECK(passes > 0 && st.batch_bucket[0] + st.batch_bucket[1] == passes); /* <= 2 rows each */
    CHECK(st.prefill_tokens >= 2 * 256 && st.decode_tokens >= 16 && st.rounds > 0 && st.passes >= passes);
    CHECK(st.sample_s > 0 && st.sample_s < st.decode_s + st.prefill_s + 60); /* tokens were chosen on the host */
    srv_metrics mm;
    srv_metrics_init(&mm);
    char *text = srv_metrics_render(&mm, 0, 0, 3, NULL, &st);
    CHECK(text && strstr(text, "tern_decode_batch_size_bucket{le=\"2\"}") && strstr(text, "tern_sched_tokens_total{kind=\"prefill\"}")
          && strstr(text, "tern_sched_seconds_total{kind=\"sample\"}"));
    free(text);
}

/* srv_pool: every index exactly once per run, over many runs (each wakes the workers), with
 * more and fewer indices than threads; NULL and one thread run serially */
static atomic_int pool_hits[1000];
static void pool_fn(void *ctx, int i) {
    atomic_fetch_add(&pool_hits[i], 1);
    atomic_fetch_add((atomic_int *)ctx, 1);
}
TEST(pool_runs_each_index_once) {
    const int threads[] = {1, 2, 5};
    for (int ti = 0; ti < 3; ti++) {
        srv_pool *p = srv_pool_new(threads[ti]);
        CHECK(p != NULL);
        if (!p) return;
        CHECK_EQ_INT(srv_pool_threads(p), threads[ti]);
        for (int r = 0; r < 300; r++) {
            int n = (r * 37) % 1000, bad = 0;
            atomic_int total = 0;
            for (int i = 0; i < n; i++) atomic_store(&pool_hits[i], 0);
            srv_pool_run(p, n, pool_fn, &total);
            for (int i = 0; i < n; i++) bad += atomic_load(&pool_hits[i]) != 1;
            CHECK_MSG(!bad && atomic_load(&total) == n, "%d threads, run %d: %d of %d indices not run exactly once",
                      threads[ti], r, bad, n);
            if (bad) break;
        }
        srv_pool_free(p);
    }
    atomic_int total = 0;
    srv_pool_run(NULL, 7, pool_fn, &total);
    CHECK_EQ_INT(atomic_load(&total), 7);
}

TEST(sched_prefill_budget) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = 0;
    for (int k = 0; k < 2; k++) {
        bud_long[k][0] = 0;
        for (int i = 0; i < 64; i++) strcat(bud_long[k], k ? "Python lists keep their order. " : "The scheduler admits a job. ");
    }
    reference("The Linux kernel provides", &sp, 48, NULL, 0, &bud_ref[0]);
    CHECK(bud_ref[0].tokens.n >= 16);
    for (int k = 0; k < 2; k++) reference(bud_long[k], &sp, 4, NULL, 0, &bud_ref[1 + k]);
    /* the default budget (one chunk), 128, and --prefill-chunk 32 (rounds of 32 prompt tokens) */
    for (int r = 0; r < 3; r++) {
        bud_budget = r == 1 ? 128 : 0;
        bud_chunk = r == 2 ? 32 : 64;
        srv_sched_params p = {3, 1024, 4};
        p.prefill_budget = bud_budget;
        p.prefill_chunk = r == 2 ? 32 : 0;
        p.decode_batch = 2;
        client c = {NULL, budget_client};
        CHECK(srv_sched_new(M, T, &p, &c.s) == TERN_OK);
        if (!c.s) break;
        pthread_t th;
        CHECK(pthread_create(&th, NULL, client_main, &c) == 0);
        srv_sched_run(c.s);
        pthread_join(th, NULL);
        srv_sched_free(c.s);
    }
    for (int k = 0; k < 3; k++) tern_gen_result_free(&bud_ref[k]);
}

static void cancel_client(client *c) {
    srv_sched *s = c->s;
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = 0;
    srv_job *a = job_for("The Linux kernel provides", &sp, 0, NULL);
    CHECK_EQ_INT(srv_sched_submit(s, a), 0);
    /* wait until a runs, then b waits in the queue and c finds it full */
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&a->mu);
        bool started = a->started;
        pthread_mutex_unlock(&a->mu);
        if (started) break;
        usleep(2000);
    }
    srv_job *b = job_for("Hello", &sp, 4, NULL), *cj = job_for("Hello", &sp, 4, NULL);
    /* srv_sched_submit_all is all or nothing: two jobs do not fit the queue's one free
     * place, and neither is queued */
    srv_job *pair[2] = {b, cj};
    CHECK_EQ_INT(srv_sched_submit_all(s, pair, 2), 503);
    int busy = 0, queued = 0;
    srv_sched_stats(s, &busy, &queued, NULL, NULL);
    CHECK_EQ_INT(queued, 0);
    CHECK_EQ_INT(srv_sched_submit(s, b), 0);
    CHECK_EQ_INT(srv_sched_submit(s, cj), 503);
    srv_sched_stats(s, &busy, &queued, NULL, NULL);
    CHECK_EQ_INT(busy, 1);
    CHECK_EQ_INT(queued, 1);
    /* cancelling a frees the slot: b runs to its end */
    srv_job_cancel(a);
    wait_done(a);
    CHECK_EQ_INT(a->finish, SRV_FINISH_CANCELLED);
    wait_done(b);
    CHECK_EQ_INT(b->finish, SRV_FINISH_LENGTH);
    CHECK_EQ_INT(b->usage.completion_tokens, 4);
    /* stopping ends a running job and refuses new ones */
    srv_job *d = job_for("The Linux kernel provides", &sp, 0, NULL);
    CHECK_EQ_INT(srv_sched_submit(s, d), 0);
    srv_sched_stop(s);
    wait_done(d);
    CHECK(d->done);
    CHECK(d->finish == SRV_FINISH_ERROR && strstr(d->error, "shutting down") != NULL);
    CHECK_EQ_INT(srv_sched_submit(s, cj), 503);
    srv_job_unref(a);
    srv_job_unref(b);
    srv_job_unref(cj);
    srv_job_unref(d);
}

TEST(sched_cancel_queue_stop) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    with_sched(1, 256, 1, cancel_client);
}

/* A burst that idle slots will take: --queue counts requests beyond the busy slots, so
 * with 3 idle slots and --queue 1 four requests wait (the scheduler may be inside a long
 * step when they arrive) and the fifth gets 503; stopping ends the waiting ones. */
TEST(sched_queue_counts_idle_slots) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    srv_sched_params p = {3, 256, 1};
    srv_sched *s = NULL;
    CHECK(srv_sched_new(M, T, &p, &s) == TERN_OK);
    if (!s) return;
    srv_job *j[5];
    for (int k = 0; k < 5; k++) j[k] = job_for("Hello", &sp, 4, NULL);
    for (int k = 0; k < 4; k++) CHECK_EQ_INT(srv_sched_submit(s, j[k]), 0);
    CHECK_EQ_INT(srv_sched_submit(s, j[4]), 503);
    int queued = 0;
    srv_sched_stats(s, NULL, &queued, NULL, NULL);
    CHECK_EQ_INT(queued, 4);
    srv_sched_stop(s);
    srv_sched_run(s); /* stopped: ends the waiting jobs at once */
    for (int k = 0; k < 4; k++) CHECK(j[k]->done && j[k]->finish == SRV_FINISH_ERROR);
    for (int k = 0; k < 5; k++) srv_job_unref(j[k]);
    srv_sched_free(s);
}

/* ------------------------------------------------------------- prefix cache */

/* tern_generate on a fresh session from token ids (greedy). */
static void reference_ids(const tern_tokens *ids, int max_tokens, tern_gen_result *res) {
    tern_session *s = NULL;
    tern_sampler *smp = NULL;
    CHECK(tern_session_new(M, NULL, &s) == TERN_OK);
    CHECK(tern_sampler_new(&greedy, tern_model_get_info(M)->n_vocab, &smp) == TERN_OK);
    tern_gen_params gp = {max_tokens, NULL, 0, NULL, NULL, NULL};
    CHECK(tern_generate(s, T, smp, ids->ids, ids->n, &gp, res) == TERN_OK);
    tern_sampler_free(smp);
    tern_session_free(s);
}

static void ids_cat(tern_tokens *dst, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++) CHECK(tern_tokens_push(dst, ids[i]) == TERN_OK);
}

#define PFX_MAX 10
static tern_tokens pfx_a, pfx_b, pfx_f, pfx_same;   /* prompts: A, B = A + reply + more, F = partial, A again */
static tern_gen_result pfx_ref_a, pfx_ref_b, pfx_ref_f, pfx_ref_same;
static size_t pfx_expect_b, pfx_expect_f;
static bool pfx_rewind;                              /* the model can rewind (attention only) */

static srv_job *job_ids(const tern_tokens *ids, int max_tokens) {
    srv_job *j = srv_job_new();
    ids_cat(&j->prompt, ids->ids, ids->n);
    j->sp = greedy;
    j->max_tokens = max_tokens;
    return j;
}

static srv_job *run_job(srv_sched *s, srv_job *j) {
    CHECK_EQ_INT(srv_sched_submit(s, j), 0);
    wait_done(j);
    CHECK(j->done);
    return j;
}

static void check_like(srv_job *j, const tern_gen_result *ref, const char *what) {
    CHECK_EQ_INT(j->usage.completion_tokens, ref->tokens.n);
    CHECK_MSG(!strcmp(j->text.data, ref->text.data), "%s: [%s] vs a fresh session [%s]", what, j->text.data,
              ref->text.data);
}

static void prefix_client(client *c) {
    srv_job *a = run_job(c->s, job_ids(&pfx_a, PFX_MAX));
    check_like(a, &pfx_ref_a, "A");
    CHECK_EQ_INT(a->usage.cached_tokens, 0);
    /* an unrelated prompt takes the empty slot, not A's */
    srv_job *z = run_job(c->s, job_for("Hello world, this is", &greedy, 4, NULL));
    CHECK_EQ_INT(z->usage.cached_tokens, 0);
    CHECK(z->slot != a->slot);
    /* the next turn continues A's session */
    srv_job *b = run_job(c->s, job_ids(&pfx_b, PFX_MAX));
    CHECK_EQ_INT(b->slot, a->slot);
    CHECK_EQ_INT(b->usage.cached_tokens, pfx_expect_b);
    CHECK_EQ_INT(b->usage.prompt_tokens, pfx_b.n);
    check_like(b, &pfx_ref_b, "B (cached)");
    /* cache_prompt false: all of it evaluated, the same text */
    srv_job *e = job_ids(&pfx_b, PFX_MAX);
    e->no_cache = true;
    run_job(c->s, e);
    CHECK_EQ_INT(e->usage.cached_tokens, 0);
    check_like(e, &pfx_ref_b, "B (cache_prompt false)");
    /* a prompt that diverges inside the cached tokens: only a rewindable session reuses */
    srv_job *f = run_job(c->s, job_ids(&pfx_f, PFX_MAX));
    CHECK_EQ_INT(f->usage.cached_tokens, pfx_expect_f);
    check_like(f, &pfx_ref_f, "F (diverging)");
    /* A's prompt again: at most all but its last token */
    srv_job *g = run_job(c->s, job_ids(&pfx_same, PFX_MAX));
    CHECK_EQ_INT(g->usage.cached_tokens, pfx_rewind ? pfx_same.n - 1 : 0);
    check_like(g, &pfx_ref_same, "A again");
    srv_slot_info info[2];
    CHECK_EQ_INT(srv_sched_slots(c->s, info, 2), 2);
    srv_job_unref(a); srv_job_unref(z); srv_job_unref(b); srv_job_unref(e); srv_job_unref(f); srv_job_unref(g);
}

/* Runs the prefix-cache checks on the loaded M / T. */
static void prefix_checks(void) {
    tern_sampler_params_default(&greedy);
    greedy.temperature = 0;
    tern_tokens more = {0};
    pfx_a.n = pfx_b.n = pfx_f.n = pfx_same.n = 0;
    pfx_rewind = false;
    {
        tern_session *s = NULL;
        CHECK(tern_session_new(M, NULL, &s) == TERN_OK);
        if (s) pfx_rewind = tern_session_can_truncate(s);
        tern_session_free(s);
    }
    const char *pa = "The Linux kernel provides a loadable module interface";
    CHECK(tern_tokenize(T, pa, strlen(pa), true, &pfx_a) == TERN_OK);
    reference_ids(&pfx_a, PFX_MAX, &pfx_ref_a);
    const tern_gen_result *ra = &pfx_ref_a;
    /* what A's session holds: its prompt and reply, but a last end-of-generation id
     * was sampled, never evaluated */
    size_t held = ra->tokens.n - (ra->reason == TERN_STOP_EOG ? 1 : 0);
    ids_cat(&pfx_b, pfx_a.ids, pfx_a.n);
    ids_cat(&pfx_b, ra->tokens.ids, ra->tokens.n);
    CHECK(tern_tokenize(T, " so that drivers", 16, true, &more) == TERN_OK);
    ids_cat(&pfx_b, more.ids, more.n);
    pfx_expect_b = pfx_a.n + held;
    reference_ids(&pfx_b, PFX_MAX, &pfx_ref_b);
    /* F: A's prompt, 3 tokens of its reply, then a token the reply does not have there */
    ids_cat(&pfx_f, pfx_a.ids, pfx_a.n);
    size_t k = ra->tokens.n < 3 ? ra->tokens.n : 3;
    ids_cat(&pfx_f, ra->tokens.ids, k);
    int32_t other = more.ids[0] != (k < ra->tokens.n ? ra->tokens.ids[k] : -1) ? more.ids[0] : more.ids[0] + 1;
    ids_cat(&pfx_f, &other, 1);
    ids_cat(&pfx_f, more.ids, more.n);
    /* F runs after E, which left B's prompt + reply in the slot: F shares A's prompt + k */
    pfx_expect_f = pfx_rewind ? pfx_a.n + k : 0;
    reference_ids(&pfx_f, PFX_MAX, &pfx_ref_f);
    ids_cat(&pfx_same, pfx_a.ids, pfx_a.n);
    reference_ids(&pfx_same, PFX_MAX, &pfx_ref_same);
    with_sched(2, 512, 4, prefix_client);
    tern_tokens_free(&more);
    tern_gen_result_free(&pfx_ref_a);
    tern_gen_result_free(&pfx_ref_b);
    tern_gen_result_free(&pfx_ref_f);
    tern_gen_result_free(&pfx_ref_same);
}

TEST(sched_prefix_cache_qwen35) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    prefix_checks();
}

TEST(sched_prefix_cache_qwen3) {
    const char *path = fixture_path("qwen3-tiny/model-q2_0.gguf");
    if (!path || access(path, R_OK)) SKIP("fixtures absent");
    tern_model *m0 = M;
    tern_tokenizer *t0 = T;
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    M = NULL;
    T = NULL;
    if (tern_tokenizer_load(path, &T) == TERN_OK && tern_model_load(path, &mp, &M) == TERN_OK) prefix_checks();
    else CHECK(!"load the qwen3 fixture");
    tern_model_free(M);
    tern_tokenizer_free(T);
    M = m0;
    T = t0;
}

/* ------------------------------------------------ snapshots (recurrent models), n > 1 */

static void with_sched_b(int n_parallel, int n_ctx, uint64_t budget, void (*fn)(client *)) {
    srv_sched_params p = {n_parallel, n_ctx, 8};
    p.snapshot_budget = budget;
    client c = {NULL, fn};
    CHECK(srv_sched_new(M, T, &p, &c.s) == TERN_OK);
    if (!c.s) return;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, client_main, &c) == 0);
    srv_sched_run(c.s);
    pthread_join(th, NULL);
    srv_sched_free(c.s);
}

/* tern_generate on a fresh session from token ids with sampler settings sp. */
static void reference_sp(const tern_tokens *ids, const tern_sampler_params *sp, int max_tokens, tern_gen_result *res) {
    tern_session *s = NULL;
    tern_sampler *smp = NULL;
    CHECK(tern_session_new(M, NULL, &s) == TERN_OK);
    CHECK(tern_sampler_new(sp, tern_model_get_info(M)->n_vocab, &smp) == TERN_OK);
    tern_gen_params gp = {max_tokens, NULL, 0, NULL, NULL, NULL};
    CHECK(tern_generate(s, T, smp, ids->ids, ids->n, &gp, res) == TERN_OK);
    tern_sampler_free(smp);
    tern_session_free(s);
}

#define SN_MAX 12
#define SN_N 3
static tern_tokens sn_a, sn_b;      /* a long shared prefix + two different endings */
static tern_gen_result sn_ref_a, sn_ref_b, sn_ref_bs[SN_N];
static tern_sampler_params sn_sampled[SN_N];
static size_t sn_lcp;

static size_t lcp_of(const tern_tokens *x, const tern_tokens *y) {
    size_t l = 0;
    while (l < x->n && l < y->n && x->ids[l] == y->ids[l]) l++;
    return l;
}

static srv_job *job_sp(const tern_tokens *ids, const tern_sampler_params *sp, int max_tokens) {
    srv_job *j = job_ids(ids, max_tokens);
    j->sp = *sp;
    return j;
}

/* The snapshots docs/server.md says a raw prompt of n tokens takes (64-token chunks on the
 * CPU): none inside under 4 chunks, else at the chunk boundaries 0, 1, 2, 4, ... chunks
 * before its last boundary below n; and at its end. */
static int raw_snapshots(size_t n) {
    int k = 1;                      /* the end */
    if (n < 4 * 64) return k;
    size_t K = (n - 1) / 64;
    for (size_t d = 0; d < K; d = d ? d * 2 : 1) k++;
    return k;
}

static void snap_client(client *c) {
    srv_snap_stats st;
    srv_job *a = run_job(c->s, job_ids(&sn_a, SN_MAX));
    check_like(a, &sn_ref_a, "snapshots: A");
    CHECK_EQ_INT(a->usage.cached_tokens, 0);
    CHECK_EQ_INT(a->usage.evaluated_tokens, sn_a.n);
    srv_sched_snap_stats(c->s, &st);
    /* the prompt's and one at the end of the reply */
    CHECK(st.used && st.count == raw_snapshots(sn_a.n) + 1 && st.taken == (unsigned long long)st.count);
    CHECK(st.bytes == st.each * (uint64_t)st.count && st.bytes <= st.budget);
    /* B shares A's first sn_lcp tokens: it restores A's deepest snapshot at a 64-token
     * boundary within them and evaluates the rest in the same chunks as a cold start */
    srv_job *b = run_job(c->s, job_ids(&sn_b, SN_MAX));
    CHECK_EQ_INT(b->slot, a->slot);
    CHECK_EQ_INT(b->usage.cached_tokens, sn_lcp / 64 * 64);
    CHECK(b->usage.cached_tokens >= 64);
    CHECK_EQ_INT(b->usage.evaluated_tokens, sn_b.n - sn_lcp / 64 * 64);
    check_like(b, &sn_ref_b, "snapshots: B (from A's snapshot)");
    /* B again, sampled with a repetition penalty: the snapshot at B's end brings its
     * logits back (nothing evaluated) and the penalties still see the whole prompt */
    srv_job *b2 = run_job(c->s, job_sp(&sn_b, &sn_sampled[0], SN_MAX));
    CHECK_EQ_INT(b2->usage.cached_tokens, sn_b.n);
    CHECK_EQ_INT(b2->usage.evaluated_tokens, 0);
    check_like(b2, &sn_ref_bs[0], "snapshots: B sampled (from B's end)");
    /* A again: its snapshots beyond the common prefix were void once B went on from there */
    srv_job *a2 = run_job(c->s, job_ids(&sn_a, SN_MAX));
    CHECK_EQ_INT(a2->usage.cached_tokens, sn_lcp / 64 * 64);
    check_like(a2, &sn_ref_a, "snapshots: A again");
    srv_sched_snap_stats(c->s, &st);
    CHECK(st.restored == 3);
    srv_slot_info info[2];
    CHECK_EQ_INT(srv_sched_slots(c->s, info, 2), 2);
    CHECK(info[a->slot].n_snapshots > 0 && info[1 - a->slot].n_snapshots == 0);
    CHECK_EQ_INT(info[0].n_snapshots + info[1].n_snapshots, st.count);
    srv_job_unref(a); srv_job_unref(b); srv_job_unref(b2); srv_job_unref(a2);
}

static void snap_budget_client(client *c) {
    srv_job *a = run_job(c->s, job_ids(&sn_a, SN_MAX));
    check_like(a, &sn_ref_a, "snapshots: A (small budget)");
    srv_snap_stats st;
    srv_sched_snap_stats(c->s, &st);
    /* two fit: the boundaries whose snapshots the prompt's later ones would push out
     * are not taken; the deepest two are taken, then the reply's end pushes the older out */
    CHECK(st.count == 2 && st.taken == 3 && st.evicted == 1 && st.bytes <= st.budget);
    srv_slot_info info[2];
    CHECK_EQ_INT(srv_sched_slots(c->s, info, 2), 2);
    CHECK_EQ_INT(info[a->slot].n_snapshots, 2);
    /* B, evaluated whole (cache_prompt false) in the other slot: its two snapshots push
     * A's out (least recently used first); then B again starts from its end snapshot */
    srv_job *b = job_ids(&sn_b, SN_MAX);
    b->no_cache = true;
    run_job(c->s, b);
    check_like(b, &sn_ref_b, "snapshots: B (small budget)");
    CHECK(b->slot != a->slot);
    srv_sched_snap_stats(c->s, &st);
    CHECK(st.count == 2 && st.taken == 6 && st.evicted == 4 && st.bytes <= st.budget);
    srv_job *b2 = run_job(c->s, job_ids(&sn_b, SN_MAX));
    CHECK_EQ_INT(b2->slot, b->slot);
    CHECK_EQ_INT(b2->usage.cached_tokens, sn_b.n);
    check_like(b2, &sn_ref_b, "snapshots: B again (small budget)");
    srv_job_unref(a);
    srv_job_unref(b);
    srv_job_unref(b2);
}

/* n > 1: choices 1.. copy choice 0's evaluated prompt (tern_session_copy) and give
 * exactly the texts of their seeds evaluated alone. */
static void n_client(client *c) {
    srv_job *j[SN_N];
    for (int k = 0; k < SN_N; k++) {
        j[k] = job_sp(&sn_b, &sn_sampled[k], SN_MAX);
        j[k]->no_cache = true;      /* choice 0 evaluates the whole prompt */
        if (k) srv_job_follow(j[k], j[0]);
    }
    CHECK_EQ_INT(srv_sched_submit_all(c->s, j, SN_N), 0); /* admitted in one round, as the server does */
    for (int k = 0; k < SN_N; k++) {
        wait_done(j[k]);
        CHECK(j[k]->done);
        check_like(j[k], &sn_ref_bs[k], "n > 1 choice");
    }
    CHECK_EQ_INT(j[0]->usage.evaluated_tokens, sn_b.n);
    for (int k = 1; k < SN_N; k++) {
        CHECK_EQ_INT(j[k]->usage.evaluated_tokens, 0);
        CHECK_EQ_INT(j[k]->usage.cached_tokens, sn_b.n);
        CHECK(j[k]->slot != j[0]->slot);
    }
    /* a follower whose lead is gone evaluates the prompt itself */
    srv_job *lead = job_sp(&sn_b, &sn_sampled[0], 1), *f = job_sp(&sn_b, &sn_sampled[1], SN_MAX);
    lead->no_cache = f->no_cache = true;
    srv_job_follow(f, lead);
    run_job(c->s, lead);
    run_job(c->s, f);
    check_like(f, &sn_ref_bs[1], "n > 1 choice after its lead ended");
    CHECK_EQ_INT(f->usage.evaluated_tokens, sn_b.n);
    srv_job_unref(lead); srv_job_unref(f);
    for (int k = 0; k < SN_N; k++) srv_job_unref(j[k]);
}

static void snapshot_checks(void) {
    tern_sampler_params_default(&greedy);
    greedy.temperature = 0;
    sn_a.n = sn_b.n = 0;
    char text[4096] = "";
    for (int i = 0; i < 24; i++) strcat(text, "The kernel module loader resolves the symbols of a module. ");
    size_t base = strlen(text);
    strcat(text, "Question: how are modules unloaded?");
    CHECK(tern_tokenize(T, text, strlen(text), true, &sn_a) == TERN_OK);
    text[base] = 0;
    strcat(text, "Question: what does the scheduler do with idle tasks?");
    CHECK(tern_tokenize(T, text, strlen(text), true, &sn_b) == TERN_OK);
    sn_lcp = lcp_of(&sn_a, &sn_b);
    CHECK(sn_lcp >= 256 && sn_a.n > sn_lcp && sn_b.n > sn_lcp);
    reference_ids(&sn_a, SN_MAX, &sn_ref_a);
    reference_ids(&sn_b, SN_MAX, &sn_ref_b);
    for (int k = 0; k < SN_N; k++) {
        tern_sampler_params_default(&sn_sampled[k]);
        sn_sampled[k].temperature = 0.9f;
        sn_sampled[k].top_k = 40;
        sn_sampled[k].repeat_penalty = 1.3f;
        sn_sampled[k].seed = 70 + (uint64_t)k;
        reference_sp(&sn_b, &sn_sampled[k], SN_MAX, &sn_ref_bs[k]);
    }
    with_sched_b(2, 1024, (uint64_t)256 << 20, snap_client);
    /* a budget of two and a half snapshots */
    tern_session *s = NULL;
    tern_session_snapshot *p = NULL;
    CHECK(tern_session_new(M, NULL, &s) == TERN_OK && tern_session_snapshot_take(s, &p) == TERN_OK);
    uint64_t each = tern_session_snapshot_bytes(p);
    tern_session_snapshot_free(p);
    tern_session_free(s);
    if (each) with_sched_b(2, 1024, each * 5 / 2, snap_budget_client);
    with_sched_b(3, 1024, 0, n_client);
    tern_gen_result_free(&sn_ref_a);
    tern_gen_result_free(&sn_ref_b);
    for (int k = 0; k < SN_N; k++) tern_gen_result_free(&sn_ref_bs[k]);
}

TEST(sched_snapshots_default_model) {
    /* the same checks as on the qwen35 fixture below, on larger tensors: under the
     * sanitizers (10-30x slower on a loaded CI machine) the fixture's run is enough */
    if (getenv("TERN_SANITIZED")) SKIP_OPTIONAL("sanitizer build: sched_snapshots_qwen35_fixture runs the same checks");
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    CHECK_STR(tern_model_get_info(M)->arch, "qwen35");
    snapshot_checks();
}

/* The message ends of a chat prompt (srv_job_chat_marks): the first, the last but one and
 * the last below the prompt's end, each just after a message's "<|im_end|>\n"; the text
 * before each is the ChatML rendering of the messages up to there (written out here). */
TEST(sched_chat_marks) {
    if (!load_default()) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    const tern_chat_msg msgs[] = {{"system", "You are terse.", NULL, NULL, 0}, {"user", "Hi there", NULL, NULL, 0},
                                  {"assistant", "Hello.", NULL, NULL, 0}, {"user", "What is 2+2?", NULL, NULL, 0}};
    const char *upto[] = {"<|im_start|>system\nYou are terse.<|im_end|>\n",
                          "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                          "<|im_start|>assistant\nHello.<|im_end|>\n",
                          "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                          "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"};
    srv_job *j = srv_job_new();
    tern_chat_opts co = {NULL, true, false};
    CHECK(j && tern_chat_tokenize(T, tern_chat_format_for(T), msgs, 4, &co, &j->prompt) == TERN_OK);
    if (!j || !j->prompt.n) { srv_job_unref(j); return; }
    srv_job_chat_marks(j, T, true);
    CHECK(j->chat);
    CHECK_EQ_INT(j->n_marks, 3);
    for (int k = 0; k < j->n_marks && k < 3; k++) {
        tern_str txt = {0};
        CHECK(j->marks[k] < j->prompt.n && tern_detokenize(T, j->prompt.ids, j->marks[k], &txt) == TERN_OK);
        CHECK_MSG(txt.data && !strcmp(txt.data, upto[k]), "mark %d: '%s'", k, txt.data ? txt.data : "");
        tern_str_free(&txt);
    }
    /* one message: its end is the only mark; a raw prompt has none */
    tern_tokens_free(&j->prompt);
    memset(&j->prompt, 0, sizeof j->prompt);
    CHECK(tern_chat_tokenize(T, tern_chat_format_for(T), msgs + 1, 1, &co, &j->prompt) == TERN_OK);
    srv_job_chat_marks(j, T, true);
    CHECK_EQ_INT(j->n_marks, 1);
    /* a raw prompt: ChatML text the client rendered gets the marks (parse_special), plain text none */
    tern_tokens_free(&j->prompt);
    memset(&j->prompt, 0, sizeof j->prompt);
    CHECK(tern_tokenize(T, upto[1], strlen(upto[1]), true, &j->prompt) == TERN_OK);
    CHECK(tern_tokenize(T, "<|im_start|>user\nmore", strlen("<|im_start|>user\nmore"), true, &j->prompt) == TERN_OK);
    srv_job_chat_marks(j, T, false);
    CHECK(j->chat);
    CHECK_EQ_INT(j->n_marks, 3);
    tern_tokens_free(&j->prompt);
    memset(&j->prompt, 0, sizeof j->prompt);
    CHECK(tern_tokenize(T, "The kernel. <|im_end|> is plain here", strlen("The kernel. <|im_end|> is plain here"), false, &j->prompt) == TERN_OK);
    srv_job_chat_marks(j, T, false);
    CHECK(!j->chat && j->n_marks == 0);
    srv_job_unref(j);
}

TEST(sched_snapshots_qwen35_fixture) {
    const char *path = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!path || access(path, R_OK)) SKIP("fixtures absent");
    tern_model *m0 = M;
    tern_tokenizer *t0 = T;
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    M = NULL;
    T = NULL;
    if (tern_tokenizer_load(path, &T) == TERN_OK && tern_model_load(path, &mp, &M) == TERN_OK) snapshot_checks();
    else CHECK(!"load the qwen35 fixture");
    tern_model_free(M);
    tern_tokenizer_free(T);
    M = m0;
    T = t0;
}

/* tern_session_truncate: a rewound session evaluates exactly like one that never
 * went further; refused where a recurrent state cannot be rewound. */
static void truncate_on(const char *path, bool recurrent) {
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 2;
    tern_model *m = NULL;
    if (tern_model_load(path, &mp, &m)) { CHECK(!"load"); return; }
    tern_session *a = NULL, *b = NULL;
    CHECK(tern_session_new(m, NULL, &a) == TERN_OK && tern_session_new(m, NULL, &b) == TERN_OK);
    if (!a || !b) goto done;
    int V = tern_model_get_info(m)->n_vocab;
    int32_t p[9], junk[5];
    for (int i = 0; i < 9; i++) p[i] = (int32_t)(check_rand_u64() % (unsigned)V);
    for (int i = 0; i < 5; i++) junk[i] = (int32_t)(check_rand_u64() % (unsigned)V);
    CHECK(tern_session_eval(a, p, 8, NULL) == TERN_OK && tern_session_eval(a, p + 8, 1, NULL) == TERN_OK);
    CHECK(tern_session_eval(b, p, 8, NULL) == TERN_OK && tern_session_eval(b, junk, 5, NULL) == TERN_OK);
    CHECK_EQ_INT(tern_session_truncate(b, 14), TERN_ERR_RANGE);
    CHECK_EQ_INT(tern_session_truncate(b, -1), TERN_ERR_RANGE);
    CHECK_EQ_INT(tern_session_truncate(b, 13), TERN_OK);     /* the current position: always fine */
    CHECK(tern_session_can_truncate(b) == !recurrent);
    if (recurrent) {
        CHECK_EQ_INT(tern_session_truncate(b, 8), TERN_ERR_UNSUPPORTED);
        CHECK_EQ_INT(tern_session_pos(b), 13);
        goto done;
    }
    CHECK_EQ_INT(tern_session_truncate(b, 8), TERN_OK);
    CHECK_EQ_INT(tern_session_pos(b), 8);
    CHECK(tern_session_eval(b, p + 8, 1, NULL) == TERN_OK);
    CHECK(!memcmp(tern_session_logits(a), tern_session_logits(b), (size_t)V * sizeof(float)));
    CHECK_EQ_INT(tern_session_truncate(b, 0), TERN_OK);
    CHECK_EQ_INT(tern_session_pos(b), 0);
    CHECK(tern_session_eval(b, p, 8, NULL) == TERN_OK && tern_session_eval(b, p + 8, 1, NULL) == TERN_OK);
    CHECK(!memcmp(tern_session_logits(a), tern_session_logits(b), (size_t)V * sizeof(float)));
done:
    tern_session_free(a);
    tern_session_free(b);
    tern_model_free(m);
}

TEST(session_truncate) {
    const char *q3 = fixture_path("qwen3-tiny/model-q2_0.gguf"), *q35 = fixture_path("qwen35-tiny/model-pq2_0.gguf");
    if (!q3 || access(q3, R_OK) || access(q35, R_OK)) SKIP("fixtures absent");
    CHECK_EQ_INT(tern_session_truncate(NULL, 0), TERN_ERR_INVALID_ARG);
    truncate_on(q3, false);
    truncate_on(q35, true);
}

/* tern_model_meta_*: a copy of the embedded model with general.sampling.* keys. */
static bool keep_all(const char *key, void *u) { (void)u; return !strncmp(key, "general.sampling.", 17); }
TEST(model_meta) {
    const char *src = getenv("TERN_SOURCE_DIR");
    char in[1024], out[256];
    snprintf(in, sizeof in, "%s/models/tern-default.gguf", src ? src : ".");
    if (access(in, R_OK)) SKIP("models/tern-default.gguf not found (TERN_SOURCE_DIR)");
    const char *keep = getenv("TERN_TEST_META_OUT");  /* keep the file there (manual checks of serve / run) */
    snprintf(out, sizeof out, "%s", keep && *keep ? keep : "/tmp/tern_test_meta.gguf");
    if (!keep || !*keep) snprintf(out, sizeof out, "/tmp/tern_test_meta_%d.gguf", (int)getpid());
    tern_gguf *g = NULL;
    tern_gguf_writer *w = NULL;
    CHECK_EQ_INT(tern_gguf_open(in, &g), TERN_OK);
    CHECK_EQ_INT(tern_gguf_writer_new(&w), TERN_OK);
    if (!g || !w) { tern_gguf_close(g); tern_gguf_writer_free(w); return; }
    CHECK_EQ_INT(tern_gguf_w_copy_kv(w, g, keep_all, NULL), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_f32(w, "general.sampling.temp", 0.25f), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_u32(w, "general.sampling.top_k", 33), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_f32(w, "general.sampling.top_p", 0.9f), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_i32(w, "general.sampling.penalty_last_n", -1), TERN_OK);
    CHECK_EQ_INT(tern_gguf_w_set_str(w, "general.sampling.sequence", "penalties;top_k;top_p;temp"), TERN_OK);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tern_gguf_tensor *t = &g->tensors[i];
        CHECK_EQ_INT(tern_gguf_w_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL, NULL), TERN_OK);
    }
    CHECK_EQ_INT(tern_gguf_w_write(w, out, NULL, NULL), TERN_OK);
    tern_gguf_writer_free(w);
    tern_gguf_close(g);
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = 1;
    tern_model *m = NULL;
    CHECK_EQ_INT(tern_model_load(out, &mp, &m), TERN_OK);
    if (!keep || !*keep) unlink(out);
    if (!m) return;
    float f = -7;
    int64_t i = -7;
    tern_str str = {0};
    CHECK_EQ_INT(tern_model_meta_f32(m, "general.sampling.temp", &f), TERN_OK);
    CHECK(f == 0.25f);
    CHECK_EQ_INT(tern_model_meta_f32(m, "general.sampling.top_p", &f), TERN_OK);
    CHECK(f == 0.9f);
    CHECK_EQ_INT(tern_model_meta_i64(m, "general.sampling.top_k", &i), TERN_OK);
    CHECK_EQ_INT(i, 33);
    CHECK_EQ_INT(tern_model_meta_i64(m, "general.sampling.penalty_last_n", &i), TERN_OK);
    CHECK_EQ_INT(i, -1);
    CHECK_EQ_INT(tern_model_meta_f32(m, "general.sampling.top_k", &f), TERN_OK);   /* an integer as a float */
    CHECK(f == 33.0f);
    f = -7;
    i = -7;
    CHECK_EQ_INT(tern_model_meta_f32(m, "general.sampling.min_p", &f), TERN_ERR_NOT_FOUND);
    CHECK(f == -7);
    CHECK_EQ_INT(tern_model_meta_i64(m, "general.sampling.temp", &i), TERN_ERR_FORMAT);  /* a float is no integer */
    CHECK(i == -7);
    CHECK_EQ_INT(tern_model_meta_f32(m, "general.sampling.sequence", &f), TERN_ERR_FORMAT);
    CHECK_EQ_INT(tern_model_meta_str(m, "general.sampling.temp", &str), TERN_ERR_FORMAT);
    CHECK_EQ_INT(tern_model_meta_str(m, "general.sampling.sequence", &str), TERN_OK);
    CHECK(str.data && !strcmp(str.data, "penalties;top_k;top_p;temp"));
    tern_str_free(&str);
    CHECK_EQ_INT(tern_model_meta_str(m, "general.architecture", &str), TERN_OK);
    CHECK(str.data && !strcmp(str.data, "qwen35"));
    tern_str_free(&str);
    CHECK_EQ_INT(tern_model_meta_i64(m, "no.such.key", &i), TERN_ERR_NOT_FOUND);
    CHECK_EQ_INT(tern_model_meta_i64(NULL, "x", &i), TERN_ERR_INVALID_ARG);
    CHECK_EQ_INT(tern_model_meta_i64(m, NULL, &i), TERN_ERR_INVALID_ARG);
    CHECK_STR(tern_status_str(TERN_ERR_NOT_FOUND), "TERN_ERR_NOT_FOUND");
    tern_model_free(m);
    /* the embedded model carries the sampling chosen for it (docs/default-model.md) */
    if (M) {
        CHECK_EQ_INT(tern_model_meta_f32(M, "general.sampling.temp", &f), TERN_OK);
        CHECK(f == 0.8f);
        CHECK_EQ_INT(tern_model_meta_f32(M, "general.sampling.penalty_repeat", &f), TERN_OK);
        CHECK(f == 1.3f);
        CHECK_EQ_INT(tern_model_meta_i64(M, "general.sampling.penalty_last_n", &i), TERN_OK);
        CHECK_EQ_INT(i, 256);
        CHECK_EQ_INT(tern_model_meta_i64(M, "general.sampling.top_k", &i), TERN_OK);
        CHECK_EQ_INT(i, 40);
        CHECK_EQ_INT(tern_model_meta_f32(M, "general.sampling.top_p", &f), TERN_OK);
        CHECK(f == 0.95f);
        CHECK_EQ_INT(tern_model_meta_f32(M, "general.sampling.min_p", &f), TERN_OK);
        CHECK(f == 0.05f);
        /* and says its chat template's thinking is off by default (a raw-text model) */
        bool b = true;
        CHECK_EQ_INT(tern_model_meta_bool(M, "tern.chat.thinking", &b), TERN_OK);
        CHECK(b == false);
        CHECK_EQ_INT(tern_model_meta_bool(M, "general.sampling.temp", &b), TERN_ERR_FORMAT); /* a float */
        CHECK_EQ_INT(tern_model_meta_bool(M, "no.such.key", &b), TERN_ERR_NOT_FOUND);
        CHECK_EQ_INT(tern_model_meta_bool(M, "tern.chat.thinking", NULL), TERN_ERR_INVALID_ARG);
    }
}

/* compat.c: Anthropic and Responses requests become chat requests; replies and streams go back */
TEST(compat_translate) {
    char *out = NULL;
    const char *a = "{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"S\"}],\"stop_sequences\":[\"X\"],"
                    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\","
                    "\"text\":\"t\"},{\"type\":\"tool_use\",\"id\":\"c1\",\"name\":\"f\",\"input\":{\"x\":1}}]},{\"role\":\"user\","
                    "\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"c1\",\"content\":\"42\"}]}],"
                    "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"any\"},"
                    "\"temperature\":0.5,\"top_k\":3,\"thinking\":{\"type\":\"disabled\"}}";
    CHECK_EQ_INT(srv_compat_request(SRV_API_ANTHROPIC, a, strlen(a), &out, E, sizeof E), 0);
    if (out) {
        CHECK_EQ_INT(parse(SRV_CHAT, out), 0);
        CHECK_EQ_INT((int)R.n_msgs, 4);
        if (R.n_msgs == 4) {
            CHECK_STR(R.msgs[0].role, "system");
            CHECK_STR(R.msgs[0].content, "S");
            CHECK_STR(R.msgs[2].content, "t");
            CHECK_EQ_INT((int)R.msgs[2].n_tool_calls, 1);
            CHECK_STR(R.msgs[3].role, "tool");
            CHECK_STR(R.msgs[3].content, "42");
        }
        CHECK_EQ_INT(R.max_tokens, 5);
        CHECK(R.n_stop == 1 && R.tool_force == 1 && R.sp.top_k == 3 && R.thinking == 0);
        free(out);
    }
    const char *bad[][2] = {
        {"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "'max_tokens' is required"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_q\":1}", "unknown field 'top_q'"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}", "not supported"},
        {"{\"max_tokens\":1,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "role"},
        {"{\"max_tokens\":1,\"messages\":[]}", "non-empty"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = NULL;
        int rc = srv_compat_request(SRV_API_ANTHROPIC, bad[i][0], strlen(bad[i][0]), &out, E, sizeof E);
        CHECK_MSG(rc == 400 && strstr(E, bad[i][1]), "%s: %d '%s'", bad[i][0], rc, E);
        free(out);
    }
    const char *r = "{\"model\":\"m\",\"instructions\":\"I\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                    "\"text\":\"q\"}]}],\"max_output_tokens\":7,\"tools\":[{\"type\":\"function\",\"name\":\"g\",\"parameters\":{}}],"
                    "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":{\"type\":\"object\"}}}}";
    out = NULL;
    CHECK_EQ_INT(srv_compat_request(SRV_API_RESPONSES, r, strlen(r), &out, E, sizeof E), 0);
    if (out) {
        CHECK_EQ_INT(parse(SRV_CHAT, out), 0);
        CHECK(R.n_msgs == 2 && !strcmp(R.msgs[0].content, "I") && !strcmp(R.msgs[1].content, "q"));
        CHECK(R.max_tokens == 7 && R.tools_json && R.schema);
        free(out);
    }
    out = NULL;
    const char *r2 = "{\"input\":\"x\",\"previous_response_id\":\"r\"}";
    CHECK_EQ_INT(srv_compat_request(SRV_API_RESPONSES, r2, strlen(r2), &out, E, sizeof E), 400);
    CHECK(strstr(E, "previous_response_id") != NULL);
    free(out);
}

TEST(compat_replies) {
    const char *oa = "{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,"
                     "\"message\":{\"role\":\"assistant\",\"content\":\"hey\",\"reasoning_content\":\"r\",\"tool_calls\":[{\"id\":\"c\","
                     "\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"x\\\":1}\"}}]},\"finish_reason\":"
                     "\"tool_calls\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}";
    char *s = srv_compat_reply(SRV_API_ANTHROPIC, oa, "msg_1");
    cJSON *o = s ? cJSON_Parse(s) : NULL;
    cJSON *c = cJSON_GetObjectItem(o, "content");
    CHECK(o && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "type")), "message"));
    CHECK_EQ_INT(cJSON_GetArraySize(c), 3);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 0), "type")), "thinking");
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 1), "text")), "hey");
    CHECK_EQ_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 2), "input"), "x")), 1);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(o, "stop_reason")), "tool_use");
    cJSON_Delete(o);
    free(s);
    s = srv_compat_reply(SRV_API_RESPONSES, oa, "1");
    o = s ? cJSON_Parse(s) : NULL;
    c = cJSON_GetObjectItem(o, "output");
    CHECK(o && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "object")), "response"));
    CHECK_EQ_INT(cJSON_GetArraySize(c), 3);     /* reasoning, message, function_call */
    CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(c, 2), "type")), "function_call");
    CHECK_EQ_INT((int)cJSON_GetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "usage"), "total_tokens")), 7);
    cJSON_Delete(o);
    free(s);
    /* a stream: role chunk, two content deltas, finish, usage -> Anthropic's events in order */
    const char *chunks[] = {
        "{\"id\":\"x\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}",
        "{\"id\":\"x\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"He\"},\"finish_reason\":null}]}",
        "{\"id\":\"x\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"y\"},\"finish_reason\":null}]}",
        "{\"id\":\"x\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}",
        "{\"id\":\"x\",\"created\":5,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}"};
    for (int api = SRV_API_ANTHROPIC; api <= SRV_API_RESPONSES; api++) {
        srv_compat_stream st;
        tern_str ev = {0};
        tern_str_append(&ev, "", 0);
        srv_compat_stream_init(&st, (srv_api)api, "1", 3);
        for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) srv_compat_stream_chunk(&st, chunks[i], &ev);
        srv_compat_stream_end(&st, &ev);
        srv_compat_stream_free(&st);
        /* the event names in order */
        char names[1024] = "";
        for (const char *p = ev.data; (p = strstr(p, "event: ")); p += 7) {
            size_t l = strcspn(p + 7, "\n");
            if (strlen(names) + l + 2 < sizeof names) { strncat(names, p + 7, l); strcat(names, ","); }
        }
        if (api == SRV_API_ANTHROPIC)
            CHECK_STR(names, "message_start,content_block_start,content_block_delta,content_block_delta,"
                             "content_block_stop,message_delta,message_stop,");
        else
            CHECK_STR(names, "response.created,response.in_progress,response.output_item.added,"
                             "response.content_part.added,response.output_text.delta,response.output_text.delta,"
                             "response.output_text.done,response.content_part.done,response.output_item.done,"
                             "response.incomplete,");
        CHECK(strstr(ev.data, api == SRV_API_ANTHROPIC ? "\"stop_reason\":\"max_tokens\"" : "\"text\":\"Hey\"") != NULL);
        tern_str_free(&ev);
    }
    char *e = srv_compat_error(SRV_API_ANTHROPIC, 400, "bad");
    o = e ? cJSON_Parse(e) : NULL;
    CHECK(o && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(o, "type")), "error"));
    cJSON_Delete(o);
    free(e);
}


/* The embeddings parser and replies (embed.c): input shapes, the fields' 400s, base64 of
 * known float bits, the native shape. */
TEST(embed_parse_and_reply) {
    srv_embed_req r;
    char err[256];
#define EP(native, body) srv_embed_parse(native, body, strlen(body), NULL, 100, 4, 8, &r, err, sizeof err)
    CHECK_EQ_INT(EP(false, "{\"input\":[1,2,3],\"model\":\"m\",\"user\":\"u\",\"dimensions\":4}"), 0);
    CHECK(r.n == 1 && r.n_ids[0] == 3 && r.ids[0][2] == 3 && r.n_tokens == 3 && r.normalize && !r.base64);
    srv_embed_req_free(&r);
    CHECK_EQ_INT(EP(false, "{\"input\":[[1],[2,3]],\"encoding_format\":\"base64\",\"embd_normalize\":-1}"), 0);
    CHECK(r.n == 2 && r.n_ids[1] == 2 && r.n_tokens == 3 && r.base64 && !r.normalize);
    /* base64 of 1.0f (00 00 80 3f), -2.0f (00 00 00 c0), 0.5f, 0 */
    float v[8] = {1.0f, -2.0f, 0.5f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    char *j = srv_embed_response(&r, v, 4, "m\"x", false);
    CHECK(j && strstr(j, "\"embedding\":\"AACAPwAAAMAAAAA/AAAAAA==\"") && strstr(j, "\"model\":\"m\\\"x\"") &&
          strstr(j, "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":3}"));
    cJSON *o = j ? cJSON_Parse(j) : NULL;
    CHECK(o && cJSON_GetArraySize(cJSON_GetObjectItem(o, "data")) == 2);
    cJSON_Delete(o);
    free(j);
    r.base64 = false;
    j = srv_embed_response(&r, v, 4, "m", true);
    CHECK(j && !strcmp(j, "[{\"index\":0,\"embedding\":[[1,-2,0.5,0]]},{\"index\":1,\"embedding\":[[1,1,1,1]]}]"));
    free(j);
    srv_embed_req_free(&r);
    CHECK_EQ_INT(EP(true, "{\"content\":[[5]]}"), 0);
    CHECK(r.n == 1 && r.ids[0][0] == 5);
    srv_embed_req_free(&r);
    /* refusals, each naming its field */
    static const char *const bad[][2] = {
        {"{\"input\":[1],\"dimensions\":3}", "'dimensions'"}, {"{\"input\":[1],\"foo\":1}", "'foo'"},
        {"{\"input\":[1],\"encoding_format\":\"hex\"}", "'encoding_format'"}, {"{}", "'input'"},
        {"{\"input\":[100]}", "'input'"}, {"{\"input\":[1,2,3,4,5,6,7,8,9]}", "'input'"},
        {"{\"input\":[[1],[]]}", "'input[1]'"}, {"{\"input\":\"text\"}", "'input'"}, /* no tokenizer here */
        {"{\"input\":[1],\"content\":[2]}", "'content'"}, {"{\"input\":[1]} x", "byte"},
        {"[1]", "object"}, {"{\"input\":[1],\"embd_normalize\":0}", "'embd_normalize'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = EP(false, bad[i][0]);
        CHECK_MSG(rc == 400 && strstr(err, bad[i][1]), "%s: %d %s", bad[i][0], rc, err);
        srv_embed_req_free(&r);
    }
#undef EP
}

int main(void) {
    RUN(parse_chat_fields);
    RUN(parse_completion_fields);
    RUN(parse_errors);
    RUN(constraint_grammar);
    RUN(compat_translate);
    RUN(compat_replies);
    RUN(logprob_of);
    RUN(request_line_verdict);
    RUN(builders);
    RUN(splitter_matches_parse);
    RUN(sched_equals_generate);
    RUN(pool_runs_each_index_once);
    RUN(sched_prefill_budget);
    RUN(sched_cancel_queue_stop);
    RUN(sched_queue_counts_idle_slots);
    RUN(sched_prefix_cache_qwen35);
    RUN(sched_prefix_cache_qwen3);
    RUN(sched_snapshots_default_model);
    RUN(sched_snapshots_qwen35_fixture);
    RUN(sched_chat_marks);
    RUN(session_truncate);
    RUN(model_meta);
    RUN(embed_parse_and_reply);
    srv_request_free(&R);
    tern_model_free(M);
    tern_tokenizer_free(T);
    return check_summary();
}
