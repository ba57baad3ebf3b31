/* A telemetry record's tag (`tm-mac`, bus/telemetry_keys.py), made and checked in one call each:
 * SipHash-2-4 with its 128-bit output (Aumasson and Bernstein, https://github.com/veorq/SipHash, whose
 * test vectors tests/unit/bus/test_tagcheck.py checks), keyed with the node's 16-byte key for the
 * deployment. The detector checks every record it reads; SipHash is a PRF made for short inputs, and
 * a check here costs a fraction of a keyed BLAKE2b's from Python (docs/security.md, "What the check
 * costs"). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KEY 16
#define TAG 16
#define HEADER "tm-mac" /* the header that carries a record's tag */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                  \
    do {                          \
        v0 += v1;                 \
        v1 = ROTL(v1, 13);        \
        v1 ^= v0;                 \
        v0 = ROTL(v0, 32);        \
        v2 += v3;                 \
        v3 = ROTL(v3, 16);        \
        v3 ^= v2;                 \
        v0 += v3;                 \
        v3 = ROTL(v3, 21);        \
        v3 ^= v0;                 \
        v2 += v1;                 \
        v1 = ROTL(v1, 17);        \
        v1 ^= v2;                 \
        v2 = ROTL(v2, 32);        \
    } while (0)

static inline uint64_t load64(const uint8_t *p) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
#else
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
#endif
}

static inline void store64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The tag of `in` (n bytes) under the state keyed() made from a key: SipHash-2-4-128. */
static void siphash128(const uint8_t state[32], const uint8_t *in, size_t n, uint8_t out[TAG]) {
    uint64_t v0 = load64(state), v1 = load64(state + 8), v2 = load64(state + 16), v3 = load64(state + 24);
    uint64_t b = (uint64_t)n << 56, m;
    const uint8_t *end = in + n - (n % 8);
    for (; in != end; in += 8) {
        m = load64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t i = 0; i < (n & 7); i++) b |= (uint64_t)in[i] << (8 * i);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xee;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    store64(out, v0 ^ v1 ^ v2 ^ v3);
    v1 ^= 0xdd;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    store64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}

/* keyed(key) -> SipHash's initial state under a 16-byte key, for a 128-bit tag: 32 bytes. */
static PyObject *keyed(PyObject *self, PyObject *arg) {
    Py_buffer key;
    if (PyObject_GetBuffer(arg, &key, PyBUF_SIMPLE) < 0) return NULL;
    if (key.len != KEY) {
        PyBuffer_Release(&key);
        return PyErr_Format(PyExc_ValueError, "a node's tag key is %d bytes, not %zd", KEY, key.len);
    }
    uint64_t k0 = load64(key.buf), k1 = load64((const uint8_t *)key.buf + 8);
    PyBuffer_Release(&key);
    uint8_t state[32];
    store64(state, k0 ^ 0x736f6d6570736575ULL);
    store64(state + 8, k1 ^ 0x646f72616e646f6dULL ^ 0xee); /* 0xee: the 128-bit output */
    store64(state + 16, k0 ^ 0x6c7967656e657261ULL);
    store64(state + 24, k1 ^ 0x7465646279746573ULL);
    return PyBytes_FromStringAndSize((const char *)state, 32);
}

/* 1 when `tag` is `value`'s tag under `state` (keyed's), 0 when not or when it is no 16-byte tag
 * (None, a str: what a header may hold); -1 with an error for a state or value of the wrong type. */
static int verify(PyObject *state, PyObject *value, PyObject *tag) {
    if (!PyBytes_CheckExact(state) || PyBytes_GET_SIZE(state) != 32 || !PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "a 32-byte state (keyed) and a bytes value");
        return -1;
    }
    if (!PyBytes_Check(tag) || PyBytes_GET_SIZE(tag) != TAG) return 0;
    uint8_t out[TAG];
    siphash128((const uint8_t *)PyBytes_AS_STRING(state), (const uint8_t *)PyBytes_AS_STRING(value),
               (size_t)PyBytes_GET_SIZE(value), out);
    const uint8_t *want = (const uint8_t *)PyBytes_AS_STRING(tag);
    uint8_t diff = 0; /* every byte compared: the time says nothing of where a forged tag differs */
    for (int i = 0; i < TAG; i++) diff |= out[i] ^ want[i];
    return diff == 0;
}

static PyObject *result(int ok) { return ok < 0 ? NULL : PyBool_FromLong(ok); }

/* tag(state, value) -> value's 16-byte tag under state (keyed's). */
static PyObject *tag(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "tag(state, value) takes 2 arguments");
    PyObject *state = args[0], *value = args[1];
    if (!PyBytes_CheckExact(state) || PyBytes_GET_SIZE(state) != 32 || !PyBytes_Check(value))
        return PyErr_Format(PyExc_TypeError, "tag(state, value): a 32-byte state (keyed) and a bytes value");
    uint8_t out[TAG];
    siphash128((const uint8_t *)PyBytes_AS_STRING(state), (const uint8_t *)PyBytes_AS_STRING(value),
               (size_t)PyBytes_GET_SIZE(value), out);
    return PyBytes_FromStringAndSize((const char *)out, TAG);
}

/* check(state, value, tag) -> whether tag is value's tag under state (keyed's). */
static PyObject *check(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) return PyErr_Format(PyExc_TypeError, "check(state, value, tag) takes 3 arguments");
    return result(verify(args[0], args[1], args[2]));
}

/* first(states, node, value, headers) -> whether `states` (a dict: node -> its state) holds `node`'s
 * and the first of `headers` (a list of (name, value) pairs, as confluent-kafka gives them) is HEADER
 * with the value's tag. The detector's hot path, in one call. */
static PyObject *first(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4)
        return PyErr_Format(PyExc_TypeError, "first(states, node, value, headers) takes 4 arguments");
    PyObject *states = args[0], *headers = args[3];
    if (!PyDict_CheckExact(states)) return PyErr_Format(PyExc_TypeError, "first: states is a dict");
    PyObject *state = PyDict_GetItemWithError(states, args[1]); /* borrowed */
    if (state == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_False);
    if (!PyList_CheckExact(headers) || PyList_GET_SIZE(headers) == 0) Py_RETURN_FALSE;
    PyObject *pair = PyList_GET_ITEM(headers, 0);
    if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) Py_RETURN_FALSE;
    PyObject *name = PyTuple_GET_ITEM(pair, 0);
    if (!PyUnicode_CheckExact(name) || PyUnicode_CompareWithASCIIString(name, HEADER) != 0) Py_RETURN_FALSE;
    return result(verify(state, args[2], PyTuple_GET_ITEM(pair, 1)));
}

static PyMethodDef methods[] = {
    {"keyed", keyed, METH_O, "keyed(key) -> the state for tag and check under a node's 16-byte key"},
    {"tag", (PyCFunction)(void (*)(void))tag, METH_FASTCALL, "tag(state, value) -> value's 16-byte tag"},
    {"check", (PyCFunction)(void (*)(void))check, METH_FASTCALL,
     "check(state, value, tag) -> whether tag is value's tag under state"},
    {"first", (PyCFunction)(void (*)(void))first, METH_FASTCALL,
     "first(states, node, value, headers) -> whether states holds node's and headers[0] is its tag"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tagcheck",
                                    "Telemetry tags, made and checked in C (bus/telemetry_keys.py)", -1,
                                    methods};

PyMODINIT_FUNC PyInit__tagcheck(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "HEADER", HEADER) < 0) Py_CLEAR(m);
    return m;
}
