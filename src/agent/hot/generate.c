/*
 * generate.c - one generation as rows: what a generate() call was asked (batch size, prompt
 * length, from its input ids), what its forwards took (the first is the prefill, the others
 * decode forwards, one per new token), what it returned (new tokens), and the bytes of the KV
 * cache its last forward handed back; see generate.h.
 *
 * Per forward the work is two clock values the caller already read, one ring push and one
 * attribute read of the output (its past_key_values, kept as a reference to size at the end);
 * everything else happens once per call. Nothing here allocates on a forward.
 */
#include "generate.h"

#include "clock.h"
#include "generations.h"
#include "serve.h"
#include "step.h"
#include "torch_state.h"

#include <math.h>

typedef struct pb_generation {
    int depth;             /* generate() calls running on this thread, nested ones included */
    pb_generation_row row; /* the outermost one's, filled as it goes */
    int64_t start_ns, last_end_ns;
    PyObject *cache;       /* owned or NULL: the last forward's past_key_values */
} pb_generation;

static __thread pb_generation gen;
static int64_t next_id = 1; /* [GIL held] */

int pb_generate_active(void) { return gen.depth > 0; }

int64_t pb_generate_made(void)
{
    const pb_generation_row *r = &gen.row;
    if (r->batch_size == INT64_MIN || r->new_tokens == INT64_MIN) return INT64_MIN;
    return r->batch_size * r->new_tokens;
}

/* A tensor's shape[dim] as an integer, or -1 when o is not a tensor of that rank. */
static int64_t dim_of(PyObject *o, int dim)
{
    if (!o || !pb_torch.tensor_type || !PyObject_TypeCheck(o, pb_torch.tensor_type)) return -1;
    PyObject *shape = PyObject_GetAttrString(o, "shape");
    int64_t v = -1;
    if (shape && PyTuple_Check(shape) && PyTuple_GET_SIZE(shape) > dim) v = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, dim));
    Py_XDECREF(shape);
    PyErr_Clear();
    return v;
}

/* The keyword argument `name` of a vectorcall, borrowed, or NULL. */
static PyObject *keyword(PyObject *const *args, size_t nargsf, PyObject *kwnames, const char *name)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i), name) == 0) return args[nargs + i];
    return NULL;
}

int pb_generate_begin(PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (gen.depth++ > 0) return 0;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    pb_generation_row *r = &gen.row;
    memset(r, 0, sizeof *r);
    r->id = next_id++;
    r->step = pb_step_current();
    r->thread_id = (int64_t)PyThread_get_thread_ident();
    r->start_unix = pb_wall_s();
    r->rank = pb_step_rank();
    r->ttft_s = NAN;
    r->kv_cache_bytes = r->batch_size = r->prompt_tokens = r->new_tokens = INT64_MIN;
    r->request = pb_serve_request_id();
    PyObject *ids = PyVectorcall_NARGS(nargsf) >= 2 ? args[1] : NULL; /* generate(self, inputs, ...) */
    if (!ids) ids = keyword(args, nargsf, kwnames, "input_ids");
    if (!ids) ids = keyword(args, nargsf, kwnames, "inputs");
    int64_t batch = dim_of(ids, 0), length = dim_of(ids, 1);
    if (batch >= 0 && length >= 0) {
        r->batch_size = batch;
        r->prompt_tokens = length;
    }
    if (pb_torch.is_grad_enabled) {
        PyObject *g = PyObject_CallNoArgs(pb_torch.is_grad_enabled);
        r->grad = g == Py_True;
        Py_XDECREF(g);
    }
    PyErr_Clear();
    Py_CLEAR(gen.cache);
    gen.start_ns = gen.last_end_ns = pb_now_ns();
    PyErr_Restore(et, ev, tb);
    return 1;
}

/* The name of the cache field of an output type: `cache` where the type has it (transformers 5.x,
 * whose past_key_values is a property that logs a deprecation warning when read), else
 * `past_key_values`. Decided once per type (the last one seen). */
static PyObject *cache_field(PyTypeObject *type)
{
    static PyTypeObject *seen; /* owned */
    static PyObject *name, *str_cache, *str_past;
    if (!str_cache && !(str_cache = PyUnicode_InternFromString("cache"))) PyErr_Clear();
    if (!str_past && !(str_past = PyUnicode_InternFromString("past_key_values"))) PyErr_Clear();
    if (type != seen) {
        Py_INCREF(type); /* kept: the pointer is compared */
        Py_XSETREF(seen, type);
        name = str_cache && PyObject_HasAttr((PyObject *)type, str_cache) ? str_cache : str_past;
        PyErr_Clear();
    }
    return name ? name : str_past; /* NULL only when interning failed: no cache read */
}

void pb_generate_forward(PyObject *output, int64_t start_ns, int64_t end_ns)
{
    if (gen.depth <= 0 || !output) return;
    pb_generation_row *r = &gen.row;
    pb_token_row t = {
        .generation = r->id,
        .index = r->forwards,
        .position = r->prompt_tokens == INT64_MIN ? INT64_MIN : r->prompt_tokens + r->forwards,
        .forward_ns = end_ns - start_ns,
        .latency_ns = end_ns - gen.last_end_ns,
        .thread_id = r->thread_id,
        .kind = r->forwards > 0,
        .rank = r->rank,
    };
    if (r->forwards++ == 0) {
        r->prefill_ns = t.forward_ns;
        r->ttft_s = (double)(end_ns - gen.start_ns) / 1e9;
    } else {
        r->decode_ns += t.forward_ns;
    }
    gen.last_end_ns = end_ns;
    pb_generations_push_token(&t);
    if (!pb_torch.tensor_type || PyObject_TypeCheck(output, pb_torch.tensor_type)) return;
    PyObject *field = cache_field(Py_TYPE(output));
    PyObject *cache = field ? PyObject_GetAttr(output, field) : NULL; /* ModelOutput's field */
    if (!cache) {
        PyErr_Clear();
        return;
    }
    if (cache == Py_None) {
        Py_DECREF(cache);
        return;
    }
    Py_XSETREF(gen.cache, cache); /* DynamicCache is updated in place: usually the same object */
}

/* Bytes of a tensor (its nbytes), 0 for anything else. */
static int64_t tensor_bytes(PyObject *o)
{
    if (!o || !PyObject_TypeCheck(o, pb_torch.tensor_type)) return 0;
    PyObject *n = PyObject_GetAttrString(o, "nbytes");
    int64_t v = n ? PyLong_AsLongLong(n) : 0;
    Py_XDECREF(n);
    if (v < 0) v = 0;
    PyErr_Clear();
    return v;
}

/* The sum of tensor_bytes over a sequence's items, and over their items (legacy tuples of (key,
 * value) per layer); -1 when seq is not a tuple or list. */
static int64_t sequence_bytes(PyObject *seq, int depth)
{
    if (!seq || !(PyTuple_Check(seq) || PyList_Check(seq))) return -1;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_ITEMS(seq)[i];
        if (depth > 0 && (PyTuple_Check(item) || PyList_Check(item))) total += sequence_bytes(item, depth - 1);
        else total += tensor_bytes(item);
    }
    return total;
}

/* Bytes of a cache's key and value tensors: a transformers Cache with `layers` (each with
 * `keys` and `values`), one with `key_cache` and `value_cache` lists (before 4.56), or the
 * legacy tuple of (key, value) per layer. -1 for a cache of another kind. */
static int64_t cache_bytes(PyObject *cache)
{
    int64_t total = -1;
    PyObject *layers = PyObject_GetAttrString(cache, "layers");
    if (layers && (PyList_Check(layers) || PyTuple_Check(layers))) {
        total = 0;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(layers); i++) {
            PyObject *layer = PySequence_Fast_ITEMS(layers)[i];
            PyObject *k = PyObject_GetAttrString(layer, "keys"), *v = k ? PyObject_GetAttrString(layer, "values") : NULL;
            PyErr_Clear();
            total += tensor_bytes(k) + tensor_bytes(v);
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
    }
    Py_XDECREF(layers);
    PyErr_Clear();
    if (total >= 0) return total;
    PyObject *keys = PyObject_GetAttrString(cache, "key_cache");
    PyObject *values = keys ? PyObject_GetAttrString(cache, "value_cache") : NULL;
    PyErr_Clear();
    int64_t kb = sequence_bytes(keys, 0), vb = sequence_bytes(values, 0);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    if (kb >= 0 && vb >= 0) return kb + vb;
    return sequence_bytes(cache, 1); /* legacy: ((key, value), ...) */
}

/* Whether the model is an encoder-decoder (its output starts with the decoder's start token). */
static int encoder_decoder(PyObject *self)
{
    PyObject *config = self ? PyObject_GetAttrString(self, "config") : NULL;
    PyObject *flag = config ? PyObject_GetAttrString(config, "is_encoder_decoder") : NULL;
    int yes = flag == Py_True;
    Py_XDECREF(flag);
    Py_XDECREF(config);
    PyErr_Clear();
    return yes;
}

void pb_generate_end(PyObject *self, PyObject *result)
{
    if (gen.depth <= 0 || --gen.depth > 0) return;
    int64_t now = pb_now_ns();
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    pb_generation_row *r = &gen.row;
    r->wall_ns = now - gen.start_ns;
    if (result && pb_torch.tensor_type) {
        PyObject *seq = NULL;
        if (PyObject_TypeCheck(result, pb_torch.tensor_type)) {
            seq = result;
            Py_INCREF(seq);
        } else {
            seq = PyObject_GetAttrString(result, "sequences"); /* return_dict_in_generate=True */
            PyErr_Clear();
        }
        int64_t out_len = dim_of(seq, 1);
        Py_XDECREF(seq);
        if (out_len >= 0) {
            int64_t made = encoder_decoder(self) ? out_len - 1 : r->prompt_tokens == INT64_MIN ? INT64_MIN : out_len - r->prompt_tokens;
            r->new_tokens = made;
        }
    }
    r->cache = gen.cache != NULL;
    if (gen.cache && pb_torch.tensor_type) {
        int64_t bytes = cache_bytes(gen.cache);
        if (bytes >= 0) r->kv_cache_bytes = bytes;
    }
    Py_CLEAR(gen.cache);
    PyErr_Clear();
    if (result) pb_generations_push(r);
    PyErr_Restore(et, ev, tb);
}
