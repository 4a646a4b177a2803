/*
 * The registration decode's per-topic loops, compiled: each turns a registration's topic
 * entries into the routed rows the tables keep, (topicName, readQueueNums, writeQueueNums,
 * perm, topicSysFlag), for as long as the entries are the usual kind, and returns the index
 * of the first that is not. The caller (model.py) decodes that one the general way, with its
 * conversions and errors, and carries on; without this module it does every entry in Python
 * (the reference: the tests decode the same bodies both ways and require the same result).
 *
 * The usual kind:
 * - JSON: an exact dict with an exact str topicName, and each number member missing (Java's
 *   default) or an exact int within Java's int range. Exactly the inline check of
 *   model._extend_routed_json, so both stop at the same entry.
 * - compressed: a length-prefixed chunk complete in the inflated buffer, holding an ASCII
 *   line of exactly five space-separated tokens, the last not empty, tokens 2-4 an optional
 *   '-' and 1-10 decimal digits within Java's int range. A subset of what int() and
 *   model._routed_line accept; anything else is left to them (this loop returns the
 *   position of that chunk instead of an index).
 * Neither raises on what a broker sends: only on wrong argument types or no memory.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *KEY_NAME, *KEY_READ, *KEY_WRITE, *KEY_PERM, *KEY_SYS_FLAG;
static PyObject *SIXTEEN, *SIX, *ZERO;

/* An exact int in Java's int range. */
static int java_int(PyObject *value) {
    if (!PyLong_CheckExact(value)) return 0;
    int overflow = 0;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    return !overflow && number >= INT32_MIN && number <= INT32_MAX;
}

/* ``start`` within [0, size] (as range(start, size) sees it); -1 with an error set. */
static Py_ssize_t clamped_start(PyObject *start, Py_ssize_t size) {
    Py_ssize_t index = PyLong_AsSsize_t(start);
    if (index == -1 && PyErr_Occurred()) return -1;
    return index < 0 ? 0 : (index > size ? size : index);
}

static PyObject *extend_routed_json(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "extend_routed_json(entries: list, start: int, routed: list)");
        return NULL;
    }
    PyObject *entries = args[0], *routed = args[2];
    Py_ssize_t index = clamped_start(args[1], PyList_GET_SIZE(entries));
    if (index < 0) return NULL;
    PyObject *const keys[4] = {KEY_READ, KEY_WRITE, KEY_PERM, KEY_SYS_FLAG};
    PyObject *const defaults[4] = {SIXTEEN, SIXTEEN, SIX, ZERO};
    for (; index < PyList_GET_SIZE(entries); index++) {
        PyObject *entry = PyList_GET_ITEM(entries, index);
        if (!PyDict_CheckExact(entry)) break;
        PyObject *name = PyDict_GetItemWithError(entry, KEY_NAME); /* borrowed */
        if (name == NULL && PyErr_Occurred()) return NULL;
        if (name == NULL || !PyUnicode_CheckExact(name)) break;
        PyObject *numbers[4];
        int usual = 1;
        for (int field = 0; field < 4 && usual; field++) {
            PyObject *value = PyDict_GetItemWithError(entry, keys[field]);
            if (value == NULL) {
                if (PyErr_Occurred()) return NULL;
                value = defaults[field];
            } else if (!java_int(value)) {
                usual = 0;
            }
            numbers[field] = value;
        }
        if (!usual) break;
        PyObject *row = PyTuple_Pack(5, name, numbers[0], numbers[1], numbers[2], numbers[3]);
        if (row == NULL) return NULL;
        int failed = PyList_Append(routed, row);
        Py_DECREF(row);
        if (failed) return NULL;
    }
    return PyLong_FromSsize_t(index);
}

/* An optional '-' and 1-10 ASCII digits, in Java's int range, into *out. */
static int parse_java_int(const char *start, const char *end, long long *out) {
    int negative = start < end && *start == '-';
    const char *p = start + negative;
    if (p == end || end - p > 10) return 0;
    long long number = 0;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return 0;
        number = number * 10 + (*p - '0');
    }
    if (negative) number = -number;
    if (number < INT32_MIN || number > INT32_MAX) return 0;
    *out = number;
    return 1;
}

static PyObject *extend_routed_buffer(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyByteArray_CheckExact(args[0]) || !PyList_CheckExact(args[3]) ||
        !PyList_CheckExact(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "extend_routed_buffer(buffer: bytearray, pos: int, limit: int, "
                        "routed: list, lines: list)");
        return NULL;
    }
    PyObject *routed = args[3], *lines = args[4];
    const char *buffer = PyByteArray_AS_STRING(args[0]);
    Py_ssize_t end = PyByteArray_GET_SIZE(args[0]);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if (limit == -1 && PyErr_Occurred()) return NULL;
    if (pos < 0) pos = 0;
    for (Py_ssize_t taken = 0; taken < limit && pos <= end - 4; taken++) {
        const unsigned char *head = (const unsigned char *)buffer + pos;
        int32_t size = (int32_t)(((uint32_t)head[0] << 24) | ((uint32_t)head[1] << 16) |
                                 ((uint32_t)head[2] << 8) | head[3]);
        if (size < 0 || size > end - pos - 4) break;
        const char *text = buffer + pos + 4;
        Py_ssize_t spaces[4];
        int count = 0, usual = 1;
        for (Py_ssize_t i = 0; i < size && usual; i++) {
            unsigned char c = (unsigned char)text[i];
            if (c >= 0x80) {
                usual = 0; /* not ASCII: str.decode and its errors decide */
            } else if (c == ' ') {
                if (count == 4) usual = 0;
                else spaces[count++] = i;
            }
        }
        if (!usual || count != 4 || spaces[3] + 1 >= size) break;
        long long read, write, perm;
        if (!parse_java_int(text + spaces[0] + 1, text + spaces[1], &read) ||
            !parse_java_int(text + spaces[1] + 1, text + spaces[2], &write) ||
            !parse_java_int(text + spaces[2] + 1, text + spaces[3], &perm))
            break;
        PyObject *line = PyUnicode_DecodeASCII(text, size, NULL);
        if (line == NULL) return NULL;
        PyObject *name = PyUnicode_Substring(line, 0, spaces[0]);
        PyObject *read_obj = PyLong_FromLongLong(read);
        PyObject *write_obj = PyLong_FromLongLong(write);
        PyObject *perm_obj = PyLong_FromLongLong(perm);
        PyObject *row = NULL;
        if (name != NULL && read_obj != NULL && write_obj != NULL && perm_obj != NULL)
            row = PyTuple_Pack(5, name, read_obj, write_obj, perm_obj, ZERO);
        Py_XDECREF(name);
        Py_XDECREF(read_obj);
        Py_XDECREF(write_obj);
        Py_XDECREF(perm_obj);
        int failed = row == NULL || PyList_Append(routed, row) || PyList_Append(lines, line);
        Py_XDECREF(row);
        Py_DECREF(line);
        if (failed) return NULL;
        pos += 4 + (Py_ssize_t)size;
    }
    return PyLong_FromSsize_t(pos);
}

static PyMethodDef methods[] = {
    {"extend_routed_json", (PyCFunction)(void (*)(void))extend_routed_json, METH_FASTCALL,
     "extend_routed_json(entries, start, routed) -> index of the first entry not taken"},
    {"extend_routed_buffer", (PyCFunction)(void (*)(void))extend_routed_buffer, METH_FASTCALL,
     "extend_routed_buffer(buffer, pos, limit, routed, lines) -> position after the lines taken"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_routed",
    "The compiled per-topic loops of the registration decode (see model.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__routed(void) {
    KEY_NAME = PyUnicode_InternFromString("topicName");
    KEY_READ = PyUnicode_InternFromString("readQueueNums");
    KEY_WRITE = PyUnicode_InternFromString("writeQueueNums");
    KEY_PERM = PyUnicode_InternFromString("perm");
    KEY_SYS_FLAG = PyUnicode_InternFromString("topicSysFlag");
    SIXTEEN = PyLong_FromLong(16);
    SIX = PyLong_FromLong(6);
    ZERO = PyLong_FromLong(0);
    if (!KEY_NAME || !KEY_READ || !KEY_WRITE || !KEY_PERM || !KEY_SYS_FLAG || !SIXTEEN ||
        !SIX || !ZERO)
        return NULL;
    return PyModule_Create(&module);
}
