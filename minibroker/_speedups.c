/* minibroker._speedups: C versions of small functions the producer calls once
 * per record. Each has a pure-Python twin that is used where this extension
 * was not built (setup.py builds it as optional) and that the tests hold it
 * to, value for value.
 *
 * wall_ms() -> int
 *     Wall-clock milliseconds since the epoch (CLOCK_REALTIME), what
 *     minibroker.clock.WallClock.now_ms returns: int(time.time() * 1000).
 *
 * murmur2(data) -> int
 *     Kafka's Utils.murmur2 of a bytes-like object, as a signed 32-bit int
 *     (minibroker.client.partitioner.murmur2_py): the hash that places keyed
 *     records on the partition a Kafka client would choose.
 *
 * RecordsWriter()
 *     The records section of one uncompressed Kafka v2 batch, built record by
 *     record: append(offset_delta, timestamp_ms, key, value, headers) encodes
 *     one DefaultRecord (timestamps as deltas to the first record's) into a
 *     buffer it owns, after room for the 61-byte batch header; records()
 *     returns the section as bytes; count, first_timestamp, max_timestamp and
 *     nbytes describe it. No object per record. finish(producer_id,
 *     producer_epoch, base_sequence, crc32c) writes the v2 header in front
 *     (base offset 0, leader epoch -1, attributes 0, the CRC32C that
 *     `crc32c(memoryview)` computes) and returns the whole batch: one copy.
 *     minibroker.records.RecordsBuilder is its Python face.
 *     Invariant: buf[HEADER:len] is `count` whole records.
 *
 * RecordRef(batch, index)
 *     Two read-only fields, `_batch` and `_index`: the base of the producer's
 *     RecordFuture (one per record sent), so that making one is a C
 *     allocation and not a Python __init__ call.
 *
 * SlotsMaker(cls, names)
 *     A callable that makes an instance of `cls` with its `names` slots (member
 *     descriptors of `cls`, object slots) set to the arguments, in order, and
 *     nothing else run: `cls(*values)` for a class whose __init__ only assigns
 *     those slots (the producer's RecordMetadata, a frozen dataclass whose
 *     __init__ assigns through object.__setattr__, one per awaited record).
 *     Its Python twin is `cls` itself.
 *
 * OpenAppend(batch_cls, future_cls, builder_cls, acc, now_ms, wakeup, headers, record_overhead)
 *     The producer's `send` one-pass append (minibroker.client.producer._OpenAppendPy
 *     is its Python twin): called (batch, key, value, max_request_size), it
 *     appends the record to `batch`, a partition's open batch, when the batch
 *     takes it (not closed, a builder, within its max_size), it is within
 *     max_request_size and the accumulator's buffer_memory has room: the
 *     builder's append (in C for `builder_cls`, RecordsWriter's own; a method
 *     call for any other builder), the batch's count, size, max_ts and
 *     mixed_ts and the accumulator's buffered_bytes set, `wakeup()` called if
 *     the batch is now full; returns a `future_cls(batch, index)` (a RecordRef
 *     class). None, with nothing changed, otherwise, or where a slot it reads
 *     is not a plain int: the caller's general path decides. The batch class's
 *     and the accumulator's slots are read and set in place (their offsets
 *     found once, as SlotsMaker's); `headers` is the empty header list passed
 *     to builders. A record's key and value are sized as `len` sizes them
 *     (its TypeError included) and appended as append takes them.
 *
 * decode_map(data) -> dict | None
 *     The msgpack map `data` holds, exactly as msgpack.unpackb(data, raw=False,
 *     strict_map_key=True, use_list=True) decodes it, or None wherever that
 *     call would fail or holds what is not decoded here (extension types,
 *     nesting deeper than 64, a top level that is not a map): the caller then
 *     asks msgpack, which decodes it or names the error. Short ASCII strings
 *     (map keys, topic names) come from a small cache of the str objects made
 *     before, so a response's keys are not made, hashed and interned anew each
 *     time. Its Python twin is `lambda data: None`.
 *
 * msgpack_objects(data, limit) -> int
 *     How many msgpack objects the one object encoded at the start of `data`
 *     holds (itself, and every element, key and value inside it), counted
 *     until the count passes `limit`: the count, limit + 1 when there are
 *     more, or -1 when `data` does not start with a complete object. Strings,
 *     binaries and extensions are skipped by their length, so a request of a
 *     few large batches costs a few steps however many bytes it has
 *     (minibroker.protocol.framing.msgpack_objects_py).
 *
 * check(node, value) -> value
 *     minibroker.protocol.schema's validation of one decoded message in one C
 *     call: `node` is a spec compiled to nested tuples by schema._node
 *     (INT, EXACT type, ANY, MAP, LIST, DICT of (name, node, required,
 *     default) fields, NONE_OR). Returns what the compiled Python validator
 *     returns (containers copied, only the spec's fields, defaults filled in)
 *     or raises `Invalid`, after which the caller walks the value again in
 *     Python to name the bad field. The recursion follows the spec, never the
 *     value, so its depth is the spec's. Used for frames small enough to
 *     decode on the event loop: it holds the GIL from start to end. It
 *     trusts its node: pass only nodes that check_spec(node) accepted
 *     (schema.validate does so once per spec).
 *
 * batch_headers(buf, cls, crc32c) -> list | None
 *     The headers of the concatenated v2 batches in `buf`, for a follower's
 *     append (minibroker.records.batch_headers): one `cls` per batch (a tuple
 *     subclass of 14 fields: position, size, then the header's fields in
 *     order, as records.BatchHeader), each batch's framing, structure and
 *     CRC32C (`crc32c(memoryview)`) checked as records.iter_batch_headers
 *     checks them. None at the first batch that fails a check: the Python
 *     twin then raises the error that names it.
 *
 * wall_ms, murmur2, msgpack_objects, check and batch_headers are stateless and allocate only their result.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <time.h>

static PyObject *wall_ms(PyObject *self, PyObject *noargs)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static PyObject *murmur2(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    const unsigned char *data = (const unsigned char *)view.buf;
    const Py_ssize_t length = view.len;
    const uint32_t m = 0x5bd1e995u;
    const int r = 24;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    const Py_ssize_t n4 = length / 4;
    for (Py_ssize_t i = 0; i < n4; i++) {
        const Py_ssize_t i4 = i * 4;
        uint32_t k = (uint32_t)data[i4] | ((uint32_t)data[i4 + 1] << 8) | ((uint32_t)data[i4 + 2] << 16)
                     | ((uint32_t)data[i4 + 3] << 24);
        k *= m;
        k ^= k >> r;
        k *= m;
        h *= m;
        h ^= k;
    }
    const Py_ssize_t tail = n4 * 4;
    switch (length % 4) {
    case 3:
        h ^= (uint32_t)data[tail + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[tail + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[tail];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* ---------------------------------------------------------------- RecordsWriter */

#define HEADER 61

typedef struct {
    PyObject_HEAD
    unsigned char *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
    Py_ssize_t count;
    long long first_ts;
    long long max_ts;
} RecordsWriter;

static inline int size_of_varlong(int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline unsigned char *put_varlong(unsigned char *p, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (unsigned char)(z | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

static int reserve(RecordsWriter *w, Py_ssize_t extra)
{
    if (w->len + extra <= w->cap)
        return 0;
    Py_ssize_t cap = w->cap ? w->cap : 4096 + HEADER;
    while (cap < w->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    unsigned char *nb = PyMem_Realloc(w->buf, (size_t)cap);
    if (nb == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    w->buf = nb;
    w->cap = cap;
    return 0;
}

/* A key or value: bytes-like or None (length -1). Fills *data and *n; *view is set
 * when a buffer had to be acquired (release it). */
static int bytes_field(PyObject *o, const char *what, Py_buffer *view, int *held, const char **data,
                       Py_ssize_t *n)
{
    *held = 0;
    if (o == Py_None) {
        *data = NULL;
        *n = -1;
        return 0;
    }
    if (PyBytes_CheckExact(o)) {
        *data = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyObject_CheckBuffer(o) && !PyUnicode_Check(o)) {
        if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) != 0)
            return -1;
        *held = 1;
        *data = (const char *)view->buf;
        *n = view->len;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "a record's %s must be bytes or None, not %.100s", what, Py_TYPE(o)->tp_name);
    return -1;
}

/* append's work once its two integers are read: 0, or -1 with an exception set (the buffer untouched). */
static int writer_add(RecordsWriter *w, long long offset_delta, long long ts, PyObject *key, PyObject *value,
                      PyObject *headers)
{
    Py_ssize_t nheaders = 0;
    if (headers != Py_None) {
        if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers)) {
            PyErr_SetString(PyExc_TypeError, "a record's headers must be a list of (str, bytes | None)");
            return -1;
        }
        nheaders = PySequence_Fast_GET_SIZE(headers);
    }
    Py_buffer kview, vview;
    int kheld, vheld;
    const char *k, *v;
    Py_ssize_t kn, vn;
    if (bytes_field(key, "key", &kview, &kheld, &k, &kn) != 0)
        return -1;
    if (bytes_field(value, "value", &vview, &vheld, &v, &vn) != 0) {
        if (kheld)
            PyBuffer_Release(&kview);
        return -1;
    }
    int result = -1;
    const long long ts_delta = w->count ? ts - w->first_ts : 0;
    Py_ssize_t body = 1 + size_of_varlong(ts_delta) + size_of_varlong(offset_delta)
                      + size_of_varlong(kn) + (kn > 0 ? kn : 0) + size_of_varlong(vn) + (vn > 0 ? vn : 0)
                      + size_of_varlong(nheaders);
    /* headers: validate and size them first, so a bad one leaves the buffer untouched */
    for (Py_ssize_t i = 0; i < nheaders; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(headers, i);
        if (!PyTuple_Check(h) || PyTuple_GET_SIZE(h) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(h, 0))) {
            PyErr_SetString(PyExc_TypeError, "a record header must be a (str, bytes | None) tuple");
            goto done;
        }
        Py_ssize_t hkn;
        if (PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &hkn) == NULL)
            goto done;
        PyObject *hv = PyTuple_GET_ITEM(h, 1);
        Py_ssize_t hvn = -1;
        if (hv != Py_None) {
            if (!PyBytes_Check(hv)) {
                PyErr_SetString(PyExc_TypeError, "a record header's value must be bytes or None");
                goto done;
            }
            hvn = PyBytes_GET_SIZE(hv);
        }
        body += size_of_varlong(hkn) + hkn + size_of_varlong(hvn) + (hvn > 0 ? hvn : 0);
    }
    if (reserve(w, body + 10) != 0)
        goto done;
    unsigned char *p = w->buf + w->len;
    p = put_varlong(p, body);
    *p++ = 0;                                   /* attributes */
    p = put_varlong(p, ts_delta);
    p = put_varlong(p, offset_delta);
    p = put_varlong(p, kn);
    if (kn > 0) {
        memcpy(p, k, (size_t)kn);
        p += kn;
    }
    p = put_varlong(p, vn);
    if (vn > 0) {
        memcpy(p, v, (size_t)vn);
        p += vn;
    }
    p = put_varlong(p, nheaders);
    for (Py_ssize_t i = 0; i < nheaders; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(headers, i);
        Py_ssize_t hkn;
        const char *hk = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(h, 0), &hkn);
        p = put_varlong(p, hkn);
        memcpy(p, hk, (size_t)hkn);
        p += hkn;
        PyObject *hv = PyTuple_GET_ITEM(h, 1);
        if (hv == Py_None) {
            p = put_varlong(p, -1);
        } else {
            Py_ssize_t hvn = PyBytes_GET_SIZE(hv);
            p = put_varlong(p, hvn);
            memcpy(p, PyBytes_AS_STRING(hv), (size_t)hvn);
            p += hvn;
        }
    }
    w->len = p - w->buf;
    if (w->count == 0) {
        w->first_ts = w->max_ts = ts;
    } else if (ts > w->max_ts) {
        w->max_ts = ts;
    }
    w->count++;
    result = 0;
done:
    if (kheld)
        PyBuffer_Release(&kview);
    if (vheld)
        PyBuffer_Release(&vview);
    return result;
}

static PyObject *writer_append(RecordsWriter *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "append(offset_delta, timestamp_ms, key, value, headers)");
        return NULL;
    }
    long long offset_delta = PyLong_AsLongLong(args[0]);
    if (offset_delta == -1 && PyErr_Occurred())
        return NULL;
    long long ts = PyLong_AsLongLong(args[1]);
    if (ts == -1 && PyErr_Occurred())
        return NULL;
    if (writer_add(w, offset_delta, ts, args[2], args[3], args[4]) != 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *writer_records(RecordsWriter *w, PyObject *noargs)
{
    return PyBytes_FromStringAndSize((const char *)w->buf + HEADER, w->len - HEADER);
}

static inline void put_be(unsigned char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
}

static PyObject *writer_finish(RecordsWriter *w, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "finish(producer_id, producer_epoch, base_sequence, crc32c)");
        return NULL;
    }
    long long pid = PyLong_AsLongLong(args[0]);
    long epoch = PyLong_AsLong(args[1]);
    long seq = PyLong_AsLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (w->count == 0) {
        PyErr_SetString(PyExc_ValueError, "a batch needs at least one record");
        return NULL;
    }
    unsigned char *h = w->buf;
    put_be(h, 0, 8);                                          /* base offset */
    put_be(h + 8, (uint64_t)(w->len - 12), 4);                /* batch length */
    put_be(h + 12, (uint64_t)(int64_t)-1, 4);                 /* partition leader epoch */
    h[16] = 2;                                                /* magic */
    put_be(h + 21, 0, 2);                                     /* attributes */
    put_be(h + 23, (uint64_t)(w->count - 1), 4);              /* last offset delta */
    put_be(h + 27, (uint64_t)w->first_ts, 8);
    put_be(h + 35, (uint64_t)w->max_ts, 8);
    put_be(h + 43, (uint64_t)pid, 8);
    put_be(h + 51, (uint64_t)(int64_t)epoch, 2);
    put_be(h + 53, (uint64_t)(int64_t)seq, 4);
    put_be(h + 57, (uint64_t)w->count, 4);
    PyObject *view = PyMemoryView_FromMemory((char *)h + 21, w->len - 21, PyBUF_READ);
    if (view == NULL)
        return NULL;
    PyObject *crc = PyObject_CallOneArg(args[3], view);
    Py_DECREF(view);
    if (crc == NULL)
        return NULL;
    unsigned long c = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (c == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    put_be(h + 17, c, 4);
    return PyBytes_FromStringAndSize((const char *)h, w->len);
}

static PyObject *writer_get_count(RecordsWriter *w, void *closure) { return PyLong_FromSsize_t(w->count); }
static PyObject *writer_get_nbytes(RecordsWriter *w, void *closure) { return PyLong_FromSsize_t(w->len - HEADER); }
static PyObject *writer_get_first(RecordsWriter *w, void *closure)
{
    return PyLong_FromLongLong(w->count ? w->first_ts : -1);
}
static PyObject *writer_get_max(RecordsWriter *w, void *closure)
{
    return PyLong_FromLongLong(w->count ? w->max_ts : -1);
}

static PyObject *writer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    RecordsWriter *w = (RecordsWriter *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    w->buf = NULL;
    w->len = w->cap = w->count = 0;
    w->first_ts = w->max_ts = -1;
    if (reserve(w, HEADER) != 0) {
        Py_DECREF(w);
        return NULL;
    }
    memset(w->buf, 0, HEADER);
    w->len = HEADER;
    return (PyObject *)w;
}

static void writer_dealloc(RecordsWriter *w)
{
    PyMem_Free(w->buf);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef writer_methods[] = {
    {"append", (PyCFunction)(void (*)(void))writer_append, METH_FASTCALL,
     "append(offset_delta, timestamp_ms, key, value, headers): encode one record."},
    {"records", (PyCFunction)writer_records, METH_NOARGS, "The records section so far, as bytes."},
    {"finish", (PyCFunction)(void (*)(void))writer_finish, METH_FASTCALL,
     "finish(producer_id, producer_epoch, base_sequence, crc32c): the whole v2 batch, as bytes."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef writer_getset[] = {
    {"count", (getter)writer_get_count, NULL, "records appended", NULL},
    {"nbytes", (getter)writer_get_nbytes, NULL, "bytes of the records section", NULL},
    {"first_timestamp", (getter)writer_get_first, NULL, "the first record's timestamp (-1: none yet)", NULL},
    {"max_timestamp", (getter)writer_get_max, NULL, "the largest timestamp appended (-1: none yet)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecordsWriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minibroker._speedups.RecordsWriter",
    .tp_basicsize = sizeof(RecordsWriter),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The records section of one uncompressed Kafka v2 batch, appended record by record.",
    .tp_methods = writer_methods,
    .tp_getset = writer_getset,
    .tp_new = writer_new,
};

/* ---------------------------------------------------------------- RecordRef */

#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *batch;
    Py_ssize_t index;
} RecordRef;

static PyObject *ref_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs)) || PyTuple_GET_SIZE(args) != 2) {
        PyErr_SetString(PyExc_TypeError, "RecordRef(batch, index)");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(PyTuple_GET_ITEM(args, 1));
    if (index == -1 && PyErr_Occurred())
        return NULL;
    RecordRef *r = (RecordRef *)type->tp_alloc(type, 0);
    if (r == NULL)
        return NULL;
    r->batch = Py_NewRef(PyTuple_GET_ITEM(args, 0));
    r->index = index;
    return (PyObject *)r;
}

static int ref_traverse(RecordRef *r, visitproc visit, void *arg)
{
    Py_VISIT(r->batch);
    return 0;
}

static int ref_clear(RecordRef *r)
{
    Py_CLEAR(r->batch);
    return 0;
}

/* Also the base dealloc of Python subclasses: their subtype_dealloc owns the
 * reference to the (heap) subclass, so this never touches the type. */
static void ref_dealloc(RecordRef *r)
{
    PyObject_GC_UnTrack(r);
    ref_clear(r);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyMemberDef ref_members[] = {
    {"_batch", T_OBJECT, offsetof(RecordRef, batch), READONLY, "the record's batch"},
    {"_index", T_PYSSIZET, offsetof(RecordRef, index), READONLY, "the record's position in its batch"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject RecordRefType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minibroker._speedups.RecordRef",
    .tp_basicsize = sizeof(RecordRef),
    .tp_dealloc = (destructor)ref_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A record's place in its batch: the producer's RecordFuture base.",
    .tp_traverse = (traverseproc)ref_traverse,
    .tp_clear = (inquiry)ref_clear,
    .tp_members = ref_members,
    .tp_new = ref_new,
};

/* ---------------------------------------------------------------- SlotsMaker */

#define MAKER_MAX_SLOTS 16

/* The offset in `tp`'s instances of its writable object slot `name` (a __slots__ entry), or -1 with
 * TypeError (naming `who`) when `name` is not one. */
static int slot_offset(PyTypeObject *tp, PyObject *name, const char *who, Py_ssize_t *offset)
{
    PyObject *d = PyObject_GetAttr((PyObject *)tp, name);
    if (d == NULL)
        return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type)
        && PyType_IsSubtype(tp, PyDescr_TYPE(d))
        && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX
        && !(((PyMemberDescrObject *)d)->d_member->flags & READONLY);
    if (ok)
        *offset = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: %R is not an object slot of %s", who, name, tp->tp_name);
        return -1;
    }
    return 0;
}

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    Py_ssize_t n;
    Py_ssize_t offsets[MAKER_MAX_SLOTS];
    vectorcallfunc vectorcall;
} SlotsMaker;

static PyObject *maker_call(SlotsMaker *mk, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != mk->n || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "%s maker takes %zd positional arguments", mk->cls->tp_name, mk->n);
        return NULL;
    }
    PyObject *obj = mk->cls->tp_alloc(mk->cls, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        *(PyObject **)((char *)obj + mk->offsets[i]) = Py_NewRef(args[i]);
    return obj;
}

static PyObject *maker_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *cls, *names;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "SlotsMaker(cls, names) takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!:SlotsMaker", &PyType_Type, &cls, &PyTuple_Type, &names))
        return NULL;
    PyTypeObject *tp = (PyTypeObject *)cls;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (n > MAKER_MAX_SLOTS || tp->tp_alloc != PyType_GenericAlloc
            || tp->tp_new != PyBaseObject_Type.tp_new || tp->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "SlotsMaker: %s is not a plain class with at most %d slots",
                     tp->tp_name, MAKER_MAX_SLOTS);
        return NULL;
    }
    SlotsMaker *mk = (SlotsMaker *)type->tp_alloc(type, 0);
    if (mk == NULL)
        return NULL;
    mk->cls = (PyTypeObject *)Py_NewRef(cls);
    mk->n = n;
    mk->vectorcall = (vectorcallfunc)maker_call;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slot_offset(tp, PyTuple_GET_ITEM(names, i), "SlotsMaker", &mk->offsets[i]) != 0) {
            Py_DECREF(mk);
            return NULL;
        }
    }
    return (PyObject *)mk;
}

static int maker_traverse(SlotsMaker *mk, visitproc visit, void *arg)
{
    Py_VISIT(mk->cls);
    return 0;
}

static int maker_clear(SlotsMaker *mk)
{
    Py_CLEAR(mk->cls);
    return 0;
}

static void maker_dealloc(SlotsMaker *mk)
{
    PyObject_GC_UnTrack(mk);
    maker_clear(mk);
    Py_TYPE(mk)->tp_free((PyObject *)mk);
}

static PyTypeObject SlotsMakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minibroker._speedups.SlotsMaker",
    .tp_basicsize = sizeof(SlotsMaker),
    .tp_dealloc = (destructor)maker_dealloc,
    .tp_vectorcall_offset = offsetof(SlotsMaker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "SlotsMaker(cls, names): makes cls instances with those slots set to its arguments.",
    .tp_traverse = (traverseproc)maker_traverse,
    .tp_clear = (inquiry)maker_clear,
    .tp_new = maker_new,
};

/* ---------------------------------------------------------------- OpenAppend */

/* The slots OpenAppend reads and sets: its batch class's (minibroker.client.accumulator.ProducerBatch), then
 * its accumulator's (RecordAccumulator). */
enum { B_CLOSED, B_BUILDER, B_COUNT, B_SIZE, B_MAX_SIZE, B_FIRST_TS, B_MAX_TS, B_MIXED_TS, B_SLOTS };
enum { A_BUFFERED, A_MEMORY, A_SLOTS };
static const char *const batch_slots[B_SLOTS] = {
    "closed", "builder", "count", "size", "max_size", "first_ts", "max_ts", "mixed_ts",
};
static const char *const acc_slots[A_SLOTS] = {"buffered_bytes", "buffer_memory"};

typedef struct {
    PyObject_HEAD
    PyTypeObject *batch_cls;
    PyTypeObject *future_cls;
    PyTypeObject *builder_cls;
    PyObject *acc;
    PyObject *now_ms;
    PyObject *wakeup;
    PyObject *headers;
    long long record_overhead;
    Py_ssize_t off[B_SLOTS];
    Py_ssize_t acc_off[A_SLOTS];
    vectorcallfunc vectorcall;
} OpenAppend;

static PyObject *str_append;

#define BATCH_SLOT(oa, b, i) (*(PyObject **)((char *)(b) + (oa)->off[i]))
#define ACC_SLOT(oa, i) (*(PyObject **)((char *)(oa)->acc + (oa)->acc_off[i]))

/* An exact int's value when it fits a long long; else *ok is cleared (never an exception). */
static long long exact_ll(PyObject *v, int *ok)
{
    if (v == NULL || !PyLong_CheckExact(v)) {
        *ok = 0;
        return 0;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow)
        *ok = 0;
    return x;
}

/* len(o) where o is not None, as `len` computes it (its TypeError included); None counts 0. */
static int field_len(PyObject *o, Py_ssize_t *n)
{
    if (o == Py_None)
        *n = 0;
    else if (PyBytes_CheckExact(o))
        *n = PyBytes_GET_SIZE(o);
    else if ((*n = PyObject_Size(o)) < 0)
        return -1;
    return 0;
}

/* Sets the slot at `*slot` to v (a new reference; NULL: an exception is set, nothing changed). */
static int set_slot(PyObject **slot, PyObject *v)
{
    if (v == NULL)
        return -1;
    Py_XSETREF(*slot, v);
    return 0;
}

static PyObject *open_append_call(OpenAppend *oa, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) != 4 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_SetString(PyExc_TypeError, "OpenAppend takes (batch, key, value, max_request_size)");
        return NULL;
    }
    PyObject *b = args[0], *key = args[1], *value = args[2];
    if (Py_TYPE(b) != oa->batch_cls || BATCH_SLOT(oa, b, B_CLOSED) == NULL)
        Py_RETURN_NONE;
    int closed = PyObject_IsTrue(BATCH_SLOT(oa, b, B_CLOSED));
    if (closed != 0)
        return closed < 0 ? NULL : Py_NewRef(Py_None);
    Py_ssize_t vn, kn;
    if (field_len(value, &vn) != 0 || field_len(key, &kn) != 0)
        return NULL;
    int ok = 1;
    long long bsize = exact_ll(BATCH_SLOT(oa, b, B_SIZE), &ok);
    if (vn > LLONG_MAX / 4 || kn > LLONG_MAX / 4 || bsize < 0 || bsize > LLONG_MAX / 4)
        Py_RETURN_NONE;                         /* sums that could overflow: the general path's big ints */
    long long size = oa->record_overhead + vn + kn;
    long long total = bsize + size;
    long long max_size = exact_ll(BATCH_SLOT(oa, b, B_MAX_SIZE), &ok);
    long long count = exact_ll(BATCH_SLOT(oa, b, B_COUNT), &ok);
    long long first_ts = exact_ll(BATCH_SLOT(oa, b, B_FIRST_TS), &ok);
    long long max_ts = exact_ll(BATCH_SLOT(oa, b, B_MAX_TS), &ok);
    long long max_request_size = exact_ll(args[3], &ok);
    PyObject *builder = BATCH_SLOT(oa, b, B_BUILDER);
    if (!ok || builder == NULL || builder == Py_None || total > max_size || size > max_request_size
            || count < 0 || count >= PY_SSIZE_T_MAX)
        Py_RETURN_NONE;
    long long buffered = exact_ll(ACC_SLOT(oa, A_BUFFERED), &ok);
    long long memory = exact_ll(ACC_SLOT(oa, A_MEMORY), &ok);
    if (!ok || buffered > LLONG_MAX - size || buffered + size > memory)
        Py_RETURN_NONE;
    /* The record goes in: from here on as send's Python twin, step for step. */
    Py_INCREF(builder);                         /* held across the clock, which runs Python code */
    PyObject *now_obj = PyObject_CallNoArgs(oa->now_ms);
    if (now_obj == NULL) {
        Py_DECREF(builder);
        return NULL;
    }
    int overflow;
    long long now = PyLong_AsLongLongAndOverflow(now_obj, &overflow);   /* its TypeError: append's */
    if (overflow)
        (void)PyLong_AsLongLong(now_obj);                               /* append's OverflowError */
    if (overflow || (now == -1 && PyErr_Occurred())) {
        Py_DECREF(builder);
        goto fail;
    }
    int appended;
    if (Py_TYPE(builder) == oa->builder_cls) {
        appended = writer_add((RecordsWriter *)builder, count, now, key, value, oa->headers);
    } else {
        PyObject *index = PyLong_FromLongLong(count);
        PyObject *r = index == NULL ? NULL : PyObject_CallMethodObjArgs(builder, str_append, index, now_obj, key,
                                                                        value, oa->headers, NULL);
        Py_XDECREF(index);
        Py_XDECREF(r);
        appended = r == NULL ? -1 : 0;
    }
    Py_DECREF(builder);
    if (appended != 0 || set_slot(&BATCH_SLOT(oa, b, B_COUNT), PyLong_FromLongLong(count + 1)) != 0)
        goto fail;
    if (now != first_ts) {
        set_slot(&BATCH_SLOT(oa, b, B_MIXED_TS), Py_NewRef(Py_True));
        if (now > max_ts)
            set_slot(&BATCH_SLOT(oa, b, B_MAX_TS), Py_NewRef(now_obj));
    }
    Py_CLEAR(now_obj);
    if (set_slot(&BATCH_SLOT(oa, b, B_SIZE), PyLong_FromLongLong(total)) != 0
            || set_slot(&ACC_SLOT(oa, A_BUFFERED), PyLong_FromLongLong(buffered + size)) != 0)
        return NULL;
    if (total >= max_size) {
        PyObject *r = PyObject_CallNoArgs(oa->wakeup);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    RecordRef *fut = (RecordRef *)oa->future_cls->tp_alloc(oa->future_cls, 0);
    if (fut == NULL)
        return NULL;
    fut->batch = Py_NewRef(b);
    fut->index = (Py_ssize_t)count;
    return (PyObject *)fut;
fail:
    Py_XDECREF(now_obj);
    return NULL;
}

static PyObject *open_append_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *batch_cls, *future_cls, *builder_cls, *acc, *now_ms, *wakeup, *headers;
    long long record_overhead;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "OpenAppend takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O!O!OOOO!L:OpenAppend", &PyType_Type, &batch_cls, &PyType_Type, &future_cls,
                          &PyType_Type, &builder_cls, &acc, &now_ms, &wakeup, &PyList_Type, &headers,
                          &record_overhead))
        return NULL;
    PyTypeObject *ft = (PyTypeObject *)future_cls, *bt = (PyTypeObject *)builder_cls;
    if (!PyType_IsSubtype(ft, &RecordRefType) || ft->tp_itemsize != 0) {
        PyErr_Format(PyExc_TypeError, "OpenAppend: %s is not a RecordRef class", ft->tp_name);
        return NULL;
    }
    PyObject *own = PyDict_GetItemWithError(RecordsWriterType.tp_dict, str_append);
    PyObject *its = PyType_IsSubtype(bt, &RecordsWriterType) ? PyObject_GetAttr(builder_cls, str_append) : NULL;
    Py_XDECREF(its);                            /* compared, not used: RecordsWriterType keeps `own` alive */
    if (own == NULL || its != own) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "OpenAppend: %s is not a RecordsWriter with its append", bt->tp_name);
        return NULL;
    }
    if (!PyCallable_Check(now_ms) || !PyCallable_Check(wakeup) || record_overhead < 0 || record_overhead > 1 << 20) {
        PyErr_SetString(PyExc_TypeError, "OpenAppend: now_ms and wakeup must be callable, record_overhead small");
        return NULL;
    }
    OpenAppend *oa = (OpenAppend *)type->tp_alloc(type, 0);
    if (oa == NULL)
        return NULL;
    for (int i = 0; i < B_SLOTS + A_SLOTS; i++) {
        PyObject *name = PyUnicode_InternFromString(i < B_SLOTS ? batch_slots[i] : acc_slots[i - B_SLOTS]);
        int bad = name == NULL || slot_offset(i < B_SLOTS ? (PyTypeObject *)batch_cls : Py_TYPE(acc), name,
                                              "OpenAppend", i < B_SLOTS ? &oa->off[i] : &oa->acc_off[i - B_SLOTS]);
        Py_XDECREF(name);
        if (bad) {
            Py_DECREF(oa);
            return NULL;
        }
    }
    oa->batch_cls = (PyTypeObject *)Py_NewRef(batch_cls);
    oa->future_cls = (PyTypeObject *)Py_NewRef(future_cls);
    oa->builder_cls = (PyTypeObject *)Py_NewRef(builder_cls);
    oa->acc = Py_NewRef(acc);
    oa->now_ms = Py_NewRef(now_ms);
    oa->wakeup = Py_NewRef(wakeup);
    oa->headers = Py_NewRef(headers);
    oa->record_overhead = record_overhead;
    oa->vectorcall = (vectorcallfunc)open_append_call;
    return (PyObject *)oa;
}

static int open_append_traverse(OpenAppend *oa, visitproc visit, void *arg)
{
    Py_VISIT(oa->batch_cls);
    Py_VISIT(oa->future_cls);
    Py_VISIT(oa->builder_cls);
    Py_VISIT(oa->acc);
    Py_VISIT(oa->now_ms);
    Py_VISIT(oa->wakeup);
    Py_VISIT(oa->headers);
    return 0;
}

static int open_append_clear(OpenAppend *oa)
{
    Py_CLEAR(oa->batch_cls);
    Py_CLEAR(oa->future_cls);
    Py_CLEAR(oa->builder_cls);
    Py_CLEAR(oa->acc);
    Py_CLEAR(oa->now_ms);
    Py_CLEAR(oa->wakeup);
    Py_CLEAR(oa->headers);
    return 0;
}

static void open_append_dealloc(OpenAppend *oa)
{
    PyObject_GC_UnTrack(oa);
    open_append_clear(oa);
    Py_TYPE(oa)->tp_free((PyObject *)oa);
}

static PyTypeObject OpenAppendType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "minibroker._speedups.OpenAppend",
    .tp_basicsize = sizeof(OpenAppend),
    .tp_dealloc = (destructor)open_append_dealloc,
    .tp_vectorcall_offset = offsetof(OpenAppend, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "OpenAppend(batch_cls, future_cls, builder_cls, acc, now_ms, wakeup, headers, record_overhead): "
              "send's one-pass append to a partition's open batch.",
    .tp_traverse = (traverseproc)open_append_traverse,
    .tp_clear = (inquiry)open_append_clear,
    .tp_new = open_append_new,
};

/* ---------------------------------------------------------------- msgpack_objects */

static int be_len(const unsigned char *p, int n, Py_ssize_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    if (v > (uint64_t)PY_SSIZE_T_MAX)
        return -1;
    *out = (Py_ssize_t)v;
    return 0;
}

static PyObject *msgpack_objects(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "msgpack_objects(data, limit)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0)
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    const Py_ssize_t n = view.len;
    Py_ssize_t pos = 0, count = 0, pending = 1;     /* objects still to read */
    while (pending > 0) {
        if (count > limit)
            break;
        if (pos >= n)
            goto incomplete;
        const unsigned char b = p[pos++];
        Py_ssize_t skip = 0, items = 0, len = 0;
        int width = 0;
        pending--;
        count++;
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
            skip = 0;
        } else if (b <= 0x8f) {
            items = 2 * (Py_ssize_t)(b & 0x0f);
        } else if (b <= 0x9f) {
            items = b & 0x0f;
        } else if (b <= 0xbf) {
            skip = b & 0x1f;
        } else {
            switch (b) {
            case 0xc4: case 0xd9: width = 1; break;               /* bin 8, str 8 */
            case 0xc5: case 0xda: width = 2; break;
            case 0xc6: case 0xdb: width = 4; break;
            case 0xc7: width = 1; skip = 1; break;                /* ext 8/16/32: length, type */
            case 0xc8: width = 2; skip = 1; break;
            case 0xc9: width = 4; skip = 1; break;
            case 0xca: skip = 4; break;
            case 0xcb: skip = 8; break;
            case 0xcc: case 0xd0: skip = 1; break;
            case 0xcd: case 0xd1: skip = 2; break;
            case 0xce: case 0xd2: skip = 4; break;
            case 0xcf: case 0xd3: skip = 8; break;
            case 0xd4: skip = 2; break;                           /* fixext: type + data */
            case 0xd5: skip = 3; break;
            case 0xd6: skip = 5; break;
            case 0xd7: skip = 9; break;
            case 0xd8: skip = 17; break;
            case 0xdc: case 0xde: width = 2; break;               /* array 16, map 16 */
            case 0xdd: case 0xdf: width = 4; break;
            default: goto incomplete;                             /* 0xc1: never used */
            }
            if (width) {
                if (n - pos < width || be_len(p + pos, width, &len) < 0)
                    goto incomplete;
                pos += width;
                if (b == 0xdc || b == 0xdd)
                    items = len;
                else if (b == 0xde || b == 0xdf)
                    items = 2 * len;
                else
                    skip += len;
            }
        }
        if (skip > n - pos)
            goto incomplete;
        pos += skip;
        if (items > n - pos)                       /* each element takes a byte at least */
            goto incomplete;
        pending += items;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count > limit ? limit + 1 : count);
incomplete:
    PyBuffer_Release(&view);
    return PyLong_FromLong(-1);
}

/* ---------------------------------------------------------------- check */

enum { NODE_INT = 0, NODE_EXACT = 1, NODE_ANY = 2, NODE_MAP = 3, NODE_LIST = 4, NODE_DICT = 5, NODE_NONE_OR = 6 };

static PyObject *Invalid;

static PyObject *invalid(void)
{
    PyErr_SetNone(Invalid);
    return NULL;
}

static PyObject *check_node(PyObject *node, PyObject *v);

static PyObject *check_dict_node(PyObject *fields, PyObject *v)
{
    if (!PyDict_CheckExact(v))
        return invalid();
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = PyTuple_GET_ITEM(fields, i);        /* (name, node, required, default) */
        PyObject *name = PyTuple_GET_ITEM(f, 0);
        PyObject *x = PyDict_GetItemWithError(v, name);   /* borrowed */
        PyObject *r;
        if (x == NULL) {
            if (PyErr_Occurred())
                goto fail;
            if (PyTuple_GET_ITEM(f, 2) == Py_True) {
                invalid();
                goto fail;
            }
            r = Py_NewRef(PyTuple_GET_ITEM(f, 3));
        } else {
            r = check_node(PyTuple_GET_ITEM(f, 1), x);
            if (r == NULL)
                goto fail;
        }
        int rc = PyDict_SetItem(out, name, r);
        Py_DECREF(r);
        if (rc < 0)
            goto fail;
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *check_list_node(PyObject *item, PyObject *v)
{
    if (!PyList_CheckExact(v))
        return invalid();
    Py_ssize_t n = PyList_GET_SIZE(v);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PyList_GET_SIZE(v)) {                /* the list shrank under us: not from msgpack */
            Py_DECREF(out);
            return invalid();
        }
        PyObject *x = PyList_GET_ITEM(v, i);
        Py_INCREF(x);
        PyObject *r = check_node(item, x);
        Py_DECREF(x);
        if (r == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, r);
    }
    return out;
}

static PyObject *check_map_node(PyObject *knode, PyObject *vnode, PyObject *v)
{
    if (!PyDict_CheckExact(v))
        return invalid();
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    Py_ssize_t pos = 0;
    PyObject *k, *x;
    while (PyDict_Next(v, &pos, &k, &x)) {
        Py_INCREF(k);
        Py_INCREF(x);
        PyObject *rk = check_node(knode, k);
        PyObject *rx = rk == NULL ? NULL : check_node(vnode, x);
        Py_DECREF(k);
        Py_DECREF(x);
        int rc = rx == NULL ? -1 : PyDict_SetItem(out, rk, rx);
        Py_XDECREF(rk);
        Py_XDECREF(rx);
        if (rc < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

static PyObject *check_node(PyObject *node, PyObject *v)
{
    switch (PyLong_AsLong(PyTuple_GET_ITEM(node, 0))) {
    case NODE_INT: {
        if (!PyLong_CheckExact(v))
            return invalid();
        int overflow;
        (void)PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return invalid();
        return Py_NewRef(v);
    }
    case NODE_EXACT:
        if ((PyObject *)Py_TYPE(v) != PyTuple_GET_ITEM(node, 1))
            return invalid();
        return Py_NewRef(v);
    case NODE_ANY:
        return Py_NewRef(v);
    case NODE_NONE_OR:
        if (v == Py_None)
            return Py_NewRef(v);
        return check_node(PyTuple_GET_ITEM(node, 1), v);
    case NODE_MAP:
    case NODE_LIST:
    case NODE_DICT: {
        if (Py_EnterRecursiveCall(" in check"))
            return NULL;
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(node, 0));
        PyObject *r = kind == NODE_DICT ? check_dict_node(PyTuple_GET_ITEM(node, 1), v)
                    : kind == NODE_LIST ? check_list_node(PyTuple_GET_ITEM(node, 1), v)
                    : check_map_node(PyTuple_GET_ITEM(node, 1), PyTuple_GET_ITEM(node, 2), v);
        Py_LeaveRecursiveCall();
        return r;
    }
    }
    PyErr_SetString(PyExc_TypeError, "check: bad spec node");
    return NULL;
}

static int node_ok(PyObject *node)
{
    /* The shape check(node, ...) relies on, verified once per call of check_spec (at compile time). */
    if (!PyTuple_CheckExact(node) || PyTuple_GET_SIZE(node) < 1 || !PyLong_CheckExact(PyTuple_GET_ITEM(node, 0)))
        return 0;
    Py_ssize_t n = PyTuple_GET_SIZE(node);
    switch (PyLong_AsLong(PyTuple_GET_ITEM(node, 0))) {
    case NODE_INT: case NODE_ANY:
        return n == 1;
    case NODE_EXACT:
        return n == 2 && PyType_Check(PyTuple_GET_ITEM(node, 1));
    case NODE_NONE_OR: case NODE_LIST:
        return n == 2 && node_ok(PyTuple_GET_ITEM(node, 1));
    case NODE_MAP:
        return n == 3 && node_ok(PyTuple_GET_ITEM(node, 1)) && node_ok(PyTuple_GET_ITEM(node, 2));
    case NODE_DICT: {
        PyObject *fields = PyTuple_GET_ITEM(node, 1);
        if (n != 2 || !PyTuple_CheckExact(fields))
            return 0;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
            PyObject *f = PyTuple_GET_ITEM(fields, i);
            if (!PyTuple_CheckExact(f) || PyTuple_GET_SIZE(f) != 4 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(f, 0))
                || !PyBool_Check(PyTuple_GET_ITEM(f, 2)) || !node_ok(PyTuple_GET_ITEM(f, 1)))
                return 0;
        }
        return 1;
    }
    }
    return 0;
}

static PyObject *check_spec(PyObject *self, PyObject *node)
{
    if (!node_ok(node)) {
        PyErr_SetString(PyExc_TypeError, "check_spec: not a compiled spec node");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *check(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check(node, value)");
        return NULL;
    }
    if (!PyTuple_CheckExact(args[0]) || PyTuple_GET_SIZE(args[0]) < 1) {
        PyErr_SetString(PyExc_TypeError, "check: node must be a compiled spec node");
        return NULL;
    }
    return check_node(args[0], args[1]);
}

/* ---------------------------------------------------------------- response size */

/* framing.response_entries: the entries of a response's lists and of the lists in the
   dicts those hold, counted only until they pass limit. */
static PyObject *response_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "response_entries(message: dict, limit: int)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[1]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = 0, pos = 0;
    PyObject *key, *v;
    while (PyDict_Next(args[0], &pos, &key, &v)) {
        if (!PyList_Check(v))
            continue;
        n += PyList_GET_SIZE(v);
        if (n > limit)
            return PyLong_FromSsize_t(n);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++) {
            PyObject *item = PyList_GET_ITEM(v, i);
            if (PyDict_Check(item)) {
                Py_ssize_t ipos = 0;
                PyObject *ik, *x;
                while (PyDict_Next(item, &ipos, &ik, &x)) {
                    if (PyList_Check(x))
                        n += PyList_GET_SIZE(x);
                }
            }
            if (n > limit)
                return PyLong_FromSsize_t(n);
        }
    }
    return PyLong_FromSsize_t(n);
}

/* ---------------------------------------------------------------- batch_headers */

#define BATCH_HEADER 61             /* records.HEADER_SIZE */
#define LOG_OVERHEAD 12             /* base offset + batch length */
#define BATCH_MAGIC 2
#define KNOWN_ATTRIBUTES 0x0F       /* codec.CODEC_MASK | TIMESTAMP_TYPE_LOG_APPEND */
#define CODEC_MASK 0x07
#define MAX_CODEC 4                 /* codec.ZSTD */

static inline uint64_t be_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static inline uint32_t be_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int16_t be_i16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

static PyObject *batch_headers(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[1]) || !PyType_IsSubtype((PyTypeObject *)args[1], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "batch_headers(buf, cls: a tuple subclass, crc32c)");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[1];
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t end = view.len;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto fail;
    for (Py_ssize_t pos = 0; pos < end;) {
        if (end - pos < BATCH_HEADER)
            goto refuse;
        const unsigned char *p = buf + pos;
        const int64_t base = (int64_t)be_u64(p);
        const int32_t length = (int32_t)be_u32(p + 8);
        const int32_t epoch = (int32_t)be_u32(p + 12);
        const int8_t magic = (int8_t)p[16];
        const uint32_t crc = be_u32(p + 17);
        const int16_t attrs = be_i16(p + 21);
        const int32_t lod = (int32_t)be_u32(p + 23);
        const int64_t first_ts = (int64_t)be_u64(p + 27);
        const int64_t max_ts = (int64_t)be_u64(p + 35);
        const int64_t pid = (int64_t)be_u64(p + 43);
        const int16_t pepoch = be_i16(p + 51);
        const int32_t seq = (int32_t)be_u32(p + 53);
        const int32_t count = (int32_t)be_u32(p + 57);
        const int64_t size = (int64_t)length + LOG_OVERHEAD;
        if (size < BATCH_HEADER || magic != BATCH_MAGIC || (attrs & ~KNOWN_ATTRIBUTES) || (attrs & CODEC_MASK) > MAX_CODEC
                || lod < 0 || count < 0 || (int64_t)count > (int64_t)lod + 1 || base < 0 || size > end - pos)
            goto refuse;
        PyObject *region = PyMemoryView_FromMemory((char *)p + 21, (Py_ssize_t)size - 21, PyBUF_READ);
        if (region == NULL)
            goto fail;
        PyObject *sum = PyObject_CallOneArg(args[2], region);
        Py_DECREF(region);
        if (sum == NULL)
            goto fail;
        unsigned long c = PyLong_AsUnsignedLong(sum);
        Py_DECREF(sum);
        if (c == (unsigned long)-1 && PyErr_Occurred())
            goto fail;
        if (c != crc)
            goto refuse;
        PyObject *h = cls->tp_alloc(cls, 14);
        if (h == NULL)
            goto fail;
        PyObject *fields[14] = {
            PyLong_FromSsize_t(pos), PyLong_FromLongLong(size), PyLong_FromLongLong(base), PyLong_FromLong(epoch),
            PyLong_FromLong(magic), PyLong_FromUnsignedLong(crc), PyLong_FromLong(attrs), PyLong_FromLong(lod),
            PyLong_FromLongLong(first_ts), PyLong_FromLongLong(max_ts), PyLong_FromLongLong(pid),
            PyLong_FromLong(pepoch), PyLong_FromLong(seq), PyLong_FromLong(count),
        };
        int bad = 0;
        for (int i = 0; i < 14; i++) {
            if (fields[i] == NULL)
                bad = 1;
            PyTuple_SET_ITEM(h, i, fields[i]);      /* a NULL item is fine for the DECREF below */
        }
        if (bad || PyList_Append(out, h) < 0) {
            Py_DECREF(h);
            goto fail;
        }
        Py_DECREF(h);
        pos += (Py_ssize_t)size;
    }
    PyBuffer_Release(&view);
    return out;
refuse:
    PyBuffer_Release(&view);
    Py_DECREF(out);
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&view);
    Py_XDECREF(out);
    return NULL;
}

/* ---------------------------------------------------------------- decode_map */

#define DM_MAX_DEPTH 64
#define DM_CACHE_SLOTS 512
#define DM_CACHE_MAX_LEN 40

/* Short ASCII strings made before, by a hash of their bytes: a slot holds one
 * str (a reference) or NULL; a miss replaces it. Only ever read with the GIL. */
static PyObject *dm_cache[DM_CACHE_SLOTS];

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} DmReader;

static PyObject *dm_str(const unsigned char *p, Py_ssize_t n)
{
    if (n == 0 || n > DM_CACHE_MAX_LEN)
        return PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] & 0x80)
            return PyUnicode_DecodeUTF8((const char *)p, n, NULL);
        h = (h ^ p[i]) * 16777619u;
    }
    PyObject **slot = &dm_cache[h % DM_CACHE_SLOTS];
    PyObject *s = *slot;
    if (s != NULL && PyUnicode_GET_LENGTH(s) == n && memcmp(PyUnicode_DATA(s), p, (size_t)n) == 0)
        return Py_NewRef(s);
    s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);     /* ASCII: a compact str of its bytes */
    if (s == NULL)
        return NULL;
    Py_XSETREF(*slot, Py_NewRef(s));
    return s;
}

/* Reads `width` big-endian bytes; -1 when there are not that many left. */
static int dm_uint(DmReader *r, int width, uint64_t *out)
{
    if (r->end - r->p < width)
        return -1;
    uint64_t v = 0;
    for (int i = 0; i < width; i++)
        v = (v << 8) | r->p[i];
    r->p += width;
    *out = v;
    return 0;
}

/* One object, or NULL: with an exception set on a real error (memory, bad UTF-8), without
 * one where msgpack must decide (unsupported or malformed input); both make the caller
 * answer None. */
static PyObject *dm_object(DmReader *r, int depth);

static PyObject *dm_container(DmReader *r, int depth, uint64_t n, int is_map)
{
    if (depth >= DM_MAX_DEPTH || n > (uint64_t)(r->end - r->p))   /* each item takes a byte at least */
        return NULL;
    if (!is_map) {
        PyObject *list = PyList_New((Py_ssize_t)n);
        if (list == NULL)
            return NULL;
        for (uint64_t i = 0; i < n; i++) {
            PyObject *item = dm_object(r, depth + 1);
            if (item == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)i, item);
        }
        return list;
    }
    PyObject *dict = PyDict_New();
    if (dict == NULL)
        return NULL;
    for (uint64_t i = 0; i < n; i++) {
        PyObject *key = dm_object(r, depth + 1);
        if (key == NULL) {
            Py_DECREF(dict);
            return NULL;
        }
        if (!PyUnicode_CheckExact(key) && !PyBytes_CheckExact(key)) {      /* strict_map_key */
            Py_DECREF(key);
            Py_DECREF(dict);
            return NULL;
        }
        PyObject *value = dm_object(r, depth + 1);
        if (value == NULL || PyDict_SetItem(dict, key, value) < 0) {
            Py_DECREF(key);
            Py_XDECREF(value);
            Py_DECREF(dict);
            return NULL;
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    return dict;
}

static PyObject *dm_object(DmReader *r, int depth)
{
    if (r->p >= r->end)
        return NULL;
    unsigned int b = *r->p++;
    uint64_t v;
    if (b <= 0x7f)
        return PyLong_FromLong((long)b);
    if (b >= 0xe0)
        return PyLong_FromLong((long)(signed char)b);
    if (b <= 0x8f)
        return dm_container(r, depth, b & 0x0f, 1);
    if (b <= 0x9f)
        return dm_container(r, depth, b & 0x0f, 0);
    if (b <= 0xbf) {
        v = b & 0x1f;
        goto str;
    }
    switch (b) {
    case 0xc0: Py_RETURN_NONE;
    case 0xc2: Py_RETURN_FALSE;
    case 0xc3: Py_RETURN_TRUE;
    case 0xc4: case 0xc5: case 0xc6: {
        if (dm_uint(r, 1 << (b - 0xc4), &v) < 0 || v > (uint64_t)(r->end - r->p))
            return NULL;
        PyObject *bin = PyBytes_FromStringAndSize((const char *)r->p, (Py_ssize_t)v);
        r->p += v;
        return bin;
    }
    case 0xca: {
        if (dm_uint(r, 4, &v) < 0)
            return NULL;
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, 4);
        return PyFloat_FromDouble((double)f);
    }
    case 0xcb: {
        if (dm_uint(r, 8, &v) < 0)
            return NULL;
        double d;
        memcpy(&d, &v, 8);
        return PyFloat_FromDouble(d);
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        if (dm_uint(r, 1 << (b - 0xcc), &v) < 0)
            return NULL;
        return PyLong_FromUnsignedLongLong(v);
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        int width = 1 << (b - 0xd0);
        if (dm_uint(r, width, &v) < 0)
            return NULL;
        int shift = 64 - 8 * width;                  /* sign-extend from `width` bytes */
        return PyLong_FromLongLong((long long)(v << shift) >> shift);
    }
    case 0xd9: case 0xda: case 0xdb:
        if (dm_uint(r, 1 << (b - 0xd9), &v) < 0)
            return NULL;
        goto str;
    case 0xdc: case 0xdd:
        if (dm_uint(r, 2 << (b - 0xdc), &v) < 0)
            return NULL;
        return dm_container(r, depth, v, 0);
    case 0xde: case 0xdf:
        if (dm_uint(r, 2 << (b - 0xde), &v) < 0)
            return NULL;
        return dm_container(r, depth, v, 1);
    default:                                     /* 0xc1 (never used) and the extension types */
        return NULL;
    }
str:
    if (v > (uint64_t)(r->end - r->p))
        return NULL;
    {
        PyObject *s = dm_str(r->p, (Py_ssize_t)v);
        r->p += v;
        return s;
    }
}

static PyObject *decode_map(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    DmReader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len};
    PyObject *out = NULL;
    if (view.len > 0 && ((r.p[0] & 0xf0) == 0x80 || r.p[0] == 0xde || r.p[0] == 0xdf)) {
        out = dm_object(&r, 0);
        if (out != NULL && r.p != r.end)              /* trailing bytes: msgpack's ExtraData */
            Py_CLEAR(out);
    }
    PyBuffer_Release(&view);
    if (out == NULL) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_ValueError))   /* UnicodeDecodeError is one */
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return out;
}

/* ---------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"wall_ms", wall_ms, METH_NOARGS, "Wall-clock milliseconds since the epoch."},
    {"murmur2", murmur2, METH_O, "Kafka's murmur2 hash of a bytes-like object (signed 32-bit)."},
    {"decode_map", decode_map, METH_O,
     "The msgpack map data holds, as msgpack.unpackb decodes it; None where msgpack must decide."},
    {"msgpack_objects", (PyCFunction)(void (*)(void))msgpack_objects, METH_FASTCALL,
     "The msgpack objects in the object at the start of data, up to limit + 1 (-1: incomplete)."},
    {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL,
     "Validate a decoded message against a compiled spec node (raises Invalid)."},
    {"check_spec", check_spec, METH_O, "Raise TypeError unless node is a well-formed compiled spec node."},
    {"response_entries", (PyCFunction)(void (*)(void))response_entries, METH_FASTCALL,
     "framing.response_entries in C: a response's list entries, counted until they pass limit."},
    {"batch_headers", (PyCFunction)(void (*)(void))batch_headers, METH_FASTCALL,
     "records.batch_headers in C: the checked headers of concatenated batches, or None at a bad one."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "minibroker._speedups",
    "C versions of per-record producer helpers (each has a Python twin).", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    if (PyType_Ready(&RecordsWriterType) < 0 || PyType_Ready(&RecordRefType) < 0
            || PyType_Ready(&SlotsMakerType) < 0 || PyType_Ready(&OpenAppendType) < 0)
        return NULL;
    str_append = PyUnicode_InternFromString("append");
    if (str_append == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&RecordsWriterType);
    if (PyModule_AddObject(m, "RecordsWriter", (PyObject *)&RecordsWriterType) < 0) {
        Py_DECREF(&RecordsWriterType);
        Py_DECREF(m);
        return NULL;
    }
    Invalid = PyErr_NewException("minibroker._speedups.Invalid", NULL, NULL);
    if (Invalid == NULL || PyModule_AddObjectRef(m, "Invalid", Invalid) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RecordRefType);
    if (PyModule_AddObject(m, "RecordRef", (PyObject *)&RecordRefType) < 0) {
        Py_DECREF(&RecordRefType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "SlotsMaker", (PyObject *)&SlotsMakerType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "OpenAppend", (PyObject *)&OpenAppendType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
