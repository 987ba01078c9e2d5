/*
 * json_util.h - checked accessors over cJSON (Debian libcjson) for the JSON
 * files tern reads: safetensors headers, MLX config.json, hadamard.json,
 * tokenizer configs. Every getter checks the JSON type and range and, on
 * failure, sets an error naming the file (`src`) and the key path.
 *
 * Numbers: JSON numbers are doubles in cJSON; integer getters accept only
 * finite integral values inside the requested range (|v| <= 2^53).
 */
#ifndef TERN_FORMATS_JSON_UTIL_H
#define TERN_FORMATS_JSON_UTIL_H

#include "core/common.h"
#include <cjson/cJSON.h>

/* Parse text (need not be NUL-terminated) into a cJSON tree. On failure the
 * error names `src` and the byte offset where parsing stopped. Free with cJSON_Delete. */
tern_status tern_json_parse(const char *text, size_t len, const char *src, cJSON **out);
/* Read a file (at most max_bytes) and parse it. */
tern_status tern_json_parse_file(const char *path, size_t max_bytes, cJSON **out);

/* Member lookup (case-sensitive; cJSON_GetObjectItem is not). NULL if absent or obj not an object. */
const cJSON *tern_json_get(const cJSON *obj, const char *key);

/* Required members: fail (TERN_ERR_FORMAT, "src: key 'key' ...") when missing
 * or of the wrong type. `key` is used for lookup and in messages. */
tern_status tern_json_req_obj(const cJSON *obj, const char *key, const char *src, const cJSON **out);
tern_status tern_json_req_arr(const cJSON *obj, const char *key, const char *src, const cJSON **out);
tern_status tern_json_req_str(const cJSON *obj, const char *key, const char *src, const char **out);
tern_status tern_json_req_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, const char *src, int64_t *out);
tern_status tern_json_req_f64(const cJSON *obj, const char *key, const char *src, double *out);
tern_status tern_json_req_bool(const cJSON *obj, const char *key, const char *src, bool *out);
/* Optional members: TERN_OK and *out untouched when absent; type errors still fail. */
tern_status tern_json_opt_str(const cJSON *obj, const char *key, const char *src, const char **out);
tern_status tern_json_opt_i64(const cJSON *obj, const char *key, int64_t lo, int64_t hi, const char *src, int64_t *out);
tern_status tern_json_opt_f64(const cJSON *obj, const char *key, const char *src, double *out);
tern_status tern_json_opt_bool(const cJSON *obj, const char *key, const char *src, bool *out);

/* A JSON value (not a member) as an integer in [lo, hi]; `what` names it in messages. */
tern_status tern_json_as_i64(const cJSON *v, int64_t lo, int64_t hi, const char *src, const char *what, int64_t *out);

#endif
