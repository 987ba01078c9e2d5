/*
 * constrain.c - the grammar of a request's constrained output (no model, no
 * socket: unit-tested and fuzzed with request.c):
 *   grammar          the client's GBNF as given (start rule "root")
 *   response_format  json_object: any JSON object (or llama.cpp's "schema");
 *                    json_schema: the schema converted (tern_json_schema_to_grammar)
 *   tool_choice      "required" / a named function: exactly one call to a
 *                    declared tool, in the chat format's own markup:
 *       Qwen3    <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 *                (ARGS: the tool's "parameters" schema)
 *       Qwen3.5  <tool_call>\n<function=NAME>\n(<parameter=KEY>\nVALUE\n</parameter>\n)*
 *                </function>\n</tool_call>, the declared properties in order,
 *                required ones always; VALUE: raw text without '<' for string
 *                properties, else JSON of the property's schema
 *     A parameters schema the converter does not support falls back to any JSON
 *     object (Qwen3) / any parameter text (Qwen3.5): the call is still well formed
 *     and names a declared tool (docs/server.md).
 */
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* text as a GBNF literal */
static tern_status lit(tern_str *g, const char *s) {
    tern_status st = tern_str_append(g, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; !st && *p; p++) {
        char b[8];
        if (*p == '"' || *p == '\\') { b[0] = '\\'; b[1] = (char)*p; b[2] = 0; }
        else if (*p == '\n') strcpy(b, "\\n");
        else if (*p < 0x20 || *p == 0x7f) snprintf(b, sizeof b, "\\x%02X", *p);
        else { b[0] = (char)*p; b[1] = 0; }
        st = tern_str_append(g, b, strlen(b));
    }
    return st ? st : tern_str_append(g, "\"", 1);
}

static tern_status app(tern_str *g, const char *s) { return tern_str_append(g, s, strlen(s)); }

/* schema -> rules named ROOT...; an unsupported schema falls back to `fallback`
 * (NULL: an error). */
static tern_status schema_rules(tern_str *g, const cJSON *schema, const char *root, const char *fallback) {
    char *txt = schema ? cJSON_PrintUnformatted(schema) : NULL;
    size_t mark = g->len;
    tern_status st = tern_json_schema_to_grammar(txt ? txt : "{}", txt ? strlen(txt) : 2, root, g);
    free(txt);
    if (st == TERN_ERR_UNSUPPORTED && fallback) {
        g->len = mark;
        if (g->data) g->data[mark] = 0;
        st = tern_json_schema_to_grammar(fallback, strlen(fallback), root, g);
    }
    return st;
}

static const cJSON *tool_fn(const cJSON *t) {
    return cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "function") : NULL;
}

/* Qwen3: the call is JSON; its schema is {name: const, arguments: parameters} */
static tern_status call_qwen3(tern_str *g, const cJSON *fn, const char *rule) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    char args[64], nm[64];
    snprintf(args, sizeof args, "%s-args", rule);
    snprintf(nm, sizeof nm, "%s-name", rule);
    tern_status st = schema_rules(g, params, args, "{\"type\":\"object\"}");
    char line[1024];
    snprintf(line, sizeof line, "%s ::= \"{\" %s-ws \"\\\"name\\\"\" %s-ws \":\" %s-ws %s %s-ws \",\" %s-ws "
             "\"\\\"arguments\\\"\" %s-ws \":\" %s-ws %s %s-ws \"}\"\n%s ::= ",
             rule, args, args, args, nm, args, args, args, args, args, args, nm);
    if (!st) st = app(g, line);
    cJSON *q = cJSON_CreateString(name->valuestring);
    char *qs = q ? cJSON_PrintUnformatted(q) : NULL;
    cJSON_Delete(q);
    if (!qs) return TERN_ERR_NOMEM;
    if (!st) st = lit(g, qs);
    free(qs);
    if (!st) st = app(g, "\n");
    return st;
}

static bool is_string_schema(const cJSON *s) {
    const cJSON *t = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "type") : NULL;
    return cJSON_IsString(t) && !strcmp(t->valuestring, "string") && !cJSON_GetObjectItemCaseSensitive(s, "enum") &&
           !cJSON_GetObjectItemCaseSensitive(s, "const");
}

/* Qwen3.5: XML-ish parameters; string values raw, others JSON */
static tern_status call_qwen35(tern_str *g, const cJSON *fn, const char *rule) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    const cJSON *props = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "properties") : NULL;
    const cJSON *req = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "required") : NULL;
    tern_status st = TERN_OK;
    char buf[256];
    tern_str body = {0};
    st = tern_str_append(&body, "", 0);
    int k = 0;
    for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p && !st; p = p->next, k++) {
        bool required = false;
        for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && p->string && !strcmp(r->valuestring, p->string)) required = true;
        char vr[64];
        snprintf(vr, sizeof vr, "%s-v%d", rule, k);
        const cJSON *en = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "enum") : NULL;
        const cJSON *cn = cJSON_IsObject(p) ? cJSON_GetObjectItemCaseSensitive(p, "const") : NULL;
        bool raw_enum = cJSON_IsArray(en) && en->child;
        for (const cJSON *e = raw_enum ? en->child : NULL; e; e = e->next) raw_enum &= cJSON_IsString(e);
        if (is_string_schema(p)) {
            snprintf(buf, sizeof buf, "%s ::= [^<]+\n", vr);
            st = app(g, buf);
        } else if (raw_enum || cJSON_IsString(cn)) {
            /* string choices are written raw (the reply parser reads unquoted text as a string) */
            snprintf(buf, sizeof buf, "%s ::= ", vr);
            st = app(g, buf);
            for (const cJSON *e = raw_enum ? en->child : cn; !st && e; e = raw_enum ? e->next : NULL) {
                st = lit(g, e->valuestring);
                if (!st && raw_enum && e->next) st = app(g, " | ");
            }
            if (!st) st = app(g, "\n");
        } else {
            st = schema_rules(g, p, vr, "{}");
        }
        char open[320];
        snprintf(open, sizeof open, "<parameter=%.200s>\n", p->string ? p->string : "");
        if (!st) st = app(&body, required ? " " : " ( ");
        if (!st) st = lit(&body, open);
        snprintf(buf, sizeof buf, " %s \"\\n</parameter>\\n\"%s", vr, required ? "" : " )?");
        if (!st) st = app(&body, buf);
    }
    if (!st) { snprintf(buf, sizeof buf, "%s ::= ", rule); st = app(g, buf); }
    char head[320];
    snprintf(head, sizeof head, "<function=%.200s>\n", name->valuestring);
    if (!st) st = lit(g, head);
    if (!st) st = app(g, body.data);
    if (!st) st = app(g, " \"</function>\\n\"\n");
    tern_str_free(&body);
    return st;
}

int srv_constraint_grammar(const srv_request *r, tern_chat_format fmt, tern_str *g, const char **root, char *err,
                           size_t en) {
    *root = "root";
    tern_status st = tern_str_append(g, "", 0);
    if (st) return srv_fail(err, en, "out of memory");
    if (r->grammar) {
        st = tern_str_append(g, r->grammar, strlen(r->grammar));
    } else if (r->schema) {
        st = tern_json_schema_to_grammar(r->schema, strlen(r->schema), "root", g);
        if (st) {
            snprintf(err, en, "'response_format': %s", tern_last_error());
            return 400;
        }
    } else if (r->tool_force) {
        cJSON *tools = r->tools_json ? cJSON_Parse(r->tools_json) : NULL;
        if (!cJSON_IsArray(tools)) { cJSON_Delete(tools); return srv_fail(err, en, "'tool_choice' needs 'tools'"); }
        tern_str alts = {0};
        st = tern_str_append(&alts, "", 0);
        int k = 0;
        for (const cJSON *t = tools->child; t && !st; t = t->next) {
            const cJSON *fn = tool_fn(t);
            const cJSON *name = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
            if (!cJSON_IsString(name)) continue;
            if (r->tool_force == 2 && strcmp(name->valuestring, r->tool_name ? r->tool_name : "")) continue;
            char rule[32];
            snprintf(rule, sizeof rule, "tool%d", k);
            st = fmt == TERN_CHAT_QWEN35 ? call_qwen35(g, fn, rule) : call_qwen3(g, fn, rule);
            if (!st && k) st = app(&alts, " | ");
            if (!st) st = app(&alts, rule);
            k++;
        }
        cJSON_Delete(tools);
        if (!st && !k) { tern_str_free(&alts); return srv_fail(err, en, "'tool_choice': no tool to call"); }
        if (!st) st = app(g, "tool-call ::= \"<tool_call>\\n\" ( ");
        if (!st) st = app(g, alts.data);
        if (!st) st = app(g, fmt == TERN_CHAT_QWEN35 ? " ) \"</tool_call>\"\n" : " ) \"\\n</tool_call>\"\n");
        tern_str_free(&alts);
        *root = "tool-call";
        if (st) {
            snprintf(err, en, "'tools': %s", st == TERN_ERR_NOMEM ? "out of memory" : tern_last_error());
            return 400;
        }
    }
    if (st) return srv_fail(err, en, "out of memory");
    /* check it parses (a client grammar's error names its line) */
    if (g->len) {
        tern_grammar *G = NULL;
        st = tern_grammar_parse(g->data, g->len, *root, &G);
        tern_grammar_free(G);
        if (st) {
            snprintf(err, en, "'%s': %s", r->grammar ? "grammar" : r->schema ? "response_format" : "tools", tern_last_error());
            return 400;
        }
    }
    return 0;
}
