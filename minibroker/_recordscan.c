/* minibroker._recordscan: walk the records section of one Kafka v2 batch
 * without making an object per record (the leader's payload check).
 *
 * scan(records, record_count, first_timestamp) -> (max_timestamp, min_timestamp)
 *
 * `records` is the uncompressed records section (the bytes after the 61-byte
 * header, or their decompression). Raises ValueError, with a message naming
 * the record and the problem, unless it holds exactly `record_count`
 * records, each framed by its length varint, whose offset deltas are
 * 0, 1, ..., record_count - 1 and whose fields (attributes byte, timestamp
 * delta, offset delta, key, value, headers with non-null keys) fit inside
 * it, with no byte left over. Returns the largest first_timestamp +
 * timestamp_delta (first_timestamp when record_count is 0) and the smallest
 * one other than -1 (Kafka's NO_TIMESTAMP; INT64_MAX when there is none),
 * for the leader's timestamp window (message.timestamp.before/after.max.ms).
 *
 * Stateless; never allocates per record; the work is bounded by the length
 * of `records`, whatever record_count claims.
 *
 * decode(...) is the consumer's side of the same walk: see its comment.
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
#define FAILD(...) do { PyErr_Format(PyExc_ValueError, __VA_ARGS__); goto fail; } while (0)

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
    int64_t max_ts = first_ts, min_ts = INT64_MAX;
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
        if (ts < min_ts && ts != -1)
            min_ts = ts;
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
    result = Py_BuildValue("(LL)", (long long)max_ts, (long long)min_ts);
done:
    PyBuffer_Release(&view);
    return result;
}


/* decode(records, record_count, base_offset, first_timestamp, append_time, min_offset, stop_offset,
 *        cls, topic, partition, leader_epoch, out) -> appended
 *
 * The consumer's decoder: appends one `cls(topic, partition, offset, timestamp, key, value, headers,
 * leader_epoch, timestamp_type)` per record at or above `min_offset` and below `stop_offset` (when
 * >= 0) to the list `out`, building each as a tuple subclass instance directly (no per-record Python
 * call). `cls` must be a tuple subclass without a __dict__ (a NamedTuple) of those 9 fields.
 * Timestamps are first_timestamp + delta, or `append_time` for every record when it is not None (a
 * LOG_APPEND_TIME batch); timestamp_type is Kafka's TimestampType id (0 CreateTime, 1 LogAppendTime).
 * Headers are a tuple of (str key, bytes or None value). Raises ValueError unless the section holds exactly
 * record_count well-framed records with no byte left over; nothing is appended then.
 * `topic` must be a str: every record, and each header tuple, holds only atoms and is untracked
 * by the cyclic GC as it is made, so the collector never walks the records a consumer buffers.
 */
static PyObject *bytes_or_none(const unsigned char *buf, int64_t len)
{
    if (len < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
}

static PyObject *decode(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, base_offset, first_ts, min_offset, stop_offset, partition, leader_epoch;
    PyObject *append_time, *cls, *topic, *out;
    if (!PyArg_ParseTuple(args, "y*LLLOLLOOLLO!", &view, &count, &base_offset, &first_ts, &append_time,
                          &min_offset, &stop_offset, &cls, &topic, &partition, &leader_epoch,
                          &PyList_Type, &out))
        return NULL;
    PyObject *result = NULL, *py_partition = NULL, *py_epoch = NULL, *py_append = NULL, *empty = NULL;
    PyObject *py_ts_type = NULL;
    const Py_ssize_t start_len = PyList_GET_SIZE(out);
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)
            || ((PyTypeObject *)cls)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple subclass without a __dict__");
        goto fail;
    }
    if (!PyUnicode_CheckExact(topic)) {
        PyErr_SetString(PyExc_TypeError, "topic must be a str");
        goto fail;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t size = view.len;
    Py_ssize_t pos = 0;
    int64_t v, length, ts_delta, offset_delta, n_headers;
    if (!(py_partition = PyLong_FromLongLong(partition)) || !(py_epoch = PyLong_FromLongLong(leader_epoch))
            || !(empty = PyTuple_New(0)))
        goto fail;
    if (append_time != Py_None) {
        py_append = append_time;
        Py_INCREF(py_append);
    }
    if (!(py_ts_type = PyLong_FromLong(py_append ? 1 : 0)))
        goto fail;
    for (long long i = 0; i < count; i++) {
        if (read_varlong(buf, size, &pos, &length) < 0)
            FAILD("record %lld of %lld: the records section ends after %zd bytes", i, count, size);
        if (length < 1 || length > size - pos)
            FAILD("record %lld: length %lld does not fit the %zd bytes left", i, (long long)length, size - pos);
        const Py_ssize_t end = pos + (Py_ssize_t)length;
        pos++;                                              /* attributes: int8, unused */
        if (read_varlong(buf, end, &pos, &ts_delta) < 0 || read_varlong(buf, end, &pos, &offset_delta) < 0)
            FAILD("record %lld: truncated timestamp or offset delta", i);
        Py_ssize_t kpos, vpos;
        int64_t klen, vlen;
        if (read_varlong(buf, end, &pos, &klen) < 0 || klen < -1 || klen > end - pos)
            FAILD("record %lld: key length does not fit the record", i);
        kpos = pos;
        if (klen > 0)
            pos += (Py_ssize_t)klen;
        if (read_varlong(buf, end, &pos, &vlen) < 0 || vlen < -1 || vlen > end - pos)
            FAILD("record %lld: value length does not fit the record", i);
        vpos = pos;
        if (vlen > 0)
            pos += (Py_ssize_t)vlen;
        if (read_varlong(buf, end, &pos, &n_headers) < 0 || n_headers < 0 || n_headers > end - pos)
            FAILD("record %lld: bad header count", i);
        const Py_ssize_t hpos = pos;
        for (int64_t h = 0; h < n_headers; h++) {           /* frame check first: build only if kept */
            if (read_varlong(buf, end, &pos, &v) < 0 || v < 0 || v > end - pos)
                FAILD("record %lld: header %lld key length does not fit the record", i, (long long)h);
            pos += (Py_ssize_t)v;
            if (read_varlong(buf, end, &pos, &v) < 0 || v < -1 || v > end - pos)
                FAILD("record %lld: header %lld value length does not fit the record", i, (long long)h);
            if (v > 0)
                pos += (Py_ssize_t)v;
        }
        if (pos != end)
            FAILD("record %lld: %zd bytes of its declared length %lld are unused", i, end - pos, (long long)length);
        const long long offset = base_offset + offset_delta;
        if (offset < min_offset || (stop_offset >= 0 && offset >= stop_offset))
            continue;
        PyObject *headers;
        if (n_headers == 0) {
            headers = empty;
            Py_INCREF(headers);
        } else {
            if (!(headers = PyTuple_New((Py_ssize_t)n_headers)))
                goto fail;
            Py_ssize_t p = hpos;
            for (int64_t h = 0; h < n_headers; h++) {
                int64_t hk = 0, hv = -1;
                read_varlong(buf, end, &p, &hk);
                PyObject *key = PyUnicode_DecodeUTF8((const char *)buf + p, (Py_ssize_t)hk, "replace");
                p += (Py_ssize_t)hk;
                read_varlong(buf, end, &p, &hv);
                PyObject *val = bytes_or_none(buf + p, hv);
                if (hv > 0)
                    p += (Py_ssize_t)hv;
                PyObject *pair = (key && val) ? PyTuple_Pack(2, key, val) : NULL;
                Py_XDECREF(key);
                Py_XDECREF(val);
                if (!pair) {
                    Py_DECREF(headers);
                    goto fail;
                }
                PyObject_GC_UnTrack(pair);                  /* a str and bytes/None: no cycle through it */
                PyTuple_SET_ITEM(headers, (Py_ssize_t)h, pair);
            }
            PyObject_GC_UnTrack(headers);
        }
        PyObject *rec = type->tp_alloc(type, 9);
        if (!rec) {
            Py_DECREF(headers);
            goto fail;
        }
        PyObject *ts = py_append ? (Py_INCREF(py_append), py_append)
                                 : PyLong_FromLongLong((long long)((uint64_t)first_ts + (uint64_t)ts_delta));
        Py_INCREF(topic);
        PyTuple_SET_ITEM(rec, 0, topic);
        Py_INCREF(py_partition);
        PyTuple_SET_ITEM(rec, 1, py_partition);
        PyTuple_SET_ITEM(rec, 2, PyLong_FromLongLong(offset));
        PyTuple_SET_ITEM(rec, 3, ts);
        PyTuple_SET_ITEM(rec, 4, bytes_or_none(buf + kpos, klen));
        PyTuple_SET_ITEM(rec, 5, bytes_or_none(buf + vpos, vlen));
        PyTuple_SET_ITEM(rec, 6, headers);
        Py_INCREF(py_epoch);
        PyTuple_SET_ITEM(rec, 7, py_epoch);
        Py_INCREF(py_ts_type);
        PyTuple_SET_ITEM(rec, 8, py_ts_type);
        for (int f = 2; f < 6; f++) {
            if (PyTuple_GET_ITEM(rec, f) == NULL) {
                Py_DECREF(rec);
                goto fail;
            }
        }
        /* Only str, int, bytes/None and untracked tuples inside: as CPython's own
         * _PyTuple_MaybeUntrack would decide at the next collection. Untracked now,
         * the cyclic GC never walks the records a poll buffers (it cost 3-4x the decode). */
        PyObject_GC_UnTrack(rec);
        int rc = PyList_Append(out, rec);
        Py_DECREF(rec);
        if (rc < 0)
            goto fail;
    }
    if (pos != size)
        FAILD("%zd bytes follow the last of the %lld records", size - pos, count);
    result = PyLong_FromSsize_t(PyList_GET_SIZE(out) - start_len);
    goto done;
fail:
    if (PyList_GET_SIZE(out) > start_len)
        PyList_SetSlice(out, start_len, PyList_GET_SIZE(out), NULL);
done:
    Py_XDECREF(py_partition);
    Py_XDECREF(py_epoch);
    Py_XDECREF(py_append);
    Py_XDECREF(py_ts_type);
    Py_XDECREF(empty);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(records, record_count, first_timestamp) -> max_timestamp; ValueError unless the records "
     "section holds exactly record_count well-framed records with offset deltas 0..record_count-1."},
    {"decode", decode, METH_VARARGS,
     "decode(records, record_count, base_offset, first_timestamp, append_time, min_offset, stop_offset, cls, "
     "topic, partition, leader_epoch, out) -> appended; the consumer's decoder (see the source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordscan(void)
{
    return PyModule_Create(&module);
}
