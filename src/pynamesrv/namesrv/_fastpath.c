/*
 * The route-query fast path's hot loop, compiled: cut a read into frames, find each opaque,
 * look its shape up, join the prebuilt answers. Exactly what RouteQueryFastPath.answer_read
 * does in Python (fastpath.py), which stays the reference and the fallback: the tests feed
 * both the same streams and require the same bytes.
 *
 * A shape is a Python list: [generation, tail, heads, hits, ...] where heads is a list of 11
 * items (index = opaque digit count, 1..10), each bytes or None. This function answers only
 * when every frame of the read is a plain JSON route query whose shape is known, current
 * (its generation is the registry's) and has its head built; anything else returns None and
 * the Python path decides (it learns shapes, rebuilds answers, or leaves the read to the
 * decoder). So does a read whose answers would be longer than the limit (the optional fourth
 * argument): the normal path answers it a write buffer at a time. It never raises on input
 * bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define SHAPE_GENERATION 0
#define SHAPE_TAIL 1
#define SHAPE_HEADS 2
#define SHAPE_HITS 3
#define MAX_DIGITS 10
#define MAX_FRAMES 4096

static const char OPAQUE_KEY[] = "\"opaque\":";
static const char INT32_MAX_TEXT[] = "2147483647";

typedef struct {
    const char *digits;
    Py_ssize_t size;
    PyObject *shape; /* borrowed, as are head and tail: the shapes dict holds them */
    PyObject *head;
    PyObject *tail;
} Answer;

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static const char *find(const char *start, const char *end, const char *needle, size_t n) {
    if (end - start < (Py_ssize_t)n) return NULL;
    return memmem(start, (size_t)(end - start), needle, n);
}

static PyObject *answer_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 3 || nargs > 4 || !PyBytes_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "answer_read(data: bytes, shapes: dict, generation, limit=None)");
        return NULL;
    }
    PyObject *data = args[0], *shapes = args[1], *generation = args[2];
    Py_ssize_t limit = PY_SSIZE_T_MAX;
    if (nargs == 4 && args[3] != Py_None) {
        limit = PyLong_AsSsize_t(args[3]);
        if (limit == -1 && PyErr_Occurred()) return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t total = PyBytes_GET_SIZE(data), pos = 0, count = 0, out_size = 0;
    Answer answers[64];
    Answer *found = answers;
    Py_ssize_t capacity = 64;
    PyObject *result = NULL;

    while (pos < total) {
        if (total - pos < 8 || count >= MAX_FRAMES) goto decline;
        int64_t length = (int32_t)be32(buf + pos);
        uint32_t header_length = be32(buf + pos + 4);
        int64_t frame_end = pos + 4 + length;
        /* No body, JSON (a non-zero high byte makes the word larger), and all arrived. */
        if (length < 4 || (int64_t)header_length != length - 4 || frame_end > total) goto decline;
        const char *header = (const char *)buf + pos + 8, *header_end = (const char *)buf + frame_end;
        pos = (Py_ssize_t)frame_end;
        const char *key_at = find(header, header_end, OPAQUE_KEY, sizeof(OPAQUE_KEY) - 1);
        if (key_at == NULL) goto decline;
        const char *begin = key_at + sizeof(OPAQUE_KEY) - 1;
        const char *end = memchr(begin, ',', (size_t)(header_end - begin));
        if (end == NULL) end = memchr(begin, '}', (size_t)(header_end - begin));
        if (end == NULL) goto decline;
        Py_ssize_t size = end - begin;
        if (size < 1 || size > MAX_DIGITS) goto decline;
        for (Py_ssize_t i = 0; i < size; i++)
            if (begin[i] < '0' || begin[i] > '9') goto decline;
        if (size > 1 && begin[0] == '0') goto decline;
        if (size == MAX_DIGITS && memcmp(begin, INT32_MAX_TEXT, MAX_DIGITS) > 0) goto decline;

        Py_ssize_t before = begin - header, after = header_end - end;
        PyObject *key = PyBytes_FromStringAndSize(NULL, before + after);
        if (key == NULL) goto error;
        memcpy(PyBytes_AS_STRING(key), header, (size_t)before);
        memcpy(PyBytes_AS_STRING(key) + before, end, (size_t)after);
        PyObject *shape = PyDict_GetItemWithError(shapes, key); /* borrowed */
        Py_DECREF(key);
        if (shape == NULL) {
            if (PyErr_Occurred()) goto error;
            goto decline;
        }
        if (!PyList_Check(shape) || PyList_GET_SIZE(shape) <= SHAPE_HITS) goto decline;
        PyObject *shape_generation = PyList_GET_ITEM(shape, SHAPE_GENERATION);
        if (shape_generation != generation) {
            int same = PyObject_RichCompareBool(shape_generation, generation, Py_EQ);
            if (same < 0) goto error;
            if (!same) goto decline;
        }
        PyObject *heads = PyList_GET_ITEM(shape, SHAPE_HEADS);
        PyObject *tail = PyList_GET_ITEM(shape, SHAPE_TAIL);
        if (!PyList_Check(heads) || PyList_GET_SIZE(heads) <= MAX_DIGITS || !PyBytes_Check(tail))
            goto decline;
        PyObject *head = PyList_GET_ITEM(heads, size);
        if (!PyBytes_Check(head)) goto decline; /* not built yet: Python builds it */

        if (count == capacity) {
            Answer *bigger = PyMem_Malloc(sizeof(Answer) * (size_t)capacity * 2);
            if (bigger == NULL) { PyErr_NoMemory(); goto error; }
            memcpy(bigger, found, sizeof(Answer) * (size_t)count);
            if (found != answers) PyMem_Free(found);
            found = bigger;
            capacity *= 2;
        }
        found[count].shape = shape;
        found[count].digits = begin;
        found[count].size = size;
        found[count].head = head;
        found[count].tail = tail;
        out_size += PyBytes_GET_SIZE(head) + size + PyBytes_GET_SIZE(tail);
        count++;
    }
    if (count == 0 || out_size > limit) goto decline;

    /* Every frame is answerable: count each shape's hit (for the per-topic counts), then
     * write the answers. Nothing ran Python code since the look-ups, so the borrowed
     * references are still the dict's. */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *old = PyList_GET_ITEM(found[i].shape, SHAPE_HITS);
        Py_ssize_t hits = PyLong_AsSsize_t(old);
        if (hits == -1 && PyErr_Occurred()) goto error;
        PyObject *more = PyLong_FromSsize_t(hits + 1);
        if (more == NULL) goto error;
        PyList_SET_ITEM(found[i].shape, SHAPE_HITS, more);
        Py_DECREF(old); /* an int: freeing it runs no Python code */
    }
    PyObject *joined = PyBytes_FromStringAndSize(NULL, out_size);
    if (joined == NULL) goto error;
    char *out = PyBytes_AS_STRING(joined);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n = PyBytes_GET_SIZE(found[i].head);
        memcpy(out, PyBytes_AS_STRING(found[i].head), (size_t)n);
        out += n;
        memcpy(out, found[i].digits, (size_t)found[i].size);
        out += found[i].size;
        n = PyBytes_GET_SIZE(found[i].tail);
        memcpy(out, PyBytes_AS_STRING(found[i].tail), (size_t)n);
        out += n;
    }
    result = Py_BuildValue("(Nn)", joined, count);
    goto done;

decline:
    result = Py_NewRef(Py_None);
    goto done;
error:
    result = NULL;
done:
    if (found != answers) PyMem_Free(found);
    return result;
}

static PyMethodDef methods[] = {
    {"answer_read", (PyCFunction)(void (*)(void))answer_read, METH_FASTCALL,
     "answer_read(data, shapes, generation, limit=None) -> (answers, count) or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastpath",
    "The compiled hot loop of pynamesrv.namesrv.fastpath (see its docstring).", -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void) { return PyModule_Create(&module); }
