/*
 * json_util.c - checked cJSON accessors (see json_util.h). Every failure names
 * the source file and the key; numbers must be finite and, for integers,
 * integral and inside the requested range.
 */
#include "formats/json_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

tern_status tern_json_parse(const char *text, size_t len, const char *src, cJSON **out) {
    *out = NULL;
    if (!text) return tern_fail(TERN_ERR_FORMAT, "%s: empty JSON", src);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!j) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        return tern_fail(TERN_ERR_FORMAT, "%s: invalid JSON near byte %zu", src, at);
    }
    /* only whitespace (and NULs from padding) may follow the value */
    if (end)
        for (const char *p = end; p < text + len; p++)
            if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t' && *p != 0) {
                cJSON_Delete(j);
                return tern_fail(TERN_ERR_FORMAT, "%s: trailing data after JSON at byte %zu", src, (size_t)(p - text));
            }
    *out = j;
    return TERN_OK;
}

tern_status tern_json_parse_file(const char *path, size_t max_bytes, cJSON **out) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    tern_status st = tern_read_file(path, max_bytes, &buf, &len);
    if (st) return st;
    st = tern_json_parse(buf, len, path, out);
    free(buf);
    return st;
}

const cJSON *tern_json_get(const cJSON *obj, const char *key) {
    if (!obj || !cJSON_IsObject(obj) || !key) return NULL;
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static const char *jtype(const cJSON *v) {
    if (!v) return "missing";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a bool";
    if (cJSON_IsNull(v)) return "null";
    return "invalid";
}

tern_status tern_json_as_i64(const cJSON *v, int64_t lo, int64_t hi, const char *src, const char *what, int64_t *out) {
    if (!cJSON_IsNumber(v)) return tern_fail(TERN_ERR_FORMAT, "%s: %s is %s, expected an integer", src, what, jtype(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d) || fabs(d) > 9007199254740992.0)
        return tern_fail(TERN_ERR_FORMAT, "%s: %s = %g is not an integer", src, what, d);
    int64_t i = (int64_t)d;
    if (i < lo || i > hi)
        return tern_fail(TERN_ERR_FORMAT, "%s: %s = %lld is out of range [%lld, %lld]", src, what, (long long)i,
                         (long long)lo, (long long)hi);
    *out = i;
    return TERN_OK;
}

static tern_status type_err(const cJSON *v, const char *key, const char *src, const char *what) {
    return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is %s, expected %s", src, key, jtype(v), what);
}

/* One reader behind every typed accessor: obj[key] checked and stored into out (the
 * type the public accessor names); a missing key is an error unless opt. */
typedef enum { J_OBJ, J_ARR, J_STR, J_I64, J_F64, J_BOOL } jkind;
static tern_status get(const cJSON *obj, const char *key, const char *src, bool opt, jkind k, int64_t lo, int64_t hi,
                       void *out) {
    const cJSON *v = tern_json_get(obj, key);
    if (!v) return opt ? TERN_OK : tern_fail(TERN_ERR_FORMAT, "%s: required key '%s' is missing", src, key);
    switch (k) {
    case J_OBJ:
    case J_ARR:
        if (k == J_OBJ ? !cJSON_IsObject(v) : !cJSON_IsArray(v)) return type_err(v, key, src, k == J_OBJ ? "an object" : "an array");
        *(const cJSON **)out = v;
        return TERN_OK;
    case J_STR:
        if (!cJSON_IsString(v) || !v->valuestring) return type_err(v, key, src, "a string");
        *(const char **)out = v->valuestring;
        return TERN_OK;
    case J_I64: {
        char what[300];
        snprintf(what, sizeof what, "key '%s'", key);
        return tern_json_as_i64(v, lo, hi, src, what, out);
    }
    case J_F64:
        if (!cJSON_IsNumber(v)) return type_err(v, key, src, "a number");
        if (!isfinite(v->valuedouble)) return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is not finite", src, key);
        *(double *)out = v->valuedouble;
        return TERN_OK;
    case J_BOOL:
        if (!cJSON_IsBool(v)) return type_err(v, key, src, "a bool");
        *(bool *)out = cJSON_IsTrue(v);
        return TERN_OK;
    }
    return TERN_ERR_INTERNAL;
}

tern_status tern_json_req_obj(const cJSON *obj, const char *key, const char *src, const cJSON **out) { return get(obj, key, src, false, J_OBJ, 0, 0, out); }
tern_status tern_json_req_arr(const cJSON *obj, const char *key, const char *src, const cJSON **out) { return get(obj, key, src, false, J_ARR, 0, 0, out); }
tern_status tern_json_req_str(const cJSON *obj, const char *key, const char *src, const char **out) { return get(obj, key, src, false, J_STR, 0, 0, out); }
tern_status tern_json_opt_str(const cJSON *obj, const char *key, const char *src, const char **out) { return get(obj, key, src, true, J_STR, 0, 0, out); }
tern_status tern_json_req_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, const char *src, int64_t *out) {
    return get(obj, key, src, false, J_I64, lo, hi, out);
}
tern_status tern_json_opt_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, const char *src, int64_t *out) {
    return get(obj, key, src, true, J_I64, lo, hi, out);
}
tern_status tern_json_req_f64(const cJSON *obj, const char *key, const char *src, double *out) { return get(obj, key, src, false, J_F64, 0, 0, out); }
tern_status tern_json_opt_f64(const cJSON *obj, const char *key, const char *src, double *out) { return get(obj, key, src, true, J_F64, 0, 0, out); }
tern_status tern_json_req_bool(const cJSON *obj, const char *key, const char *src, bool *out) { return get(obj, key, src, false, J_BOOL, 0, 0, out); }
tern_status tern_json_opt_bool(const cJSON *obj, const char *key, const char *src, bool *out) { return get(obj, key, src, true, J_BOOL, 0, 0, out); }
