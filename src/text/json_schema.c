/*
 * json_schema.c - JSON Schema -> GBNF (grammar.c's format), for
 * response_format json_schema and forced tool calls.
 *
 * Supported: type (a name or a list), properties + required (properties appear
 * in the schema's order; a required one always, an optional one may be left
 * out), additionalProperties (false, true or a schema: extra properties are
 * never generated, so either is met), enum, const, items, prefixItems,
 * minItems/maxItems, minLength/maxLength, anyOf/oneOf (oneOf's exclusivity is
 * not enforced), $ref to #/$defs/NAME or #/definitions/NAME (recursion allowed),
 * and the annotations title, description, default, examples, $schema, $id,
 * $comment, $defs, definitions, readOnly, writeOnly, deprecated. Any other
 * keyword is an error naming it (TERN_ERR_UNSUPPORTED): output that might not
 * validate is refused rather than produced.
 *
 * Output shape: compact JSON, at most one space between tokens (a weak model
 * cannot spend its tokens on indentation); integers of at most 16 digits, numbers
 * with at most 16 fraction digits and a 3-digit exponent (bounded, so a weak
 * model cannot run a number forever). Rule names are PREFIX-..., PREFIX the
 * start rule's name, so several conversions can share one grammar.
 */
#include "core/common.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    tern_str *out;
    const char *pre;
    const cJSON *root;
    int n;                          /* generated rule counter */
    int depth;
    tern_status st;
    struct { char *path; char name[80]; } refs[256];
    int n_refs;
} sconv;

#define S_MAX_DEPTH 64

static void put(sconv *c, const char *s) {
    if (!c->st) c->st = tern_str_append(c->out, s, strlen(s));
}

static void putf(sconv *c, const char *fmt, ...) TERN_PRINTF(2, 3);
static void putf(sconv *c, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) { if (!c->st) c->st = tern_fail(TERN_ERR_INTERNAL, "json schema: rule too long"); return; }
    put(c, buf);
}

/* text as a GBNF literal "..." */
static void put_lit(sconv *c, const char *s) {
    put(c, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char b[8];
        if (*p == '"' || *p == '\\') { b[0] = '\\'; b[1] = (char)*p; b[2] = 0; }
        else if (*p == '\n') strcpy(b, "\\n");
        else if (*p < 0x20 || *p == 0x7f) snprintf(b, sizeof b, "\\x%02X", *p);
        else { b[0] = (char)*p; b[1] = 0; }
        put(c, b);
    }
    put(c, "\"");
}

/* a JSON value as the literal of its compact text */
static void put_json_lit(sconv *c, const cJSON *v) {
    char *t = cJSON_PrintUnformatted(v);
    if (!t) { if (!c->st) c->st = tern_fail(TERN_ERR_NOMEM, "json schema: out of memory"); return; }
    put_lit(c, t);
    free(t);
}

static void new_name(sconv *c, char *name, size_t n) { snprintf(name, n, "%s-%d", c->pre, ++c->n); }

static tern_status unsupported(sconv *c, const char *what) {
    if (!c->st) c->st = tern_fail(TERN_ERR_UNSUPPORTED, "json schema: %s is not supported", what);
    return c->st;
}

static void schema_rule(sconv *c, const cJSON *s, char *name, size_t nn);

static bool is_annotation(const char *k) {
    static const char *const ok[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                     "$defs", "definitions", "readOnly", "writeOnly", "deprecated", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(k, ok[i])) return true;
    return false;
}

static bool known_keyword(const char *k) {
    static const char *const kw[] = {"type", "properties", "required", "additionalProperties", "enum", "const", "items",
                                     "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "anyOf", "oneOf",
                                     "$ref", NULL};
    for (int i = 0; kw[i]; i++)
        if (!strcmp(k, kw[i])) return true;
    return is_annotation(k);
}

static int get_count(sconv *c, const cJSON *s, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return dflt;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 4096 || v->valuedouble != (int)v->valuedouble) {
        char w[96];
        snprintf(w, sizeof w, "'%s' other than an integer in 0..4096", key);
        unsupported(c, w);
        return dflt;
    }
    return (int)v->valuedouble;
}

static void object_rule(sconv *c, const cJSON *s, const char *name) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) { unsupported(c, "'properties' that is not an object"); return; }
    if (req && !cJSON_IsArray(req)) { unsupported(c, "'required' that is not an array"); return; }
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (n == 0) {
        /* a map: any keys, values of additionalProperties' schema (or any) */
        char vname[96];
        if (add && cJSON_IsObject(add)) schema_rule(c, add, vname, sizeof vname);
        else snprintf(vname, sizeof vname, "%s-value", c->pre);
        if (c->st) return;
        putf(c, "%s ::= \"{\" %s-ws ( %s-string %s-ws \":\" %s-ws %s %s-ws ( \",\" %s-ws %s-string %s-ws \":\" %s-ws %s %s-ws )* )? \"}\"\n",
             name, c->pre, c->pre, c->pre, c->pre, vname, c->pre, c->pre, c->pre, c->pre, c->pre, vname, c->pre);
        return;
    }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) { unsupported(c, "a 'required' entry that is not a string"); return; }
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
            unsupported(c, "'required' naming a property missing from 'properties'");
            return;
        }
    }
    /* kv_i rules, then first(i) / rest(i) chains (see the file comment) */
    char (*kv)[96] = calloc((size_t)n, sizeof *kv);
    bool *rq = calloc((size_t)n, sizeof *rq);
    if (!kv || !rq) { free(kv); free(rq); if (!c->st) c->st = tern_fail(TERN_ERR_NOMEM, "json schema: out of memory"); return; }
    int i = 0;
    for (const cJSON *p = props->child; p && !c->st; p = p->next, i++) {
        char vname[96];
        schema_rule(c, p, vname, sizeof vname);
        if (c->st) break;
        new_name(c, kv[i], sizeof kv[i]);
        putf(c, "%s ::= ", kv[i]);
        cJSON *key = cJSON_CreateString(p->string ? p->string : "");
        put_json_lit(c, key);
        cJSON_Delete(key);
        putf(c, " %s-ws \":\" %s-ws %s %s-ws\n", c->pre, c->pre, vname, c->pre);
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && p->string && !strcmp(r->valuestring, p->string)) rq[i] = true;
    }
    if (!c->st) {
        int base = c->n;
        c->n += 2 * (n + 1);
        /* first(i) = base+1+i, rest(i) = base+2+n+i (i in 0..n) */
#define FIRST(i) base + 1 + (i)
#define REST(i) base + 2 + n + (i)
        for (i = n; i >= 0; i--) {
            if (i == n) {
                putf(c, "%s-%d ::= \"\"\n%s-%d ::= \"\"\n", c->pre, FIRST(i), c->pre, REST(i));
                continue;
            }
            putf(c, "%s-%d ::= %s %s-%d", c->pre, FIRST(i), kv[i], c->pre, REST(i + 1));
            if (!rq[i]) putf(c, " | %s-%d", c->pre, FIRST(i + 1));
            put(c, "\n");
            putf(c, "%s-%d ::= \",\" %s-ws %s %s-%d", c->pre, REST(i), c->pre, kv[i], c->pre, REST(i + 1));
            if (!rq[i]) putf(c, " | %s-%d", c->pre, REST(i + 1));
            put(c, "\n");
        }
        putf(c, "%s ::= \"{\" %s-ws %s-%d \"}\"\n", name, c->pre, c->pre, FIRST(0));
#undef FIRST
#undef REST
    }
    free(kv);
    free(rq);
}

static void array_rule(sconv *c, const cJSON *s, const char *name) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    int mn = get_count(c, s, "minItems", 0), mx = get_count(c, s, "maxItems", -1);
    if (c->st) return;
    if (mx >= 0 && mx < mn) { unsupported(c, "maxItems < minItems"); return; }
    if (prefix) {
        if (!cJSON_IsArray(prefix)) { unsupported(c, "'prefixItems' that is not an array"); return; }
        if (items && !cJSON_IsFalse(items)) { unsupported(c, "'prefixItems' with 'items' other than false"); return; }
        int n = cJSON_GetArraySize(prefix);
        char (*nm)[96] = calloc((size_t)(n ? n : 1), sizeof *nm);
        if (!nm) { if (!c->st) c->st = tern_fail(TERN_ERR_NOMEM, "json schema: out of memory"); return; }
        int i = 0;
        for (const cJSON *p = prefix->child; p && !c->st; p = p->next, i++) schema_rule(c, p, nm[i], sizeof nm[i]);
        if (!c->st) {
            putf(c, "%s ::= \"[\" %s-ws", name, c->pre);
            for (i = 0; i < n; i++) putf(c, "%s%s%s %s %s-ws", i ? " \",\" " : "", i ? c->pre : "", i ? "-ws" : "", nm[i], c->pre);
            put(c, " \"]\"\n");
        }
        free(nm);
        return;
    }
    char it[96];
    if (items && cJSON_IsObject(items)) schema_rule(c, items, it, sizeof it);
    else if (!items || cJSON_IsTrue(items)) snprintf(it, sizeof it, "%s-value", c->pre);
    else { unsupported(c, "'items' that is not a schema"); return; }
    if (c->st) return;
    /* item ("," item){mn-1, mx-1}; optional as a whole when mn == 0 */
    if (mx == 0) { putf(c, "%s ::= \"[\" %s-ws \"]\"\n", name, c->pre); return; }
    int lo = mn > 0 ? mn - 1 : 0;
    char rep[32];
    if (mx < 0) snprintf(rep, sizeof rep, "{%d,}", lo);
    else snprintf(rep, sizeof rep, "{%d,%d}", lo, mx - 1);
    putf(c, "%s ::= \"[\" %s-ws %s%s %s-ws ( \",\" %s-ws %s %s-ws )%s%s \"]\"\n", name, c->pre, mn == 0 ? "( " : "", it,
         c->pre, c->pre, it, c->pre, rep, mn == 0 ? " )?" : "");
}

static void string_rule(sconv *c, const cJSON *s, const char *name) {
    int mn = get_count(c, s, "minLength", 0), mx = get_count(c, s, "maxLength", -1);
    if (c->st) return;
    if (mx >= 0 && mx < mn) { unsupported(c, "maxLength < minLength"); return; }
    if (mn == 0 && mx < 0) { putf(c, "%s ::= %s-string\n", name, c->pre); return; }
    if (mx < 0) putf(c, "%s ::= \"\\\"\" %s-char{%d,} \"\\\"\"\n", name, c->pre, mn);
    else putf(c, "%s ::= \"\\\"\" %s-char{%d,%d} \"\\\"\"\n", name, c->pre, mn, mx);
}

static const cJSON *resolve_ref(sconv *c, const char *ref) {
    const char *pfx[] = {"#/$defs/", "#/definitions/"};
    for (int k = 0; k < 2; k++) {
        size_t l = strlen(pfx[k]);
        if (!strncmp(ref, pfx[k], l)) {
            const cJSON *defs = cJSON_GetObjectItemCaseSensitive(c->root, k ? "definitions" : "$defs");
            const cJSON *d = defs ? cJSON_GetObjectItemCaseSensitive(defs, ref + l) : NULL;
            if (d) return d;
        }
    }
    if (!strcmp(ref, "#")) return c->root;
    return NULL;
}

static void type_rule(sconv *c, const cJSON *s, const char *ty, const char *name) {
    if (!strcmp(ty, "object")) object_rule(c, s, name);
    else if (!strcmp(ty, "array")) array_rule(c, s, name);
    else if (!strcmp(ty, "string")) string_rule(c, s, name);
    else if (!strcmp(ty, "number") || !strcmp(ty, "integer") || !strcmp(ty, "boolean") || !strcmp(ty, "null"))
        putf(c, "%s ::= %s-%s\n", name, c->pre, ty);
    else {
        char w[96];
        snprintf(w, sizeof w, "type \"%.40s\"", ty);
        unsupported(c, w);
    }
}

/* Emit the rules for schema s; its start rule's name goes to name. */
static void schema_rule(sconv *c, const cJSON *s, char *name, size_t nn) {
    if (c->st) return;
    if (cJSON_IsTrue(s) || (cJSON_IsObject(s) && !s->child)) { snprintf(name, nn, "%s-value", c->pre); return; }
    if (!cJSON_IsObject(s)) { unsupported(c, "a schema that is not an object or true"); return; }
    if (++c->depth > S_MAX_DEPTH) { unsupported(c, "a schema nested over 64 levels"); return; }
    for (const cJSON *k = s->child; k; k = k->next)
        if (!k->string || !known_keyword(k->string)) {
            char w[96];
            snprintf(w, sizeof w, "the keyword '%.48s'", k->string ? k->string : "");
            unsupported(c, w);
            c->depth--;
            return;
        }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (ref) {
        if (!cJSON_IsString(ref)) { unsupported(c, "a '$ref' that is not a string"); goto out; }
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i].path, ref->valuestring)) { snprintf(name, nn, "%s", c->refs[i].name); goto out; }
        const cJSON *d = resolve_ref(c, ref->valuestring);
        if (!d) { unsupported(c, "a '$ref' other than #/$defs/NAME or #/definitions/NAME"); goto out; }
        if (c->n_refs >= 256) { unsupported(c, "more than 256 '$ref' targets"); goto out; }
        int k = c->n_refs++;
        c->refs[k].path = strdup(ref->valuestring);
        if (!c->refs[k].path) { c->st = tern_fail(TERN_ERR_NOMEM, "json schema: out of memory"); goto out; }
        new_name(c, c->refs[k].name, sizeof c->refs[k].name);
        snprintf(name, nn, "%s", c->refs[k].name);
        char inner[96];
        schema_rule(c, d, inner, sizeof inner);
        putf(c, "%s ::= %s\n", c->refs[k].name, inner);
        goto out;
    }
    new_name(c, name, nn);
    if (cn) {
        putf(c, "%s ::= ", name);
        put_json_lit(c, cn);
        put(c, "\n");
    } else if (en) {
        if (!cJSON_IsArray(en) || !cJSON_GetArraySize(en)) { unsupported(c, "an 'enum' that is not a non-empty array"); goto out; }
        putf(c, "%s ::= ", name);
        for (const cJSON *v = en->child; v; v = v->next) {
            put_json_lit(c, v);
            if (v->next) put(c, " | ");
        }
        put(c, "\n");
    } else if (any) {
        if (!cJSON_IsArray(any) || !cJSON_GetArraySize(any)) { unsupported(c, "an 'anyOf' that is not a non-empty array"); goto out; }
        int n = cJSON_GetArraySize(any);
        char (*sub)[96] = calloc((size_t)n, sizeof *sub);
        if (!sub) { c->st = tern_fail(TERN_ERR_NOMEM, "json schema: out of memory"); goto out; }
        int i = 0;
        for (const cJSON *v = any->child; v && !c->st; v = v->next, i++) schema_rule(c, v, sub[i], sizeof sub[i]);
        putf(c, "%s ::= ", name);
        for (i = 0; i < n; i++) putf(c, "%s%s", i ? " | " : "", sub[i]);
        put(c, "\n");
        free(sub);
    } else if (cJSON_IsString(ty)) {
        type_rule(c, s, ty->valuestring, name);
    } else if (cJSON_IsArray(ty)) {
        int n = cJSON_GetArraySize(ty);
        if (!n) { unsupported(c, "an empty 'type' list"); goto out; }
        char alts[1024] = "";
        for (const cJSON *t = ty->child; t && !c->st; t = t->next) {
            if (!cJSON_IsString(t)) { unsupported(c, "a 'type' entry that is not a string"); break; }
            char sub[96];
            new_name(c, sub, sizeof sub);
            type_rule(c, s, t->valuestring, sub);
            if (strlen(alts) + strlen(sub) + 4 >= sizeof alts) { unsupported(c, "a 'type' list this long"); break; }
            if (*alts) strcat(alts, " | ");
            strcat(alts, sub);
        }
        putf(c, "%s ::= %s\n", name, alts);
    } else if (ty) {
        unsupported(c, "a 'type' that is not a string or a list");
    } else if (cJSON_GetObjectItemCaseSensitive(s, "properties") || cJSON_GetObjectItemCaseSensitive(s, "additionalProperties")) {
        object_rule(c, s, name);
    } else if (cJSON_GetObjectItemCaseSensitive(s, "items") || cJSON_GetObjectItemCaseSensitive(s, "prefixItems")) {
        array_rule(c, s, name);
    } else {
        putf(c, "%s ::= %s-value\n", name, c->pre);
    }
out:
    c->depth--;
}

static void put_common(sconv *c) {
    const char *p = c->pre;
    putf(c, "%s-ws ::= \" \"?\n", p);
    putf(c, "%s-char ::= [^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n", p);
    putf(c, "%s-string ::= \"\\\"\" %s-char* \"\\\"\"\n", p, p);
    putf(c, "%s-integer ::= \"-\"? ( [0-9] | [1-9] [0-9]{1,15} )\n", p);
    putf(c, "%s-number ::= %s-integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n", p, p);
    putf(c, "%s-boolean ::= \"true\" | \"false\"\n", p);
    putf(c, "%s-null ::= \"null\"\n", p);
    putf(c, "%s-value ::= %s-object | %s-array | %s-string | %s-number | %s-boolean | %s-null\n", p, p, p, p, p, p, p);
    putf(c, "%s-object ::= \"{\" %s-ws ( %s-string %s-ws \":\" %s-ws %s-value %s-ws ( \",\" %s-ws %s-string %s-ws \":\" %s-ws %s-value %s-ws )* )? \"}\"\n",
         p, p, p, p, p, p, p, p, p, p, p, p, p);
    putf(c, "%s-array ::= \"[\" %s-ws ( %s-value %s-ws ( \",\" %s-ws %s-value %s-ws )* )? \"]\"\n", p, p, p, p, p, p, p);
}

tern_status tern_json_schema_to_grammar(const char *schema, size_t len, const char *root, tern_str *gbnf) {
    if (!gbnf || (!schema && len)) return tern_fail(TERN_ERR_INVALID_ARG, "tern_json_schema_to_grammar: NULL argument");
    if (!root) root = "root";
    for (const char *q = root; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-' || *q == '_'))
            return tern_fail(TERN_ERR_INVALID_ARG, "tern_json_schema_to_grammar: bad rule name");
    if (!*root || strlen(root) > 40) return tern_fail(TERN_ERR_INVALID_ARG, "tern_json_schema_to_grammar: bad rule name");
    if (schema && len) {            /* the grammar's literals are UTF-8: refuse invalid bytes here */
        tern_str clean = {0};
        tern_status us = tern_utf8_sanitize(schema, len, &clean);
        bool same = !us && clean.len == len && !memcmp(clean.data, schema, len);
        tern_str_free(&clean);
        if (us) return us;
        if (!same) return tern_fail(TERN_ERR_FORMAT, "json schema: not valid UTF-8");
    }
    cJSON *js = schema && len ? cJSON_ParseWithLength(schema, len) : cJSON_CreateObject();
    if (!js) return tern_fail(TERN_ERR_FORMAT, "json schema: not valid JSON");
    sconv c = {0};
    c.out = gbnf;
    c.pre = root;
    c.root = js;
    char name[96];
    if (!cJSON_IsObject(js) && !cJSON_IsTrue(js)) unsupported(&c, "a schema that is not an object or true");
    else schema_rule(&c, js, name, sizeof name);
    if (!c.st) {
        putf(&c, "%s ::= %s\n", root, name);
        put_common(&c);
    }
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].path);
    cJSON_Delete(js);
    if (!c.st) { /* a $ref cycle that consumes nothing (e.g. {"$ref":"#"}) is left recursion */
        tern_grammar *G = NULL;
        if (tern_grammar_parse(gbnf->data, gbnf->len, root, &G) != TERN_OK)
            c.st = tern_fail(TERN_ERR_FORMAT, "json schema: unsupported $ref cycle: a definition reaches itself "
                                              "through $ref before matching any character");
        tern_grammar_free(G);
    }
    return c.st;
}
