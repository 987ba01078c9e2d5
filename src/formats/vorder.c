/*
 * vorder.c - GDN V-head order permutations between grouped (HF/MLX) and tiled
 * (GGUF) order; the rules are in vorder.h, which tensor follows which rule in
 * the architecture tables (formats/arch).
 */
#include "formats/vorder.h"
#include "formats/arch/arch.h"

/* The rule of a name is its role's (model/arch tables); NONE when no
 * architecture has the name. */
static tern_vorder_kind kind_of(const char *n, bool hf) {
    for (int i = 0; i < TM_ARCH_COUNT; i++) {
        int il;
        const tm_arch_desc *a = tm_arch_get(i);
        const tm_role *r = hf ? tm_arch_find_hf(a, n, &il) : tm_arch_find_gguf(a, n, &il);
        if (r && r->vo != TERN_VO_NONE) return r->vo;
    }
    return TERN_VO_NONE;
}

tern_vorder_kind tern_vorder_kind_of(const char *n) { return kind_of(n, false); }
tern_vorder_kind tern_vorder_kind_of_hf(const char *n) { return kind_of(n, true); }

tern_status tern_gdn_dims_check(const tern_gdn_dims *g) {
    if (!g->n_k || !g->n_v || g->n_v % g->n_k || !g->head_k_dim || !g->head_v_dim)
        return tern_fail(TERN_ERR_FORMAT,
                         "GDN dims invalid: n_k %llu, n_v %llu (must be a multiple of n_k), "
                         "head_k_dim %llu, head_v_dim %llu",
                         (unsigned long long)g->n_k, (unsigned long long)g->n_v,
                         (unsigned long long)g->head_k_dim, (unsigned long long)g->head_v_dim);
    return TERN_OK;
}

void tern_vorder_units(void *dst, const void *src, const tern_gdn_dims *g, size_t unit,
                       tern_vorder_dir dir) {
    uint64_t r = g->n_v / g->n_k;
    for (uint64_t k = 0; k < g->n_k; k++)
        for (uint64_t j = 0; j < r; j++) {
            uint64_t grouped = k * r + j, tiled = j * g->n_k + k;
            uint64_t from = dir == TERN_VORDER_TO_TILED ? grouped : tiled;
            uint64_t to = dir == TERN_VORDER_TO_TILED ? tiled : grouped;
            memcpy((uint8_t *)dst + to * unit, (const uint8_t *)src + from * unit, unit);
        }
}

static tern_status shape_err(const char *name, const char *what, uint64_t got, uint64_t want) {
    return tern_fail(TERN_ERR_SHAPE, "tensor '%s': %s is %llu, the GDN dims need %llu",
                     name ? name : "?", what, (unsigned long long)got, (unsigned long long)want);
}

tern_status tern_vorder_tensor(tern_vorder_kind kind, const tern_gdn_dims *g, const void *src,
                               void *dst, uint64_t n_rows, uint64_t row_bytes, tern_vorder_dir dir,
                               const char *name) {
    tern_status st = tern_gdn_dims_check(g);
    if (st) return tern_fail_prefix(st, "tensor '%s'", name ? name : "?");
    uint64_t total = n_rows * row_bytes;
    const uint8_t *s = src;
    uint8_t *d = dst;
    uint64_t vdim = g->n_v * g->head_v_dim, kdim = g->n_k * g->head_k_dim;
    switch (kind) {
    case TERN_VO_NONE: memcpy(d, s, total); return TERN_OK;
    case TERN_VO_QKV:
    case TERN_VO_CONV: {
        if (n_rows != 2 * kdim + vdim) return shape_err(name, "row/channel count", n_rows, 2 * kdim + vdim);
        uint64_t off = 2 * kdim * row_bytes;
        memcpy(d, s, off);
        tern_vorder_units(d + off, s + off, g, g->head_v_dim * row_bytes, dir);
        return TERN_OK;
    }
    case TERN_VO_ROWS:
        if (n_rows == vdim) {
            tern_vorder_units(d, s, g, g->head_v_dim * row_bytes, dir);
            return TERN_OK;
        }
        if (n_rows == g->n_v) { /* ssm_alpha / ssm_beta: one row per head */
            tern_vorder_units(d, s, g, row_bytes, dir);
            return TERN_OK;
        }
        return shape_err(name, "row count", n_rows, vdim);
    case TERN_VO_ELEMS:
        if (n_rows != 1 || row_bytes % g->n_v) return shape_err(name, "rows", n_rows, 1);
        tern_vorder_units(d, s, g, row_bytes / g->n_v, dir);
        return TERN_OK;
    case TERN_VO_COLS:
        if (row_bytes % g->n_v) return shape_err(name, "row bytes (not divisible by n_v)", row_bytes, g->n_v);
        for (uint64_t r = 0; r < n_rows; r++)
            tern_vorder_units(d + r * row_bytes, s + r * row_bytes, g, row_bytes / g->n_v, dir);
        return TERN_OK;
    }
    return tern_fail(TERN_ERR_INTERNAL, "tensor '%s': unknown V-order kind %d", name ? name : "?", (int)kind);
}

uint64_t tern_vorder_src_row(tern_vorder_kind kind, const tern_gdn_dims *g, uint64_t n_rows, uint64_t r,
                             tern_vorder_dir dir) {
    uint64_t base = 0, unit;
    switch (kind) {
    case TERN_VO_QKV:
    case TERN_VO_CONV:
        base = 2 * g->n_k * g->head_k_dim;
        unit = g->head_v_dim;
        break;
    case TERN_VO_ROWS: unit = n_rows == g->n_v ? 1 : g->head_v_dim; break;
    case TERN_VO_ELEMS: unit = 1; break;
    default: return r;
    }
    if (r < base || !unit || !g->n_k) return r;
    uint64_t p = (r - base) / unit, within = (r - base) % unit, rr = g->n_v / g->n_k;
    uint64_t from;
    if (dir == TERN_VORDER_TO_TILED) { /* dst slot p = j*n_k + k holds grouped head k*rr + j */
        uint64_t j = p / g->n_k, k = p % g->n_k;
        from = k * rr + j;
    } else {                          /* dst grouped g = k*rr + j comes from tiled slot j*n_k + k */
        uint64_t k = p / rr, j = p % rr;
        from = j * g->n_k + k;
    }
    return base + from * unit + within;
}

tern_status tern_vorder_check(tern_vorder_kind kind, const tern_gdn_dims *g, uint64_t n_rows, uint64_t k,
                              const char *name) {
    if (kind == TERN_VO_NONE) return TERN_OK;
    tern_status st = tern_gdn_dims_check(g);
    if (st) return tern_fail_prefix(st, "tensor '%s'", name ? name : "?");
    uint64_t vdim = g->n_v * g->head_v_dim, kdim = g->n_k * g->head_k_dim;
    switch (kind) {
    case TERN_VO_QKV:
    case TERN_VO_CONV:
        return n_rows == 2 * kdim + vdim ? TERN_OK : shape_err(name, "row/channel count", n_rows, 2 * kdim + vdim);
    case TERN_VO_ROWS:
        return n_rows == vdim || n_rows == g->n_v ? TERN_OK : shape_err(name, "row count", n_rows, vdim);
    case TERN_VO_ELEMS:
        return n_rows == g->n_v ? TERN_OK : shape_err(name, "element count", n_rows, g->n_v);
    case TERN_VO_COLS:
        return k == vdim ? TERN_OK : shape_err(name, "row length", k, vdim);
    default: return TERN_OK;
    }
}
