/*
 * _tern.c - the CPython extension of the `tern` package: thin wrappers over
 * include/tern.h (libtern linked statically). Arrays come in and go out through
 * the buffer protocol (the Python layer, tern/__init__.py, makes them C-contiguous
 * numpy arrays of the right dtype); the GIL is released while kernels and model
 * evaluation run. Errors raise tern.Error subclasses with tern_last_error().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "tern.h"
#include "lab.h" /* tern_device_read_ceiling_gbps (src/lab.h: in libtern.a, not public API) */

#include <string.h>

static PyObject *g_err_base, *g_err_value, *g_err_io, *g_err_ctx;

static PyObject *fail(tern_status st) {
    const char *msg = tern_last_error();
    PyObject *cls = g_err_base;
    if (st == TERN_ERR_SHAPE || st == TERN_ERR_INVALID_ARG || st == TERN_ERR_FORMAT ||
        st == TERN_ERR_RANGE || st == TERN_ERR_UNSUPPORTED)
        cls = g_err_value;
    else if (st == TERN_ERR_IO)
        cls = g_err_io;
    else if (st == TERN_ERR_CONTEXT_FULL)
        cls = g_err_ctx;
    PyErr_Format(cls, "%s (%s)", msg && *msg ? msg : "error", tern_status_str(st));
    return NULL;
}

/* ------------------------------------------------------------ linear */
typedef struct { PyObject_HEAD tern_linear *l; } LinObj;
static void lin_dealloc(LinObj *o) { tern_linear_free(o->l); Py_TYPE(o)->tp_free((PyObject *)o); }
static PyTypeObject LinType = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._tern.Linear",
                               .tp_basicsize = sizeof(LinObj), .tp_flags = Py_TPFLAGS_DEFAULT,
                               .tp_dealloc = (destructor)lin_dealloc, .tp_new = NULL};

static PyObject *lin_wrap(tern_linear *l) {
    LinObj *o = PyObject_New(LinObj, &LinType);
    if (!o) { tern_linear_free(l); return NULL; }
    o->l = l;
    return (PyObject *)o;
}
static tern_linear *lin_of(PyObject *o) {
    if (!PyObject_TypeCheck(o, &LinType)) { PyErr_SetString(PyExc_TypeError, "not a tern layer"); return NULL; }
    return ((LinObj *)o)->l;
}
/* optional buffer: None -> NULL */
static int opt_buf(PyObject *o, Py_buffer *b) {
    if (o == Py_None) { b->buf = NULL; b->obj = NULL; return 0; }
    return PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS);
}
static void rel(Py_buffer *b) { if (b->obj) PyBuffer_Release(b); }

static PyObject *py_linear_from_trits(PyObject *self, PyObject *args) {
    Py_buffer t, s, b = {0};
    long long n, k;
    int g;
    PyObject *bias;
    if (!PyArg_ParseTuple(args, "y*y*OLLi", &t, &s, &bias, &n, &k, &g)) return NULL;
    if (opt_buf(bias, &b)) { PyBuffer_Release(&t); PyBuffer_Release(&s); return NULL; }
    tern_linear *l = NULL;
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tern_linear_from_trits(t.buf, s.buf, b.buf, n, k, g, &l);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&t); PyBuffer_Release(&s); rel(&b);
    return st ? fail(st) : lin_wrap(l);
}
static PyObject *py_linear_from_mlx_2bit(PyObject *self, PyObject *args) {
    Py_buffer w, s, bi, b = {0};
    long long n, k;
    int g;
    PyObject *bias;
    if (!PyArg_ParseTuple(args, "y*y*y*OLLi", &w, &s, &bi, &bias, &n, &k, &g)) return NULL;
    if (opt_buf(bias, &b)) { PyBuffer_Release(&w); PyBuffer_Release(&s); PyBuffer_Release(&bi); return NULL; }
    tern_linear *l = NULL;
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tern_linear_from_mlx_2bit(w.buf, s.buf, bi.buf, b.buf, n, k, g, &l);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&w); PyBuffer_Release(&s); PyBuffer_Release(&bi); rel(&b);
    return st ? fail(st) : lin_wrap(l);
}
static PyObject *py_linear_from_gguf(PyObject *self, PyObject *args) {
    const char *path, *name;
    PyObject *bias;
    Py_buffer b = {0};
    if (!PyArg_ParseTuple(args, "ssO", &path, &name, &bias)) return NULL;
    if (opt_buf(bias, &b)) return NULL;
    tern_linear *l = NULL;
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tern_linear_from_gguf(path, name, b.buf, &l);
    Py_END_ALLOW_THREADS
    rel(&b);
    return st ? fail(st) : lin_wrap(l);
}
static PyObject *py_linear_shape(PyObject *self, PyObject *o) {
    tern_linear *l = lin_of(o);
    if (!l) return NULL;
    return Py_BuildValue("LL", (long long)tern_linear_n_out(l), (long long)tern_linear_n_in(l));
}
/* forward(layer, x f32 [batch, n_in] C-contig, y f32 [batch, n_out] writable, batch) */
static PyObject *py_linear_forward(PyObject *self, PyObject *args) {
    PyObject *lo;
    Py_buffer x, y;
    Py_ssize_t batch;
    if (!PyArg_ParseTuple(args, "Oy*w*n", &lo, &x, &y, &batch)) return NULL;
    tern_linear *l = lin_of(lo);
    tern_status st = TERN_OK;
    if (l) {
        size_t k = (size_t)tern_linear_n_in(l), n = (size_t)tern_linear_n_out(l);
        if (batch < 0 || (size_t)x.len < (size_t)batch * k * 4 || (size_t)y.len < (size_t)batch * n * 4) {
            PyErr_SetString(PyExc_ValueError, "tern: buffer sizes do not match the layer");
            l = NULL;
        } else {
            Py_BEGIN_ALLOW_THREADS
            st = tern_linear_forward(l, x.buf, (size_t)batch, k, y.buf, n);
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&x); PyBuffer_Release(&y);
    if (!l) return NULL;
    if (st) return fail(st);
    Py_RETURN_NONE;
}
static PyObject *py_linear_dequantize(PyObject *self, PyObject *args) {
    PyObject *lo;
    Py_buffer y;
    if (!PyArg_ParseTuple(args, "Ow*", &lo, &y)) return NULL;
    tern_linear *l = lin_of(lo);
    tern_status st = TERN_OK;
    if (l) {
        if ((size_t)y.len < (size_t)tern_linear_n_in(l) * (size_t)tern_linear_n_out(l) * 4) {
            PyErr_SetString(PyExc_ValueError, "tern: output buffer too small");
            l = NULL;
        } else {
            Py_BEGIN_ALLOW_THREADS
            st = tern_linear_dequantize(l, y.buf);
            Py_END_ALLOW_THREADS
        }
    }
    PyBuffer_Release(&y);
    if (!l) return NULL;
    if (st) return fail(st);
    Py_RETURN_NONE;
}
static PyObject *py_set_threads(PyObject *self, PyObject *args) {
    int n;
    if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tern_set_threads(n);
    Py_END_ALLOW_THREADS
    if (st) return fail(st);
    Py_RETURN_NONE;
}
static PyObject *py_get_threads(PyObject *self, PyObject *a) { return PyLong_FromLong(tern_get_threads()); }
static PyObject *py_isa(PyObject *self, PyObject *a) { return PyUnicode_FromString(tern_kernel_isa()); }
static PyObject *py_version(PyObject *self, PyObject *a) { return PyUnicode_FromString(tern_version()); }
static PyObject *py_read_ceiling(PyObject *self, PyObject *args) {
    const char *dev;
    Py_ssize_t bytes;
    int passes;
    if (!PyArg_ParseTuple(args, "sni", &dev, &bytes, &passes)) return NULL;
    double r;
    Py_BEGIN_ALLOW_THREADS
    r = tern_device_read_ceiling_gbps(dev, (size_t)bytes, passes);
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble(r);
}

/* ------------------------------------------------------------ model
 * One object holds model + tokenizer + session + sampler; close() frees them
 * all. The Python class (tern.Model) serialises calls with a lock. */
typedef struct {
    PyObject_HEAD
    tern_model *m;
    tern_tokenizer *tok;
    tern_session *s;
    tern_sampler *smp;
    volatile int cancel;
    /* speculative decoding (set_spec): the drafter, a draft model's own model and
     * tokenizer, the most drafts a pass, and the last generate's counts */
    tern_drafter *drafter;
    tern_model *dm;
    tern_tokenizer *dtok;
    int spec_k;
    size_t spec_last[3];
} ModelObj;

static void spec_close_(ModelObj *o) {
    tern_drafter_free(o->drafter); o->drafter = NULL;
    tern_model_free(o->dm); o->dm = NULL;
    tern_tokenizer_free(o->dtok); o->dtok = NULL;
}

static void model_close_(ModelObj *o) {
    spec_close_(o);
    tern_sampler_free(o->smp); o->smp = NULL;
    tern_session_free(o->s); o->s = NULL;
    tern_tokenizer_free(o->tok); o->tok = NULL;
    tern_model_free(o->m); o->m = NULL;
}
static void model_dealloc(ModelObj *o) { model_close_(o); Py_TYPE(o)->tp_free((PyObject *)o); }
static PyTypeObject ModelType = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tern._tern.ModelHandle",
                                 .tp_basicsize = sizeof(ModelObj), .tp_flags = Py_TPFLAGS_DEFAULT,
                                 .tp_dealloc = (destructor)model_dealloc, .tp_new = NULL};
static ModelObj *model_of(PyObject *o) {
    if (!PyObject_TypeCheck(o, &ModelType)) { PyErr_SetString(PyExc_TypeError, "not a tern model"); return NULL; }
    ModelObj *m = (ModelObj *)o;
    if (!m->m) { PyErr_SetString(g_err_base, "tern: the model is closed"); return NULL; }
    return m;
}

/* model_load(path, device, threads, n_ctx, repack, cache_type) ("" = the default) */
static PyObject *py_model_load(PyObject *self, PyObject *args) {
    const char *path, *device, *cache = "";
    int threads, n_ctx, repack;
    if (!PyArg_ParseTuple(args, "ssiip|s", &path, &device, &threads, &n_ctx, &repack, &cache)) return NULL;
    tern_cache_type ct = TERN_CACHE_DEFAULT;
    if (*cache && tern_cache_type_parse(cache, &ct) != TERN_OK) {
        PyErr_SetString(PyExc_ValueError, tern_last_error());
        return NULL;
    }
    ModelObj *o = PyObject_New(ModelObj, &ModelType);
    if (!o) return NULL;
    o->m = NULL; o->tok = NULL; o->s = NULL; o->smp = NULL; o->cancel = 0;
    o->drafter = NULL; o->dm = NULL; o->dtok = NULL; o->spec_k = 0;
    o->spec_last[0] = o->spec_last[1] = o->spec_last[2] = 0;
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    tern_model_params mp;
    tern_model_params_default(&mp);
    mp.n_threads = threads;
    mp.device = device;
    mp.repack = repack;
    st = tern_tokenizer_load(path, &o->tok);
    if (!st) st = tern_model_load(path, &mp, &o->m);
    if (!st) {
        tern_session_params sp;
        tern_session_params_default(&sp);
        sp.n_ctx = n_ctx;
        sp.cache_type_k = sp.cache_type_v = ct;
        st = tern_session_new(o->m, &sp, &o->s);
    }
    if (st) model_close_(o);
    Py_END_ALLOW_THREADS
    if (st) { Py_DECREF(o); return fail(st); }
    return (PyObject *)o;
}
static PyObject *py_model_close(PyObject *self, PyObject *mo) {
    if (!PyObject_TypeCheck(mo, &ModelType)) { PyErr_SetString(PyExc_TypeError, "not a tern model"); return NULL; }
    model_close_((ModelObj *)mo);
    Py_RETURN_NONE;
}
static PyObject *py_model_info(PyObject *self, PyObject *mo) {
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    const tern_model_info *i = tern_model_get_info(o->m);
    return Py_BuildValue(
        "{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:O,s:K,s:K,s:K,s:s,s:s,s:K,s:i,s:K,s:s,s:i,s:i,s:s,s:K}",
        "arch", i->arch, "name", i->name, "format", i->format ? i->format : "",
        "weight_type", i->weight_type ? i->weight_type : "", "n_layers", i->n_layers, "n_embd", i->n_embd,
        "n_ff", i->n_ff, "n_vocab", i->n_vocab, "n_head", i->n_head, "n_head_kv", i->n_head_kv,
        "head_dim", i->head_dim, "n_ctx_train", i->n_ctx_train, "has_hadamard", i->has_hadamard ? Py_True : Py_False,
        "weight_bytes", (unsigned long long)i->weight_bytes,
        "decode_bytes_per_token", (unsigned long long)i->decode_bytes_per_token,
        "alloc_bytes", (unsigned long long)i->alloc_bytes, "device", i->device ? i->device : "",
        "device_name", i->device_name ? i->device_name : "", "device_bytes", (unsigned long long)i->device_bytes,
        "n_ctx", tern_session_n_ctx(o->s), "session_bytes", (unsigned long long)tern_session_memory(o->s),
        "tokenizer_pre", tern_tokenizer_pre(o->tok), "bos", (int)tern_tokenizer_bos(o->tok),
        "eos", (int)tern_tokenizer_eos(o->tok),
        "cache_type", tern_cache_type_name(tern_session_cache_type(o->s, false)),
        "cache_bytes_max", (unsigned long long)tern_session_cache_bytes(o->s, tern_session_n_ctx(o->s)));
}
static PyObject *ids_list(const tern_tokens *t) {
    PyObject *l = PyList_New((Py_ssize_t)t->n);
    if (!l) return NULL;
    for (size_t i = 0; i < t->n; i++) PyList_SET_ITEM(l, (Py_ssize_t)i, PyLong_FromLong(t->ids[i]));
    return l;
}
static PyObject *py_tokenize(PyObject *self, PyObject *args) {
    PyObject *mo;
    const char *text;
    Py_ssize_t len;
    int special;
    if (!PyArg_ParseTuple(args, "Os#p", &mo, &text, &len, &special)) return NULL;
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    tern_tokens t = {0};
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tern_tokenize(o->tok, text, (size_t)len, special, &t);
    Py_END_ALLOW_THREADS
    PyObject *r = st ? fail(st) : ids_list(&t);
    tern_tokens_free(&t);
    return r;
}
/* ids from a C-contiguous int32 buffer */
static PyObject *py_detokenize(PyObject *self, PyObject *args) {
    PyObject *mo;
    Py_buffer ids;
    if (!PyArg_ParseTuple(args, "Oy*", &mo, &ids)) return NULL;
    ModelObj *o = model_of(mo);
    if (!o) { PyBuffer_Release(&ids); return NULL; }
    tern_str s = {0};
    tern_status st = TERN_OK;
    size_t n = (size_t)ids.len / 4;
    const int32_t *p = ids.buf;
    int32_t nv = tern_tokenizer_n_vocab(o->tok);
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0 || p[i] >= nv) {
            PyBuffer_Release(&ids);
            return PyErr_Format(g_err_value, "tern: token id %d out of range (vocabulary %d)", (int)p[i], (int)nv);
        }
    Py_BEGIN_ALLOW_THREADS
    st = tern_detokenize(o->tok, p, n, &s);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    PyObject *r = st ? fail(st) : PyBytes_FromStringAndSize(s.data ? s.data : "", (Py_ssize_t)s.len);
    tern_str_free(&s);
    return r;
}
/* eval(model, ids int32, out f32 [n, vocab] or None, reset) */
static PyObject *py_eval(PyObject *self, PyObject *args) {
    PyObject *mo, *outo;
    Py_buffer ids, out = {0};
    int reset;
    if (!PyArg_ParseTuple(args, "Oy*Op", &mo, &ids, &outo, &reset)) return NULL;
    ModelObj *o = model_of(mo);
    if (!o) { PyBuffer_Release(&ids); return NULL; }
    if (outo != Py_None && PyObject_GetBuffer(outo, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) {
        PyBuffer_Release(&ids);
        return NULL;
    }
    size_t n = (size_t)ids.len / 4, V = (size_t)tern_model_get_info(o->m)->n_vocab;
    if (out.obj && (size_t)out.len < n * V * 4) {
        PyBuffer_Release(&ids); rel(&out);
        PyErr_SetString(PyExc_ValueError, "tern: logits buffer too small");
        return NULL;
    }
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    if (reset) tern_session_reset(o->s);
    st = tern_session_eval(o->s, ids.buf, n, out.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids); rel(&out);
    if (st) return fail(st);
    Py_RETURN_NONE;
}
static PyObject *py_pos(PyObject *self, PyObject *mo) {
    ModelObj *o = model_of(mo);
    return o ? PyLong_FromLong(tern_session_pos(o->s)) : NULL;
}
static PyObject *py_reset(PyObject *self, PyObject *mo) {
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    tern_session_reset(o->s);
    Py_RETURN_NONE;
}

typedef struct { PyObject *cb; int failed; } gen_cb;
static bool gen_on_text(const char *text, size_t len, void *user) {
    gen_cb *c = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *b = PyBytes_FromStringAndSize(text, (Py_ssize_t)len);
    PyObject *r = b ? PyObject_CallOneArg(c->cb, b) : NULL;
    Py_XDECREF(b);
    bool ok = r != NULL && r != Py_False;
    if (!r) c->failed = 1; /* the exception stays set for the caller */
    Py_XDECREF(r);
    PyGILState_Release(g);
    return ok;
}
/* generate(model, prompt int32, reset, max_tokens, temp, top_p, top_k, min_p, repeat_penalty,
 *          presence_penalty, frequency_penalty, penalty_last_n, seed, stops (tuple of bytes),
 *          callback or None) -> (text bytes, ids list, reason, n_prompt, prompt_s, gen_s).
 * The Python layer (tern/_model.py) checks the ranges and fills the defaults; the
 * sampler checks them again (tern.ValueError). */
static PyObject *py_generate(PyObject *self, PyObject *args) {
    PyObject *mo, *stops, *cb;
    Py_buffer ids;
    int reset, max_tokens, top_k, last_n;
    float temp, top_p, min_p, rp, presence, freq;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "Oy*piffiffffiKO!O", &mo, &ids, &reset, &max_tokens, &temp, &top_p, &top_k,
                          &min_p, &rp, &presence, &freq, &last_n, &seed, &PyTuple_Type, &stops, &cb))
        return NULL;
    ModelObj *o = model_of(mo);
    if (!o) { PyBuffer_Release(&ids); return NULL; }
    Py_ssize_t ns = PyTuple_GET_SIZE(stops);
    const char **sv = PyMem_Calloc(ns ? (size_t)ns : 1, sizeof *sv);
    if (!sv) { PyBuffer_Release(&ids); return PyErr_NoMemory(); }
    for (Py_ssize_t i = 0; i < ns; i++) {
        PyObject *it = PyTuple_GET_ITEM(stops, i);
        if (!PyBytes_Check(it)) {
            PyMem_Free(sv); PyBuffer_Release(&ids);
            PyErr_SetString(PyExc_TypeError, "stop strings must be bytes");
            return NULL;
        }
        sv[i] = PyBytes_AS_STRING(it);
    }
    tern_sampler_params sp;
    tern_sampler_params_default(&sp);
    sp.temperature = temp; sp.top_p = top_p; sp.top_k = top_k; sp.min_p = min_p;
    sp.repeat_penalty = rp; sp.presence_penalty = presence; sp.frequency_penalty = freq;
    sp.penalty_last_n = last_n; sp.seed = seed;
    tern_sampler *smp = NULL;
    tern_status st = tern_sampler_new(&sp, tern_model_get_info(o->m)->n_vocab, &smp);
    if (st) { PyMem_Free(sv); PyBuffer_Release(&ids); return fail(st); }
    gen_cb c = {cb, 0};
    o->cancel = 0;
    tern_gen_params gp = {max_tokens, sv, (size_t)ns, cb == Py_None ? NULL : gen_on_text, &c, &o->cancel};
    gp.drafter = o->drafter;
    gp.spec_k = o->spec_k;
    tern_gen_result res;
    memset(&res, 0, sizeof res);
    Py_BEGIN_ALLOW_THREADS
    if (reset) tern_session_reset(o->s);
    st = tern_generate(o->s, o->tok, smp, ids.buf, (size_t)ids.len / 4, &gp, &res);
    Py_END_ALLOW_THREADS
    tern_sampler_free(smp);
    PyMem_Free(sv);
    PyBuffer_Release(&ids);
    o->spec_last[0] = res.spec_drafted, o->spec_last[1] = res.spec_accepted, o->spec_last[2] = res.spec_steps;
    PyObject *r = NULL;
    if (c.failed) {
        /* the callback raised: keep its exception */
    } else if (st) {
        fail(st);
    } else {
        PyObject *l = ids_list(&res.tokens);
        if (l)
            r = Py_BuildValue("(y#Nsndd)", res.text.data ? res.text.data : "", (Py_ssize_t)res.text.len, l,
                              tern_stop_reason_str(res.reason), (Py_ssize_t)res.n_prompt, res.prompt_s, res.gen_s);
    }
    tern_gen_result_free(&res);
    return r;
}
static PyObject *py_cancel(PyObject *self, PyObject *mo) {
    if (!PyObject_TypeCheck(mo, &ModelType)) { PyErr_SetString(PyExc_TypeError, "not a tern model"); return NULL; }
    ((ModelObj *)mo)->cancel = 1;
    Py_RETURN_NONE;
}

/* chat_tokenize(model, messages: list of (role, content|None, reasoning|None, [(name, args)]),
 *               tools_json or None, thinking (0 or 1; the Python layer resolves the default:
 *               tern.chat.thinking, else the format's)) -> (ids, thinking_open, format) */
static PyObject *py_chat_tokenize(PyObject *self, PyObject *args) {
    PyObject *mo, *msgs;
    const char *tools;
    int thinking;
    if (!PyArg_ParseTuple(args, "OO!zi", &mo, &PyList_Type, &msgs, &tools, &thinking)) return NULL;
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(msgs);
    tern_chat_msg *m = PyMem_Calloc(n ? (size_t)n : 1, sizeof *m);
    size_t ncalls = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyTuple_Check(PyList_GET_ITEM(msgs, i)) ? PyTuple_GetItem(PyList_GET_ITEM(msgs, i), 3) : NULL;
        if (c && PyList_Check(c)) ncalls += (size_t)PyList_GET_SIZE(c);
    }
    tern_tool_call *calls = PyMem_Calloc(ncalls ? ncalls : 1, sizeof *calls);
    PyObject *r = NULL;
    if (!m || !calls) { PyErr_NoMemory(); goto done; }
    size_t ci = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GET_ITEM(msgs, i), *tc;
        if (!PyTuple_Check(t) ||
            !PyArg_ParseTuple(t, "zzzO!", &m[i].role, &m[i].content, &m[i].reasoning_content, &PyList_Type, &tc)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad message");
            goto done;
        }
        if (!m[i].role) { PyErr_SetString(PyExc_ValueError, "tern: a message has no role"); goto done; }
        m[i].tool_calls = calls + ci;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(tc); j++) {
            if (!PyArg_ParseTuple(PyList_GET_ITEM(tc, j), "ss", &calls[ci].name, &calls[ci].arguments)) goto done;
            ci++;
            m[i].n_tool_calls++;
        }
    }
    tern_chat_format fmt = tern_chat_format_for(o->tok);
    bool think = thinking == 1;
    tern_chat_opts co = {tools, true, think};
    tern_tokens ids = {0};
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tern_chat_tokenize(o->tok, fmt, m, (size_t)n, &co, &ids);
    Py_END_ALLOW_THREADS
    if (st) fail(st);
    else {
        PyObject *l = ids_list(&ids);
        if (l) r = Py_BuildValue("(NOi)", l, (think && fmt == TERN_CHAT_QWEN35) ? Py_True : Py_False, (int)fmt);
    }
    tern_tokens_free(&ids);
done:
    PyMem_Free(m);
    PyMem_Free(calls);
    return r;
}
/* chat_parse(model, text bytes, thinking_open) -> (reasoning, content, [(name, args)]) */
static PyObject *py_chat_parse(PyObject *self, PyObject *args) {
    PyObject *mo;
    const char *text;
    Py_ssize_t len;
    int open_;
    if (!PyArg_ParseTuple(args, "Oy#p", &mo, &text, &len, &open_)) return NULL;
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    tern_chat_reply rep;
    memset(&rep, 0, sizeof rep);
    tern_status st = tern_chat_parse(tern_chat_format_for(o->tok), text, (size_t)len, open_, &rep);
    if (st) return fail(st);
    PyObject *calls = PyList_New(0);
    for (size_t i = 0; calls && i < rep.n_tool_calls; i++) {
        PyObject *t = Py_BuildValue("(ss)", rep.tool_calls[i].name, rep.tool_calls[i].arguments);
        if (!t || PyList_Append(calls, t)) { Py_XDECREF(t); Py_CLEAR(calls); break; }
        Py_DECREF(t);
    }
    PyObject *r = calls ? Py_BuildValue("(yyN)", rep.reasoning ? rep.reasoning : "",
                                        rep.content ? rep.content : "", calls)
                        : NULL;
    tern_chat_reply_free(&rep);
    return r;
}
static PyObject *py_chat_format(PyObject *self, PyObject *mo) {
    ModelObj *o = model_of(mo);
    return o ? PyLong_FromLong((long)tern_chat_format_for(o->tok)) : NULL;
}
/* model_meta(model, key, kind) -> the value of a GGUF metadata key, None when absent.
 * kind: "bool", "int" (tern_model_meta_i64), "float" (_f32: a float or an integer
 * value), "str", or "" = the key's own type (tried as bool, str, int, float; arrays
 * raise). A value of another type than kind raises tern.ValueError naming the key. */
static PyObject *py_model_meta(PyObject *self, PyObject *args) {
    PyObject *mo;
    const char *key, *kind;
    if (!PyArg_ParseTuple(args, "Oss", &mo, &key, &kind)) return NULL;
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    bool any = !*kind;
    if (!any && strcmp(kind, "bool") && strcmp(kind, "int") && strcmp(kind, "float") && strcmp(kind, "str"))
        return PyErr_Format(PyExc_ValueError, "tern: meta type must be bool, int, float, str or None, not '%s'", kind);
    tern_status st = TERN_ERR_FORMAT;
    if (any || !strcmp(kind, "bool")) {
        bool b = false;
        st = tern_model_meta_bool(o->m, key, &b);
        if (st == TERN_OK) return PyBool_FromLong(b);
        if (st == TERN_ERR_NOT_FOUND) Py_RETURN_NONE;
        if (!any) return fail(st);
    }
    if (any || !strcmp(kind, "str")) {
        tern_str v = {0};
        st = tern_model_meta_str(o->m, key, &v);
        PyObject *r = NULL;
        if (st == TERN_OK) r = PyUnicode_DecodeUTF8(v.data ? v.data : "", (Py_ssize_t)v.len, "replace");
        tern_str_free(&v);
        if (st == TERN_OK) return r;
        if (st == TERN_ERR_NOT_FOUND) Py_RETURN_NONE;
        if (!any) return fail(st);
    }
    if (any || !strcmp(kind, "int")) {
        int64_t i = 0;
        st = tern_model_meta_i64(o->m, key, &i);
        if (st == TERN_OK) return PyLong_FromLongLong((long long)i);
        if (st == TERN_ERR_NOT_FOUND) Py_RETURN_NONE;
        if (!any) return fail(st);
    }
    float f = 0;
    st = tern_model_meta_f32(o->m, key, &f);
    if (st == TERN_OK) return PyFloat_FromDouble((double)f);
    if (st == TERN_ERR_NOT_FOUND) Py_RETURN_NONE;
    if (any) return PyErr_Format(g_err_value, "tern: metadata key '%s' is not a bool, string or number", key);
    return fail(st);
}
static PyObject *py_chat_template(PyObject *self, PyObject *mo) {
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    const char *t = tern_tokenizer_chat_template(o->tok);
    if (!t) Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(t, (Py_ssize_t)strlen(t), "replace");
}

/* embed(model, ids int32, out f32 [n_embd] or [n, n_embd], pooling 0..3, normalize): from an
 * empty context (the session is reset first) */
static PyObject *py_embed(PyObject *self, PyObject *args) {
    PyObject *mo;
    Py_buffer ids, out = {0};
    int pooling, normalize;
    if (!PyArg_ParseTuple(args, "Oy*w*ip", &mo, &ids, &out, &pooling, &normalize)) return NULL;
    ModelObj *o = model_of(mo);
    size_t n = (size_t)ids.len / 4, E = o ? (size_t)tern_model_get_info(o->m)->n_embd : 0;
    if (!o || (size_t)out.len < (pooling == TERN_POOLING_NONE ? n : 1) * E * 4) {
        PyBuffer_Release(&ids);
        PyBuffer_Release(&out);
        if (o) PyErr_SetString(PyExc_ValueError, "tern: embedding buffer too small");
        return NULL;
    }
    tern_status st;
    Py_BEGIN_ALLOW_THREADS
    tern_session_reset(o->s);
    st = tern_session_embed(o->s, ids.buf, n, (tern_pooling)pooling, normalize, out.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&ids);
    PyBuffer_Release(&out);
    if (st) return fail(st);
    Py_RETURN_NONE;
}

/* set_spec(model, kind: "" (off) | "ngram" | "draft", draft_path or "", k, device, threads):
 * speculative decoding for the model's generate (tern.Model(spec=...)). */
static PyObject *py_set_spec(PyObject *self, PyObject *args) {
    PyObject *mo;
    const char *kind, *path, *device;
    int k, threads;
    if (!PyArg_ParseTuple(args, "Ossisi", &mo, &kind, &path, &k, &device, &threads)) return NULL;
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    spec_close_(o);
    o->spec_k = k;
    tern_status st = TERN_OK;
    Py_BEGIN_ALLOW_THREADS
    if (!strcmp(kind, "ngram")) {
        st = tern_drafter_ngram_new(0, 0, &o->drafter);
    } else if (!strcmp(kind, "draft")) {
        tern_model_params mp;
        tern_model_params_default(&mp);
        mp.device = *device ? device : NULL;
        mp.n_threads = threads;
        st = tern_tokenizer_load(path, &o->dtok);
        if (!st) st = tern_model_load(path, &mp, &o->dm);
        if (!st) st = tern_drafter_model_new(o->dm, o->dtok, o->tok, tern_session_n_ctx(o->s), &o->drafter);
    }
    Py_END_ALLOW_THREADS
    if (st) {
        spec_close_(o);
        return fail(st);
    }
    Py_RETURN_NONE;
}
/* spec_stats(model) -> (drafted, accepted, verify passes) of the last generate. */
static PyObject *py_spec_stats(PyObject *self, PyObject *mo) {
    ModelObj *o = model_of(mo);
    if (!o) return NULL;
    return Py_BuildValue("(nnn)", (Py_ssize_t)o->spec_last[0], (Py_ssize_t)o->spec_last[1], (Py_ssize_t)o->spec_last[2]);
}

static PyMethodDef methods[] = {
    {"set_spec", py_set_spec, METH_VARARGS, NULL},
    {"spec_stats", py_spec_stats, METH_O, NULL},
    {"linear_from_trits", py_linear_from_trits, METH_VARARGS, NULL},
    {"linear_from_mlx_2bit", py_linear_from_mlx_2bit, METH_VARARGS, NULL},
    {"linear_from_gguf", py_linear_from_gguf, METH_VARARGS, NULL},
    {"linear_shape", py_linear_shape, METH_O, NULL},
    {"linear_forward", py_linear_forward, METH_VARARGS, NULL},
    {"linear_dequantize", py_linear_dequantize, METH_VARARGS, NULL},
    {"set_threads", py_set_threads, METH_VARARGS, NULL},
    {"get_threads", py_get_threads, METH_NOARGS, NULL},
    {"kernel_isa", py_isa, METH_NOARGS, NULL},
    {"version", py_version, METH_NOARGS, NULL},
    {"read_ceiling_gbps", py_read_ceiling, METH_VARARGS, NULL},
    {"model_load", py_model_load, METH_VARARGS, NULL},
    {"model_close", py_model_close, METH_O, NULL},
    {"model_info", py_model_info, METH_O, NULL},
    {"tokenize", py_tokenize, METH_VARARGS, NULL},
    {"detokenize", py_detokenize, METH_VARARGS, NULL},
    {"eval", py_eval, METH_VARARGS, NULL},
    {"pos", py_pos, METH_O, NULL},
    {"reset", py_reset, METH_O, NULL},
    {"generate", py_generate, METH_VARARGS, NULL},
    {"cancel", py_cancel, METH_O, NULL},
    {"chat_tokenize", py_chat_tokenize, METH_VARARGS, NULL},
    {"chat_parse", py_chat_parse, METH_VARARGS, NULL},
    {"chat_template", py_chat_template, METH_O, NULL},
    {"chat_format", py_chat_format, METH_O, NULL},
    {"model_meta", py_model_meta, METH_VARARGS, NULL},
    {"embed", py_embed, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "tern._tern", "libtern bindings", -1, methods};

PyMODINIT_FUNC PyInit__tern(void) {
    if (PyType_Ready(&LinType) < 0 || PyType_Ready(&ModelType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    g_err_base = PyErr_NewException("tern.Error", PyExc_Exception, NULL);
    PyObject *vb = PyTuple_Pack(2, g_err_base, PyExc_ValueError);
    g_err_value = PyErr_NewException("tern.ValueError", vb, NULL);
    Py_DECREF(vb);
    PyObject *ib = PyTuple_Pack(2, g_err_base, PyExc_OSError);
    g_err_io = PyErr_NewException("tern.IOError", ib, NULL);
    Py_DECREF(ib);
    g_err_ctx = PyErr_NewException("tern.ContextFullError", g_err_base, NULL);
    PyModule_AddObject(m, "Error", Py_NewRef(g_err_base));
    PyModule_AddObject(m, "TernValueError", Py_NewRef(g_err_value));
    PyModule_AddObject(m, "TernIOError", Py_NewRef(g_err_io));
    PyModule_AddObject(m, "ContextFullError", Py_NewRef(g_err_ctx));
    return m;
}
