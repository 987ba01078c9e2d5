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

static tern_status want(const cJSON *obj, const char *key, const char *src, const char *what, const cJSON **v) {
    *v = tern_json_get(obj, key);
    if (!*v) return tern_fail(TERN_ERR_FORMAT, "%s: required key '%s' is missing", src, key);
    (void)what;
    return TERN_OK;
}
static tern_status type_err(const cJSON *v, const char *key, const char *src, const char *what) {
    return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is %s, expected %s", src, key, jtype(v), what);
}

tern_status tern_json_req_obj(const cJSON *obj, const char *key, const char *src, const cJSON **out) {
    const cJSON *v;
    tern_status st = want(obj, key, src, "an object", &v);
    if (st) return st;
    if (!cJSON_IsObject(v)) return type_err(v, key, src, "an object");
    *out = v;
    return TERN_OK;
}
tern_status tern_json_req_arr(const cJSON *obj, const char *key, const char *src, const cJSON **out) {
    const cJSON *v;
    tern_status st = want(obj, key, src, "an array", &v);
    if (st) return st;
    if (!cJSON_IsArray(v)) return type_err(v, key, src, "an array");
    *out = v;
    return TERN_OK;
}
static tern_status str_of(const cJSON *v, const char *key, const char *src, const char **out) {
    if (!cJSON_IsString(v) || !v->valuestring) return type_err(v, key, src, "a string");
    *out = v->valuestring;
    return TERN_OK;
}
tern_status tern_json_req_str(const cJSON *obj, const char *key, const char *src, const char **out) {
    const cJSON *v;
    tern_status st = want(obj, key, src, "a string", &v);
    return st ? st : str_of(v, key, src, out);
}
tern_status tern_json_opt_str(const cJSON *obj, const char *key, const char *src, const char **out) {
    const cJSON *v = tern_json_get(obj, key);
    return v ? str_of(v, key, src, out) : TERN_OK;
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

static tern_status i64_of(const cJSON *v, const char *key, int64_t lo, int64_t hi, const char *src, int64_t *out) {
    char what[300];
    snprintf(what, sizeof what, "key '%s'", key);
    return tern_json_as_i64(v, lo, hi, src, what, out);
}
tern_status tern_json_req_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, const char *src, int64_t *out) {
    const cJSON *v;
    tern_status st = want(obj, key, src, "an integer", &v);
    return st ? st : i64_of(v, key, lo, hi, src, out);
}
tern_status tern_json_opt_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, const char *src, int64_t *out) {
    const cJSON *v = tern_json_get(obj, key);
    return v ? i64_of(v, key, lo, hi, src, out) : TERN_OK;
}

static tern_status f64_of(const cJSON *v, const char *key, const char *src, double *out) {
    if (!cJSON_IsNumber(v)) return type_err(v, key, src, "a number");
    if (!isfinite(v->valuedouble)) return tern_fail(TERN_ERR_FORMAT, "%s: key '%s' is not finite", src, key);
    *out = v->valuedouble;
    return TERN_OK;
}
tern_status tern_json_req_f64(const cJSON *obj, const char *key, const char *src, double *out) {
    const cJSON *v;
    tern_status st = want(obj, key, src, "a number", &v);
    return st ? st : f64_of(v, key, src, out);
}
tern_status tern_json_opt_f64(const cJSON *obj, const char *key, const char *src, double *out) {
    const cJSON *v = tern_json_get(obj, key);
    return v ? f64_of(v, key, src, out) : TERN_OK;
}

static tern_status bool_of(const cJSON *v, const char *key, const char *src, bool *out) {
    if (!cJSON_IsBool(v)) return type_err(v, key, src, "a bool");
    *out = cJSON_IsTrue(v);
    return TERN_OK;
}
tern_status tern_json_req_bool(const cJSON *obj, const char *key, const char *src, bool *out) {
    const cJSON *v;
    tern_status st = want(obj, key, src, "a bool", &v);
    return st ? st : bool_of(v, key, src, out);
}
tern_status tern_json_opt_bool(const cJSON *obj, const char *key, const char *src, bool *out) {
    const cJSON *v = tern_json_get(obj, key);
    return v ? bool_of(v, key, src, out) : TERN_OK;
}
