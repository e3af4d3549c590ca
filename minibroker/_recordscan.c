/* minibroker._recordscan: walk the records section of one Kafka v2 batch
 * without making an object per record (the leader's payload check).
 *
 * scan(records, record_count, first_timestamp) -> max_timestamp
 *
 * `records` is the uncompressed records section (the bytes after the 61-byte
 * header, or their decompression). Raises ValueError, with a message naming
 * the record and the problem, unless it holds exactly `record_count`
 * records, each framed by its length varint, whose offset deltas are
 * 0, 1, ..., record_count - 1 and whose fields (attributes byte, timestamp
 * delta, offset delta, key, value, headers with non-null keys) fit inside
 * it, with no byte left over. Returns the largest first_timestamp +
 * timestamp_delta (first_timestamp when record_count is 0).
 *
 * Stateless; never allocates per record; the work is bounded by the length
 * of `records`, whatever record_count claims.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Kafka's zig-zag varint/varlong: at most 10 bytes. 0 on success, -1 if it
 * runs past `end` or is longer than 10 bytes. */
static inline int read_varlong(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    if (*pos < end && !(buf[*pos] & 0x80)) {               /* one byte: most lengths and deltas */
        const uint64_t one = buf[(*pos)++];
        *out = (int64_t)(one >> 1) ^ -(int64_t)(one & 1);
        return 0;
    }
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end || shift > 63)
            return -1;
        unsigned char b = buf[p++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    *pos = p;
    *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    return 0;
}

#define FAIL(...) do { PyErr_Format(PyExc_ValueError, __VA_ARGS__); goto done; } while (0)

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, first_ts;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*LL", &view, &count, &first_ts))
        return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t size = view.len;
    Py_ssize_t pos = 0;
    int64_t max_ts = first_ts;
    int64_t v, length, ts_delta, offset_delta, n_headers;
    long long i;
    for (i = 0; i < count; i++) {
        if (read_varlong(buf, size, &pos, &length) < 0)
            FAIL("record %lld of %lld: the records section ends after %zd bytes", i, count, size);
        if (length < 1 || length > size - pos)
            FAIL("record %lld: length %lld does not fit the %zd bytes left", i, (long long)length, size - pos);
        const Py_ssize_t end = pos + (Py_ssize_t)length;
        pos++;                                              /* attributes: int8 */
        if (read_varlong(buf, end, &pos, &ts_delta) < 0 || read_varlong(buf, end, &pos, &offset_delta) < 0)
            FAIL("record %lld: truncated timestamp or offset delta", i);
        if (offset_delta != i)
            FAIL("record %lld: offset delta %lld, expected %lld (deltas must be 0..count-1 in order)",
                 i, (long long)offset_delta, i);
        const int64_t ts = (int64_t)((uint64_t)first_ts + (uint64_t)ts_delta);   /* wraps as Java's long */
        if (ts > max_ts)
            max_ts = ts;
        for (int field = 0; field < 2; field++) {           /* key, value: nullable bytes */
            if (read_varlong(buf, end, &pos, &v) < 0 || v < -1 || v > end - pos)
                FAIL("record %lld: %s length does not fit the record", i, field ? "value" : "key");
            if (v > 0)
                pos += (Py_ssize_t)v;
        }
        if (read_varlong(buf, end, &pos, &n_headers) < 0 || n_headers < 0 || n_headers > end - pos)
            FAIL("record %lld: bad header count", i);
        for (int64_t h = 0; h < n_headers; h++) {
            if (read_varlong(buf, end, &pos, &v) < 0 || v < 0 || v > end - pos)
                FAIL("record %lld: header %lld key length does not fit the record", i, (long long)h);
            pos += (Py_ssize_t)v;
            if (read_varlong(buf, end, &pos, &v) < 0 || v < -1 || v > end - pos)
                FAIL("record %lld: header %lld value length does not fit the record", i, (long long)h);
            if (v > 0)
                pos += (Py_ssize_t)v;
        }
        if (pos != end)
            FAIL("record %lld: %zd bytes of its declared length %lld are unused", i, end - pos, (long long)length);
    }
    if (pos != size)
        FAIL("%zd bytes follow the last of the %lld records", size - pos, count);
    result = PyLong_FromLongLong(max_ts);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(records, record_count, first_timestamp) -> max_timestamp; ValueError unless the records "
     "section holds exactly record_count well-framed records with offset deltas 0..record_count-1."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordscan(void)
{
    return PyModule_Create(&module);
}
