/*
 * _scan.c -- the JSON-lines hot path: one block of bytes -> typed columns of the event table.
 *
 * Owns: a strict JSON scanner for lines in the seed schema (and flat metric lines), typing of
 * known metrics (aliases, unit factors, `key=value` in messages), ISO-8601 timestamps, and the
 * column buffers handed to pyarrow without copies of the values.
 *
 * Must not decide anything the Python path (jsonl.py / normalize.py) does not decide the same
 * way. Its one escape hatch is "fallback": any line it is not certain about -- invalid or
 * unusual JSON, a value of an unexpected type, a number it would have to round, a timestamp in
 * another form, an envelope alias -- is returned by index and parsed by the Python path, which
 * keeps every line or rejects it with a reason. tests/test_native_scan.py checks, line for line,
 * that the two paths agree on everything the scanner accepts.
 *
 * The scan runs without the GIL, so blocks are scanned on all cores by the ingest thread pool.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ------------------------------------------------------------------ buffers */

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    char *q = realloc(b->p, cap);
    if (!q) return -1;
    b->p = q;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, size_t n) {
    if (n == 0) return 0; /* an empty string: src may be NULL and b->p still unallocated (UB in memcpy) */
    if (buf_reserve(b, n)) return -1;
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

static void buf_free(Buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ------------------------------------------------------------------ configuration */

enum { K_F64 = 0, K_I64 = 1, K_I32 = 2, K_STR = 3 };
enum { E_TS = 0, E_RANK, E_HOST, E_LEVEL, E_EVENT, E_MESSAGE, E_EXTRA, E_ALIAS = 100 };
enum { P_FIELDS = 0, P_EXTRA = 1, P_MSG = 2 };

#define MAX_METRICS 64
#define HSIZE 2048
#define MAX_FIELDS 256
#define MAX_DEPTH 64

typedef struct {
    char *name;
    int len;
    uint64_t w0, w1; /* the name's first 16 bytes, zero-padded (names up to 16 bytes) */
    int env;        /* E_* or -1 */
    int metric;     /* index into metrics, or -1 */
    double factor;
    int order;      /* position in ALIASES: earlier wins within one prefix */
    int msg;        /* usable as `key=value` in messages */
} Entry;

typedef struct {
    char *name;
    int len;
    int code;
} Level;

static int g_ready = 0;
static int g_nm = 0;
static int g_kind[MAX_METRICS];
static int g_step = -1, g_loss = -1;
static Entry g_tab[HSIZE];
static Level g_lev[256];
static int g_nlev = 0;
static int g_minkey = 1 << 30, g_maxkey = 0;  /* message keys' length range */

/* Keys up to 16 bytes are compared as two 64-bit words (zero-padded), and hashed from them. */
static inline void key_words(const char *s, size_t n, size_t avail, uint64_t *w0, uint64_t *w1) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (avail >= 16) {
        memcpy(w0, s, 8);
        memcpy(w1, s + 8, 8);
        if (n < 8) {
            *w0 &= n ? (~0ull >> (64 - 8 * n)) : 0;
            *w1 = 0;
        } else if (n < 16) {
            *w1 &= n > 8 ? (~0ull >> (64 - 8 * (n - 8))) : 0;
        }
        return;
    }
#endif
    char tmp[16] = {0};
    memcpy(tmp, s, n);
    memcpy(w0, tmp, 8);
    memcpy(w1, tmp + 8, 8);
}

static inline uint32_t mix(uint64_t h) {
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    return (uint32_t)(h >> 32);
}

static inline uint32_t hash_long(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return mix(h);
}

static inline uint32_t hash_words(uint64_t w0, uint64_t w1, size_t n) {
    return mix((w0 * 0x9E3779B97F4A7C15ull) ^ (w1 * 0xC2B2AE3D27D4EB4Full) ^ ((uint64_t)n << 56));
}

/* Short keys: a byte loop beats a call to memcmp. */
static inline int key_eq(const char *a, int an, const char *b, size_t bn) {
    if ((size_t)an != bn) return 0;
    for (size_t i = 0; i < bn; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* The entry named s[0..n); `avail` bytes can be read from s (for the word loads). */
static Entry *lookup(const char *s, size_t n, size_t avail) {
    if (n <= 16) {
        uint64_t w0, w1;
        key_words(s, n, avail, &w0, &w1);
        uint32_t h = hash_words(w0, w1, n) & (HSIZE - 1);
        for (;;) {
            Entry *e = &g_tab[h];
            if (!e->name) return NULL;
            if (e->w0 == w0 && e->w1 == w1 && (size_t)e->len == n) return e;
            h = (h + 1) & (HSIZE - 1);
        }
    }
    uint32_t h = hash_long(s, n) & (HSIZE - 1);
    for (;;) {
        Entry *e = &g_tab[h];
        if (!e->name) return NULL;
        if (key_eq(e->name, e->len, s, n)) return e;
        h = (h + 1) & (HSIZE - 1);
    }
}

static Entry *insert(const char *s, size_t n) {
    uint64_t w0 = 0, w1 = 0;
    if (n <= 16) key_words(s, n, 0, &w0, &w1);
    uint32_t h = (n <= 16 ? hash_words(w0, w1, n) : hash_long(s, n)) & (HSIZE - 1);
    for (int tries = 0; tries < HSIZE; tries++) {
        Entry *e = &g_tab[h];
        if (!e->name) {
            e->name = malloc(n + 1);
            if (!e->name) return NULL;
            memcpy(e->name, s, n);
            e->name[n] = 0;
            e->len = (int)n;
            e->w0 = w0;
            e->w1 = w1;
            e->env = -1;
            e->metric = -1;
            e->factor = 1.0;
            e->order = 0;
            e->msg = 0;
            return e;
        }
        if ((size_t)e->len == n && memcmp(e->name, s, n) == 0) return e;
        h = (h + 1) & (HSIZE - 1);
    }
    return NULL;
}

/* configure(kinds, aliases, envelope, levels, step_index, loss_index)
 *   kinds: list of K_* per metric (metric order = the event table's column order)
 *   aliases: list of (name, metric_index, factor, order, usable_in_message)
 *   envelope: list of (name, E_* code)  -- canonical keys and their aliases (E_ALIAS)
 *   levels: list of (spelling, code)
 */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *kinds, *aliases, *envelope, *levels;
    int step, loss;
    if (!PyArg_ParseTuple(args, "O!O!O!O!ii", &PyList_Type, &kinds, &PyList_Type, &aliases, &PyList_Type,
                          &envelope, &PyList_Type, &levels, &step, &loss))
        return NULL;
    if (g_ready) Py_RETURN_NONE; /* the tables are the schema's: fixed for the process */
    Py_ssize_t nm = PyList_GET_SIZE(kinds);
    if (nm > MAX_METRICS) {
        PyErr_SetString(PyExc_ValueError, "too many metrics");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nm; i++) g_kind[i] = (int)PyLong_AsLong(PyList_GET_ITEM(kinds, i));
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(aliases); i++) {
        const char *name;
        Py_ssize_t n;
        int metric, order, msg;
        double factor;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(aliases, i), "s#idii", &name, &n, &metric, &factor, &order, &msg))
            return NULL;
        Entry *e = insert(name, (size_t)n);
        if (!e) return PyErr_NoMemory();
        e->metric = metric;
        e->factor = factor;
        e->order = order;
        e->msg = msg;
        if (msg) {
            if (n < g_minkey) g_minkey = (int)n;
            if (n > g_maxkey) g_maxkey = (int)n;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(envelope); i++) {
        const char *name;
        Py_ssize_t n;
        int code;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(envelope, i), "s#i", &name, &n, &code)) return NULL;
        Entry *e = insert(name, (size_t)n);
        if (!e) return PyErr_NoMemory();
        e->env = code;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(levels) && g_nlev < 256; i++) {
        const char *name;
        Py_ssize_t n;
        int code;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(levels, i), "s#i", &name, &n, &code)) return NULL;
        g_lev[g_nlev].name = malloc((size_t)n + 1);
        if (!g_lev[g_nlev].name) return PyErr_NoMemory();
        memcpy(g_lev[g_nlev].name, name, (size_t)n);
        g_lev[g_nlev].len = (int)n;
        g_lev[g_nlev].code = code;
        g_nlev++;
    }
    g_nm = (int)nm;
    g_step = step;
    g_loss = loss;
    g_ready = 1;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ JSON scanning */

typedef struct {
    const char *p, *end;
} Cur;

static inline void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) c->p++;
}

static inline int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Length of a valid UTF-8 sequence starting at s (first byte >= 0x80), or 0. Strict: no
 * overlong forms, no surrogates, nothing above U+10FFFF. */
static inline int utf8_len(const unsigned char *s, const unsigned char *end) {
    unsigned char b = s[0];
    if (b >= 0xC2 && b <= 0xDF) {
        if (end - s < 2 || (s[1] & 0xC0) != 0x80) return 0;
        return 2;
    }
    if (b >= 0xE0 && b <= 0xEF) {
        if (end - s < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (b == 0xE0 && s[1] < 0xA0) return 0;
        if (b == 0xED && s[1] >= 0xA0) return 0;
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (end - s < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        if (b == 0xF0 && s[1] < 0x90) return 0;
        if (b == 0xF4 && s[1] >= 0x90) return 0;
        return 4;
    }
    return 0;
}

/* A string token at c->p ('"'). Sets [*s, *s+*n) to the raw contents (between the quotes),
 * *esc when it holds escapes. 0 ok, -1 fallback. */
static int scan_string(Cur *c, const char **s, size_t *n, int *esc) {
    const unsigned char *p = (const unsigned char *)c->p + 1, *end = (const unsigned char *)c->end;
    *s = (const char *)p;
    *esc = 0;
    while (p < end) {
#ifdef __SSE2__
        /* 16 bytes at a time while none is '"', '\\', a control byte or non-ASCII */
        const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            /* bytes < 0x20 or >= 0x80: signed compare v < 0x20 catches both (0x80.. are negative) */
            __m128i bad = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)), _mm_cmplt_epi8(v, space));
            int mask = _mm_movemask_epi8(bad);
            if (mask) {
                p += __builtin_ctz((unsigned)mask);
                break;
            }
            p += 16;
        }
        if (p >= end) break;
#endif
        unsigned char ch = *p;
        if (ch == '"') {
            *n = (size_t)((const char *)p - *s);
            c->p = (const char *)p + 1;
            return 0;
        }
        if (ch == '\\') {
            *esc = 1;
            if (p + 1 >= end) return -1;
            unsigned char e = p[1];
            if (e == 'u') {
                if (end - p < 6) return -1;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval((char)p[k]);
                    if (h < 0) return -1;
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) return -1; /* surrogates: leave to the Python path */
                p += 6;
                continue;
            }
            if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
                continue;
            }
            return -1;
        }
        if (ch < 0x20) return -1;
        if (ch >= 0x80) {
            int k = utf8_len(p, end);
            if (!k) return -1;
            p += k;
            continue;
        }
        p++;
    }
    return -1;
}

/* Unescape JSON string contents (already validated by scan_string) onto out. */
static int unescape(Buf *out, const char *s, size_t n) {
    if (buf_reserve(out, n)) return -1;
    char *o = out->p + out->n;
    const char *e = s + n;
    while (s < e) {
        const char *bs = memchr(s, '\\', (size_t)(e - s));
        if (!bs) {
            memcpy(o, s, (size_t)(e - s));
            o += e - s;
            break;
        }
        memcpy(o, s, (size_t)(bs - s));
        o += bs - s;
        char t = bs[1];
        s = bs + 2;
        switch (t) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            int v = (hexval(s[0]) << 12) | (hexval(s[1]) << 8) | (hexval(s[2]) << 4) | hexval(s[3]);
            s += 4;
            if (v < 0x80) {
                *o++ = (char)v;
            } else if (v < 0x800) {
                *o++ = (char)(0xC0 | (v >> 6));
                *o++ = (char)(0x80 | (v & 0x3F));
            } else {
                *o++ = (char)(0xE0 | (v >> 12));
                *o++ = (char)(0x80 | ((v >> 6) & 0x3F));
                *o++ = (char)(0x80 | (v & 0x3F));
            }
            break;
        }
        default: *o++ = t; break; /* " \ / */
        }
    }
    out->n = (size_t)(o - out->p);
    return 0;
}

/* A JSON number at c->p. *plain_int: no fraction/exponent. *sig: significant digits. */
static int scan_number(Cur *c, const char **s, size_t *n, int *plain_int, int *sig) {
    const char *p = c->p, *end = c->end;
    *s = p;
    *plain_int = 1;
    int digits = 0, lead = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') {
            digits++;
            p++;
        }
        lead = 0;
    } else {
        return -1;
    }
    if (p < end && *p == '.') {
        *plain_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (*p != '0' || !lead) {
                lead = 0;
                digits++;
            }
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *plain_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *n = (size_t)(p - *s);
    *sig = digits;
    c->p = p;
    return 0;
}

static int skip_value(Cur *c, int depth);

static int skip_container(Cur *c, int depth, char close) {
    if (depth > MAX_DEPTH) return -1;
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        return 0;
    }
    for (;;) {
        skip_ws(c);
        if (close == '}') {
            const char *ks;
            size_t kn;
            int esc;
            if (c->p >= c->end || *c->p != '"' || scan_string(c, &ks, &kn, &esc)) return -1;
            skip_ws(c);
            if (c->p >= c->end || *c->p != ':') return -1;
            c->p++;
            skip_ws(c);
        }
        if (skip_value(c, depth + 1)) return -1;
        skip_ws(c);
        if (c->p >= c->end) return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p == close) {
            c->p++;
            return 0;
        }
        return -1;
    }
}

static int skip_value(Cur *c, int depth) {
    if (c->p >= c->end) return -1;
    const char *s;
    size_t n;
    int a, b;
    switch (*c->p) {
    case '"': return scan_string(c, &s, &n, &a);
    case '{': return skip_container(c, depth, '}');
    case '[': return skip_container(c, depth, ']');
    case 't':
        if (c->end - c->p >= 4 && memcmp(c->p, "true", 4) == 0) { c->p += 4; return 0; }
        return -1;
    case 'f':
        if (c->end - c->p >= 5 && memcmp(c->p, "false", 5) == 0) { c->p += 5; return 0; }
        return -1;
    case 'n':
        if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) { c->p += 4; return 0; }
        return -1;
    default: return scan_number(c, &s, &n, &a, &b);
    }
}

/* ------------------------------------------------------------------ values */

enum { V_NULL = 0, V_STR, V_NUM, V_OTHER };

typedef struct {
    int type;
    const char *s; /* raw span: string contents, or the number's text, or the whole value */
    size_t n;
    int esc, plain_int, sig;
    const char *vs; /* the whole value's bytes, as written */
    size_t vn;
} Val;

static int scan_value(Cur *c, Val *v) {
    if (c->p >= c->end) return -1;
    v->vs = c->p;
    char ch = *c->p;
    if (ch == '"') {
        v->type = V_STR;
        if (scan_string(c, &v->s, &v->n, &v->esc)) return -1;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
        v->type = V_NUM;
        if (scan_number(c, &v->s, &v->n, &v->plain_int, &v->sig)) return -1;
    } else if (ch == 'n') {
        v->type = V_NULL;
        if (skip_value(c, 0)) return -1;
    } else {
        v->type = V_OTHER;
        if (skip_value(c, 0)) return -1;
    }
    v->vn = (size_t)(c->p - v->vs);
    return 0;
}

static const double POW10[23] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                  1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* Text of a decimal number (already validated) -> the nearest double. Clinger's fast path when
 * the digits fit in 53 bits and the power of ten is exact (one correctly rounded operation);
 * strtod otherwise. */
static double to_double(const char *s, size_t n) {
    size_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') { neg = 1; i++; }
    uint64_t mant = 0;
    int digits = 0, exp10 = 0;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (digits < 19) { mant = mant * 10 + (uint64_t)(s[i] - '0'); if (mant) digits++; }
        else goto slow;
    }
    if (i < n && s[i] == '.') {
        for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (digits < 19) { mant = mant * 10 + (uint64_t)(s[i] - '0'); if (mant) digits++; exp10--; }
            else goto slow;
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0, e = 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) { eneg = s[i] == '-'; i++; }
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            if (e > 10000) goto slow;
            e = e * 10 + (s[i] - '0');
        }
        exp10 += eneg ? -e : e;
    }
    if (mant <= (1ull << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)mant;
        d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
        return neg ? -d : d;
    }
slow:;
    char tmp[72];
    if (n > 64) return NAN;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    return strtod(tmp, NULL);
}

/* Strict decimal: -?\d+(\.\d+)?([eE][+-]?\d+)?, at most 17 significant digits (what a double
 * round-trips; longer numbers were measured to come out 1 ulp apart from the Python path's).
 * Anything else is left to the Python path. */
static int strict_decimal(const char *s, size_t n, double *out) {
    if (n == 0 || n > 64) return -1;
    size_t i = 0;
    int sig = 0, lead = 1;
    if (s[i] == '-') i++;
    size_t d0 = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (s[i] != '0' || !lead) { lead = 0; sig++; }
        i++;
    }
    if (i == d0) return -1;
    if (i < n && s[i] == '.') {
        i++;
        size_t f0 = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (s[i] != '0' || !lead) { lead = 0; sig++; }
            i++;
        }
        if (i == f0) return -1;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) i++;
        size_t e0 = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i == e0) return -1;
    }
    if (i != n || sig > 17) return -1;
    double d = to_double(s, n);
    if (!isfinite(d)) return -1;
    *out = d;
    return 0;
}

/* ------------------------------------------------------------------ per-line state */

typedef struct {
    int prio;          /* NO_VALUE: null */
    double num;
    const char *s;     /* text metrics: bytes in the line or the unescaped message (raw if esc) */
    size_t n;
    int esc;
} Slot;

typedef struct {
    Slot slot[MAX_METRICS];
    int touched[MAX_METRICS]; /* slots holding a value on this line */
    int nt;
    int has_ts;
    int64_t ts;
    int rank_state;    /* 0 absent/null, 1 value */
    int32_t rank;
    Val text[4];       /* host, level, event, message (index env - E_HOST); type V_NULL: absent */
    const char *extra_s;
    size_t extra_n;
    int nf;
    const char *fk[MAX_FIELDS];
    size_t fkn[MAX_FIELDS];
    const char *fv[MAX_FIELDS];
    size_t fvn[MAX_FIELDS];
    uint64_t seen_alias[4]; /* duplicate known keys within one object: fallback */
    uint64_t seen_msg[4];   /* message keys already matched once */
} Line;

static inline int days_in_month(int y, int m) {
    static const int d[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return d[m - 1];
}

static inline int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static inline int dig(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* YYYY-MM-DD[T ]HH:MM:SS[.f{1,9}][Z|+HH:MM|+HHMM|+HH] -> microseconds since the epoch, UTC.
 * Naive times are UTC (as in normalize.parse_timestamp). Other forms: fallback. */
static int parse_iso(const char *s, size_t n, int64_t *out) {
    int y, mo, d, h, mi, se;
    if (n < 19) return -1;
    if (dig(s, 4, &y) || s[4] != '-' || dig(s + 5, 2, &mo) || s[7] != '-' || dig(s + 8, 2, &d)) return -1;
    if (s[10] != 'T' && s[10] != ' ') return -1;
    if (dig(s + 11, 2, &h) || s[13] != ':' || dig(s + 14, 2, &mi) || s[16] != ':' || dig(s + 17, 2, &se)) return -1;
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59) return -1;
    size_t i = 19;
    int64_t us = 0;
    if (i < n && s[i] == '.') {
        i++;
        size_t f0 = i;
        int64_t scale = 100000;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            us += (s[i] - '0') * scale;
            scale /= 10;
            i++;
        }
        if (i == f0 || i - f0 > 9) return -1;
    }
    int64_t off = 0;
    if (i < n) {
        if (s[i] == 'Z') {
            i++;
        } else if (s[i] == '+' || s[i] == '-') {
            int sign = s[i] == '-' ? -1 : 1, oh, om = 0;
            i++;
            if (n - i < 2 || dig(s + i, 2, &oh)) return -1;
            i += 2;
            if (i < n && s[i] == ':') {
                if (n - i < 3 || dig(s + i + 1, 2, &om)) return -1;
                i += 3;
            } else if (n - i >= 2) {
                if (dig(s + i, 2, &om)) return -1;
                i += 2;
            }
            if (oh > 23 || om > 59) return -1;
            off = sign * (int64_t)(oh * 3600 + om * 60);
        } else {
            return -1;
        }
    }
    if (i != n) return -1;
    int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off;
    *out = secs * 1000000 + us;
    return 0;
}

#define NO_VALUE (1 << 30)

static inline void touch(Line *L, int m) {
    if (L->slot[m].prio == NO_VALUE) L->touched[L->nt++] = m;
}

/* Epoch number -> microseconds, as normalize.parse_timestamp: the magnitude says the unit
 * (1.7e9 s, 1.7e12 ms, 1.7e15 us, 1.7e18 ns), rounded half to even; 0 when out of range. */
static int epoch_us(double num, int64_t *out) {
    double a = fabs(num), us;
    if (a < 1e11) us = num * 1e6;
    else if (a < 1e14) us = num * 1e3;
    else if (a < 1e17) us = num;
    else us = num / 1e3;
    us = nearbyint(us);
    if (!(us >= -9223372036854775808.0 && us < 9223372036854775808.0)) return 0;
    *out = (int64_t)us;
    return 1;
}

/* A metric value from JSON (prefix fields/extra). 0 ok (slot maybe set), -1 fallback. */
static int put_metric(Line *L, Entry *e, int prefix, const Val *v) {
    int m = e->metric;
    int prio = prefix * 4096 + e->order;
    Slot *sl = &L->slot[m];
    int bit = e->order & 255;
    if (L->seen_alias[bit >> 6] & (1ull << (bit & 63))) return -1; /* key twice in one object */
    L->seen_alias[bit >> 6] |= 1ull << (bit & 63);
    if (v->type == V_NULL) return 0;
    if (g_kind[m] == K_STR) {
        if (v->type == V_STR) {
            if (prio < sl->prio) { touch(L, m); sl->prio = prio; sl->s = v->s; sl->n = v->n; sl->esc = v->esc; }
            return 0;
        }
        if (v->type == V_NUM && v->plain_int && !(v->n == 2 && v->s[0] == '-' && v->s[1] == '0')) {
            if (prio < sl->prio) { touch(L, m); sl->prio = prio; sl->s = v->s; sl->n = v->n; sl->esc = 0; }
            return 0;
        }
        return -1;
    }
    double d;
    if (v->type == V_NUM) {
        if (v->sig > 17 || v->n > 64) return -1;
        d = to_double(v->s, v->n);
        if (!isfinite(d)) return -1;
    } else if (v->type == V_STR) {
        if (v->esc || strict_decimal(v->s, v->n, &d)) return -1;
    } else {
        return -1;
    }
    if (e->factor != 1.0) d = d * e->factor;
    if (g_kind[m] != K_F64) {
        if (d != floor(d)) return -1;
        if (g_kind[m] == K_I32 ? (d < -2147483648.0 || d > 2147483647.0) : (d < -9.2e18 || d > 9.2e18)) return -1;
    }
    if (prio < sl->prio) { touch(L, m); sl->prio = prio; sl->num = d; }
    return 0;
}

static inline int is_ident(unsigned char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}
static inline int is_space(unsigned char ch) { return ch == ' ' || (ch >= 9 && ch <= 13); }
static inline int opens(unsigned char ch) {
    return is_space(ch) || ch == ',' || ch == ';' || ch == '(' || ch == '[' || ch == '{' || ch == '|';
}
static inline int closes(unsigned char ch) {
    return is_space(ch) || ch == ',' || ch == ';' || ch == ')' || ch == ']' || ch == '}' || ch == '|';
}
static inline int float_char(unsigned char ch) {
    return is_ident(ch) || ch == '.' || ch == '+' || ch == '-';
}

/* `key=value` pairs of known metric names in the (unescaped) message m[0..n).
 * Mirrors normalize.extract_message_metrics: for each key, the first occurrence preceded by
 * start-of-text or an opening delimiter and followed by a non-empty value wins; the value is
 * cast to a number (or kept as text for text metrics). */
static int message_metrics(Line *L, const char *m, size_t n) {
    const unsigned char *u = (const unsigned char *)m;
    for (size_t i = 0; i < n; i++) {
        if (u[i] != '=') continue;
        size_t s = i;
        while (s > 0 && is_ident(u[s - 1])) s--;
        size_t kl = i - s;
        if (kl < (size_t)g_minkey || kl > (size_t)g_maxkey) continue;
        if (s > 0) {
            if (u[s - 1] >= 0x80) return -1; /* maybe a Unicode space: let the regex decide */
            if (!opens(u[s - 1])) continue;
        }
        if (!((u[s] >= 'a' && u[s] <= 'z') || (u[s] >= 'A' && u[s] <= 'Z') || u[s] == '_')) continue;
        Entry *e = lookup(m + s, kl, n - s);
        if (!e || !e->msg) continue;
        size_t j = i + 1;
        while (j < n && !closes(u[j]) && u[j] < 0x80) j++;
        if (j < n && u[j] >= 0x80) return -1;
        if (j == i + 1) continue; /* empty value: the regex looks further on */
        Slot *sl = &L->slot[e->metric];
        int prio = P_MSG * 4096 + e->order;
        if (prio >= sl->prio) continue;
        /* the first match of this key is the one the regex takes, non-null or not */
        int bit = e->order & 255;
        if (L->seen_msg[bit >> 6] & (1ull << (bit & 63))) continue;
        L->seen_msg[bit >> 6] |= 1ull << (bit & 63);
        const char *v = m + i + 1;
        size_t vn = j - i - 1;
        if (g_kind[e->metric] == K_STR) {
            touch(L, e->metric);
            sl->prio = prio;
            sl->s = v; /* the message stays where it is until the line is emitted */
            sl->n = vn;
            sl->esc = 0;
            continue;
        }
        double d;
        if (strict_decimal(v, vn, &d) == 0) {
            if (e->factor != 1.0) d = d * e->factor;
            if (g_kind[e->metric] != K_F64) {
                if (d != floor(d)) return -1;
                if (g_kind[e->metric] == K_I32 ? (d < -2147483648.0 || d > 2147483647.0) : (d < -9.2e18 || d > 9.2e18))
                    return -1;
            }
            touch(L, e->metric);
            sl->prio = prio;
            sl->num = d;
            continue;
        }
        /* Not a plain decimal: null when it cannot be a number at all ('/', ':', '%' ...). The slot
         * stays empty (prio unchanged); touch() only listed it, which emit skips. */
        for (size_t k = 0; k < vn; k++)
            if (!float_char((unsigned char)v[k])) goto is_null;
        return -1; /* nan, inf, 1_000, .5 ...: the Python path decides */
    is_null:;
    }
    return 0;
}

/* ------------------------------------------------------------------ columns */

typedef struct {
    Buf off, data, valid;
    int64_t nnull;
    int64_t filled;    /* offsets written for rows [0, filled) */
} StrCol;

typedef struct {
    Buf val, valid;
    int64_t nvalid;
} NumCol;

enum { S_HOST = 0, S_EVENT, S_MESSAGE, S_EXTRA, S_FIELDS, S_N };

typedef struct {
    int64_t n;          /* rows emitted */
    Buf ts, ts_valid, rank, rank_valid, rank_src, level, event_src, line;
    int64_t ts_null, rank_null;
    StrCol s[S_N];
    NumCol num[MAX_METRICS];
    StrCol txt[MAX_METRICS];
    Buf fallback;       /* int64 line indices */
    Buf scratch;        /* per-line unescaped message */
    int sorted;         /* rows ordered by (rank, ts) with no nulls */
    int64_t last_rank, last_ts;
} Out;

static inline void set_bit(Buf *b, int64_t i) { ((uint8_t *)b->p)[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* Values under a null bit are never read (Arrow and Parquet skip them): no need to zero them. */
static int alloc_raw(Buf *b, size_t n) {
    b->p = malloc(n ? n : 1);
    if (!b->p) return -1;
    b->n = n;
    b->cap = n ? n : 1;
    return 0;
}

static int alloc_fixed(Buf *b, size_t n) {
    b->p = calloc(n ? n : 1, 1);
    if (!b->p) return -1;
    b->n = n;
    b->cap = n ? n : 1;
    return 0;
}

static int str_init(StrCol *c, int64_t cap) {
    if (alloc_raw(&c->off, (size_t)(cap + 1) * 8) || alloc_fixed(&c->valid, (size_t)(cap + 7) / 8)) return -1;
    ((int64_t *)c->off.p)[0] = 0;
    return 0;
}

/* Rows before `row` that got no value are nulls: their offsets repeat the current end. */
static inline void str_fill(StrCol *c, int64_t row) {
    int64_t *off = (int64_t *)c->off.p;
    for (int64_t k = c->filled; k < row; k++) off[k + 1] = (int64_t)c->data.n;
    c->nnull += row - c->filled;
    c->filled = row;
}

/* Row `row` of a text column: s[0..n) as it is, or JSON-unescaped when esc. */
static inline int str_set(StrCol *c, int64_t row, const char *s, size_t n, int esc) {
    str_fill(c, row);
    if (esc ? unescape(&c->data, s, n) : buf_put(&c->data, s, n)) return -1;
    set_bit(&c->valid, row);
    ((int64_t *)c->off.p)[row + 1] = (int64_t)c->data.n;
    c->filled = row + 1;
    return 0;
}

/* The same for text known to need no unescaping; a null (valid == 0) is written by str_fill. */
static inline int str_push(StrCol *c, int64_t row, const char *s, size_t n, int valid) {
    return valid ? str_set(c, row, s, n, 0) : 0;
}

static void out_free(Out *o) {
    buf_free(&o->ts); buf_free(&o->ts_valid); buf_free(&o->rank); buf_free(&o->rank_valid);
    buf_free(&o->rank_src); buf_free(&o->level); buf_free(&o->event_src); buf_free(&o->line);
    for (int i = 0; i < S_N; i++) { buf_free(&o->s[i].off); buf_free(&o->s[i].data); buf_free(&o->s[i].valid); }
    for (int i = 0; i < g_nm; i++) {
        buf_free(&o->num[i].val); buf_free(&o->num[i].valid);
        buf_free(&o->txt[i].off); buf_free(&o->txt[i].data); buf_free(&o->txt[i].valid);
    }
    buf_free(&o->fallback);
    buf_free(&o->scratch);
}

static int out_init(Out *o, int64_t cap) {
    memset(o, 0, sizeof(*o));
    o->sorted = 1;
    o->last_rank = -1;
    o->last_ts = INT64_MIN;
    size_t vb = (size_t)(cap + 7) / 8;
    if (alloc_raw(&o->ts, (size_t)cap * 8) || alloc_fixed(&o->ts_valid, vb) || alloc_raw(&o->rank, (size_t)cap * 4) ||
        alloc_fixed(&o->rank_valid, vb) || alloc_raw(&o->rank_src, (size_t)cap) || alloc_raw(&o->level, (size_t)cap) ||
        alloc_raw(&o->event_src, (size_t)cap) || alloc_raw(&o->line, (size_t)cap * 8))
        return -1;
    for (int i = 0; i < S_N; i++)
        if (str_init(&o->s[i], cap)) return -1;
    for (int i = 0; i < g_nm; i++) {
        if (g_kind[i] == K_STR) {
            if (str_init(&o->txt[i], cap)) return -1;
        } else {
            if (alloc_raw(&o->num[i].val, (size_t)cap * (g_kind[i] == K_I32 ? 4 : 8)) || alloc_fixed(&o->num[i].valid, vb))
                return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ one line */

typedef struct {
    int has_rank_hint;
    int32_t rank_hint;
    const char *host_hint;
    size_t host_hint_n;
    int has_host_hint;
} Hints;

/* `"key" :` and the blanks after it; the cursor ends on the value. An escaped key could spell a
 * known name: -1, and the Python path decides. */
static int read_key(Cur *c, const char **k, size_t *kn) {
    int esc;
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"' || scan_string(c, k, kn, &esc) || esc) return -1;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return -1;
    c->p++;
    skip_ws(c);
    return 0;
}

/* The `extra` object at c->p ('{'): its known keys typed (prefix extra), the whole kept as
 * written. 0 ok, 1 fallback. */
static int parse_extra(Cur *c, Line *L) {
    const char *xs = c->p;
    uint64_t saved[4]; /* duplicate keys are counted per object */
    memcpy(saved, L->seen_alias, sizeof(saved));
    memset(L->seen_alias, 0, sizeof(L->seen_alias));
    c->p++;
    skip_ws(c);
    if (c->p < c->end && *c->p == '}') {
        c->p++;
    } else {
        for (;;) {
            const char *xk;
            size_t xkn;
            if (read_key(c, &xk, &xkn)) return 1;
            Entry *xe = lookup(xk, xkn, (size_t)(c->end - xk));
            if (xe && xe->metric >= 0) {
                Val v;
                if (scan_value(c, &v) || put_metric(L, xe, P_EXTRA, &v)) return 1;
            } else if (skip_value(c, 1)) {
                return 1;
            }
            skip_ws(c);
            if (c->p >= c->end) return 1;
            if (*c->p == ',') { c->p++; continue; }
            if (*c->p == '}') { c->p++; break; }
            return 1;
        }
    }
    memcpy(L->seen_alias, saved, sizeof(saved));
    L->extra_s = xs;
    L->extra_n = (size_t)(c->p - xs);
    return 0;
}

#define TEXT(env) (L->text[(env) - E_HOST])
#define HAS(env) (TEXT(env).type == V_STR)

/* Parse one line (without its newline). 0: emitted as row o->n; 1: fallback; -1: out of memory. */
static int do_line(Out *o, Line *L, const char *p, size_t n, int64_t line_no, const Hints *H) {
    while (n && (p[n - 1] == '\r')) n--;
    if (n < 2 || p[0] != '{' || p[n - 1] != '}') return 1;
    Cur c = {p, p + n};
    for (int k = 0; k < L->nt; k++) L->slot[L->touched[k]].prio = NO_VALUE;
    L->nt = 0;
    L->has_ts = 0;
    L->rank_state = 0;
    for (int k = 0; k < 4; k++) L->text[k].type = V_NULL;
    L->extra_s = NULL;
    L->nf = 0;
    memset(L->seen_alias, 0, sizeof(L->seen_alias));
    memset(L->seen_msg, 0, sizeof(L->seen_msg));
    uint32_t env_seen = 0;

    c.p++;
    skip_ws(&c);
    if (c.p < c.end && *c.p == '}') {
        c.p++;
    } else {
        for (;;) {
            const char *ks;
            size_t kn;
            if (read_key(&c, &ks, &kn)) return 1;
            Entry *e = lookup(ks, kn, (size_t)(c.end - ks));
            if (e && e->env >= 0) {
                if (e->env == E_ALIAS) return 1;
                if (env_seen & (1u << e->env)) return 1;
                env_seen |= 1u << e->env;
                if (e->env == E_EXTRA) {
                    if (c.p >= c.end) return 1;
                    if (*c.p == 'n') {
                        if (skip_value(&c, 0)) return 1;
                    } else if (*c.p == '{') {
                        if (parse_extra(&c, L)) return 1;
                    } else {
                        return 1; /* extra that is not an object: the Python path keeps it as text */
                    }
                } else {
                    Val v;
                    if (scan_value(&c, &v)) return 1;
                    switch (e->env) {
                    case E_TS:
                        if (v.type == V_STR) {
                            if (v.esc) return 1;
                            if (parse_iso(v.s, v.n, &L->ts) == 0) {
                                L->has_ts = 1;
                            } else {
                                double d;
                                if (strict_decimal(v.s, v.n, &d)) return 1;
                                L->has_ts = epoch_us(d, &L->ts);
                            }
                        } else if (v.type == V_NUM) {
                            if (v.sig > 17 || v.n > 64) return 1;
                            double d = to_double(v.s, v.n);
                            if (!isfinite(d)) return 1;
                            L->has_ts = epoch_us(d, &L->ts);
                        } else if (v.type != V_NULL) {
                            return 1;
                        }
                        break;
                    case E_RANK: {
                        const char *rs = v.s;
                        size_t rn = v.n;
                        if (v.type == V_NULL) break;
                        if (v.type == V_STR) {
                            if (v.esc || rn == 0 || rn > 12) return 1;
                            for (size_t k = 0; k < rn; k++)
                                if (rs[k] < '0' || rs[k] > '9') return 1;
                        } else if (v.type != V_NUM || !v.plain_int) {
                            return 1;
                        }
                        if (rs[0] == '-') {
                            int allzero = 1;
                            for (size_t k = 1; k < rn; k++)
                                if (rs[k] != '0') allzero = 0;
                            if (allzero) return 1;
                            break; /* negative: not a rank (null, as the Python path) */
                        }
                        if (rn > 12) break;
                        int64_t r = 0;
                        for (size_t k = 0; k < rn; k++) r = r * 10 + (rs[k] - '0');
                        if (r < 2147483648LL) {
                            L->rank_state = 1;
                            L->rank = (int32_t)r;
                        }
                        break;
                    }
                    default: /* host, level, event, message: a string or null */
                        if (v.type == V_NULL) break;
                        if (v.type != V_STR || (e->env == E_LEVEL && v.esc)) return 1;
                        L->text[e->env - E_HOST] = v;
                        break;
                    }
                }
            } else {
                /* a top-level key outside the envelope: kept in `fields`, typed when known */
                Val v;
                if (scan_value(&c, &v)) return 1;
                if (e && e->metric >= 0 && put_metric(L, e, P_FIELDS, &v)) return 1;
                if (L->nf >= MAX_FIELDS) return 1;
                for (int k = 0; k < L->nf; k++)
                    if (L->fkn[k] == kn && memcmp(L->fk[k], ks, kn) == 0) return 1;
                L->fk[L->nf] = ks;
                L->fkn[L->nf] = kn;
                L->fv[L->nf] = v.vs;
                L->fvn[L->nf] = v.vn;
                L->nf++;
            }
            skip_ws(&c);
            if (c.p >= c.end) return 1;
            if (*c.p == ',') { c.p++; continue; }
            if (*c.p == '}') { c.p++; break; }
            return 1;
        }
    }
    skip_ws(&c);
    if (c.p != c.end) return 1;

    /* message: unescape once, then its key=value pairs */
    const char *msg = NULL;
    size_t msgn = 0;
    o->scratch.n = 0;
    if (HAS(E_MESSAGE)) {
        if (TEXT(E_MESSAGE).esc) {
            if (unescape(&o->scratch, TEXT(E_MESSAGE).s, TEXT(E_MESSAGE).n)) return -1;
            msg = o->scratch.p;
            msgn = o->scratch.n;
        } else {
            msg = TEXT(E_MESSAGE).s;
            msgn = TEXT(E_MESSAGE).n;
        }
        if (memchr(msg, '=', msgn) && message_metrics(L, msg, msgn)) return 1;
    }

    /* ---- emit ---- */
    int64_t row = o->n;
    int64_t *ts = (int64_t *)o->ts.p;
    if (L->has_ts) {
        ts[row] = L->ts;
        set_bit(&o->ts_valid, row);
    } else {
        o->ts_null++;
    }
    int32_t *rk = (int32_t *)o->rank.p;
    int has_rank = 1;
    if (L->rank_state == 1) {
        rk[row] = L->rank;
        o->rank_src.p[row] = 0; /* record */
    } else if (H->has_rank_hint) {
        rk[row] = H->rank_hint;
        o->rank_src.p[row] = 1; /* path */
    } else {
        has_rank = 0;
        o->rank_src.p[row] = 4; /* none */
    }
    if (has_rank) set_bit(&o->rank_valid, row);
    else o->rank_null++;
    if (o->sorted) {
        if (!has_rank || !L->has_ts) o->sorted = 0;
        else if (rk[row] < o->last_rank || (rk[row] == o->last_rank && L->ts < o->last_ts)) o->sorted = 0;
        else { o->last_rank = rk[row]; o->last_ts = L->ts; }
    }
    int rc = 0;
    if (HAS(E_HOST)) rc |= str_set(&o->s[S_HOST], row, TEXT(E_HOST).s, TEXT(E_HOST).n, TEXT(E_HOST).esc);
    else rc |= str_push(&o->s[S_HOST], row, H->host_hint, H->host_hint_n, H->has_host_hint);

    int level = 1; /* INFO */
    if (HAS(E_LEVEL)) {
        /* logs repeat a handful of spellings: try the last one matched first */
        static __thread int last = 0;
        if (last < g_nlev && key_eq(g_lev[last].name, g_lev[last].len, TEXT(E_LEVEL).s, TEXT(E_LEVEL).n)) {
            level = g_lev[last].code;
        } else {
            for (int k = 0; k < g_nlev; k++)
                if (key_eq(g_lev[k].name, g_lev[k].len, TEXT(E_LEVEL).s, TEXT(E_LEVEL).n)) {
                    level = g_lev[k].code;
                    last = k;
                    break;
                }
        }
    }
    o->level.p[row] = (char)level;

    if (HAS(E_EVENT)) {
        rc |= str_set(&o->s[S_EVENT], row, TEXT(E_EVENT).s, TEXT(E_EVENT).n, TEXT(E_EVENT).esc);
        o->event_src.p[row] = 0; /* record */
    } else {
        int is_step = (g_step >= 0 && L->slot[g_step].prio < NO_VALUE) || (g_loss >= 0 && L->slot[g_loss].prio < NO_VALUE);
        rc |= is_step ? str_push(&o->s[S_EVENT], row, "TRAIN_STEP", 10, 1) : str_push(&o->s[S_EVENT], row, "METRICS", 7, 1);
        o->event_src.p[row] = 1; /* inferred */
    }
    if (HAS(E_MESSAGE)) rc |= str_push(&o->s[S_MESSAGE], row, msg, msgn, 1);
    else rc |= str_push(&o->s[S_MESSAGE], row, NULL, 0, 0);

    for (int k = 0; k < L->nt; k++) {
        int m = L->touched[k];
        Slot *sl = &L->slot[m];
        if (sl->prio >= NO_VALUE) continue;
        if (g_kind[m] == K_STR) {
            rc |= str_set(&o->txt[m], row, sl->s, sl->n, sl->esc);
            continue;
        }
        if (g_kind[m] == K_F64) ((double *)o->num[m].val.p)[row] = sl->num;
        else if (g_kind[m] == K_I64) ((int64_t *)o->num[m].val.p)[row] = (int64_t)sl->num;
        else ((int32_t *)o->num[m].val.p)[row] = (int32_t)sl->num;
        set_bit(&o->num[m].valid, row);
        o->num[m].nvalid++;
    }
    rc |= str_push(&o->s[S_EXTRA], row, L->extra_s, L->extra_s ? L->extra_n : 0, L->extra_s != NULL);
    if (L->nf) {
        StrCol *f = &o->s[S_FIELDS];
        str_fill(f, row);
        rc |= buf_put(&f->data, "{", 1);
        for (int k = 0; k < L->nf; k++) {
            if (k) rc |= buf_put(&f->data, ",", 1);
            rc |= buf_put(&f->data, "\"", 1);
            rc |= buf_put(&f->data, L->fk[k], L->fkn[k]);
            rc |= buf_put(&f->data, "\":", 2);
            rc |= buf_put(&f->data, L->fv[k], L->fvn[k]);
        }
        rc |= buf_put(&f->data, "}", 1);
        set_bit(&f->valid, row);
        ((int64_t *)f->off.p)[row + 1] = (int64_t)f->data.n;
        f->filled = row + 1;
    }
    ((int64_t *)o->line.p)[row] = line_no;
    o->n++;
    return rc ? -1 : 0;
}

/* ------------------------------------------------------------------ Python entry */

/* A malloc'd buffer handed to Python (and on to pyarrow) through the buffer protocol: no copy;
 * freed when the last Arrow array using it goes. */
typedef struct {
    PyObject_HEAD
    char *p;
    Py_ssize_t n;
} Owned;

static int owned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Owned *o = (Owned *)self;
    return PyBuffer_FillInfo(view, self, o->p, o->n, 1, flags);
}

static void owned_dealloc(PyObject *self) {
    free(((Owned *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs owned_as_buffer = {owned_getbuffer, NULL};

static PyTypeObject OwnedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "forensics.ingest._scan.Owned",
    .tp_basicsize = sizeof(Owned),
    .tp_dealloc = owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Column buffer owned by Python.",
};

/* Give b's memory (its first n bytes) to a new Owned; b is left empty. */
static PyObject *bytes_of(Buf *b, size_t n) {
    Owned *o = PyObject_New(Owned, &OwnedType);
    if (!o) return NULL;
    if (!b->p) {
        b->p = malloc(1);
        if (!b->p) { Py_DECREF(o); return PyErr_NoMemory(); }
    }
    /* the unused tail of a buffer reserved for the whole block or grown by doubling (the text
     * columns' data) goes back to malloc, not held with the rows: malloc hands out memory freed
     * by earlier blocks, so that tail was mostly resident (-25 MiB peak RSS, 64 files, 490 MB) */
    if (b->cap > n + 4096) {
        char *q = realloc(b->p, n ? n : 1);
        if (q) b->p = q;
    }
    o->p = b->p;
    o->n = (Py_ssize_t)n;
    b->p = NULL;
    b->n = b->cap = 0;
    return (PyObject *)o;
}

static PyObject *str_tuple(StrCol *c, int64_t n) {
    if (c->filled == 0 && n > 0) /* no value at all: Python makes a null array */
        return Py_BuildValue("(OOOL)", Py_None, Py_None, Py_None, (long long)n);
    str_fill(c, n);
    PyObject *valid = c->nnull ? bytes_of(&c->valid, (size_t)(n + 7) / 8) : (Py_INCREF(Py_None), Py_None);
    return Py_BuildValue("(NNNL)", valid, bytes_of(&c->off, (size_t)(n + 1) * 8), bytes_of(&c->data, c->data.n),
                         (long long)c->nnull);
}

/* Lines in buf: newlines, plus one for a last line without its newline. */
static int64_t count_lines(const char *buf, size_t len) {
    int64_t n = 0;
    size_t i = 0;
#ifdef __SSE2__
    const __m128i nl = _mm_set1_epi8('\n');
    for (; i + 16 <= len; i += 16)
        for (unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(buf + i)), nl)); m; m &= m - 1)
            n++; /* few bits set: cheaper than a popcount call where the CPU flag is not assumed */
#endif
    for (; i < len; i++) n += buf[i] == '\n';
    if (len && buf[len - 1] != '\n') n++;
    return n;
}

/* The hints of one file: rank_hint|None, host_hint|None. 0 ok, -1 error set. */
static int read_hints(PyObject *rank_hint, PyObject *host_hint, Hints *H) {
    memset(H, 0, sizeof(*H));
    if (rank_hint != Py_None) {
        H->has_rank_hint = 1;
        H->rank_hint = (int32_t)PyLong_AsLong(rank_hint);
        if (PyErr_Occurred()) return -1;
    }
    if (host_hint != Py_None) {
        Py_ssize_t hn;
        H->host_hint = PyUnicode_AsUTF8AndSize(host_hint, &hn);
        if (!H->host_hint) return -1;
        H->host_hint_n = (size_t)hn;
        H->has_host_hint = 1;
    }
    return 0;
}

/* scan(buf, first_line, rank_hint|None, host_hint|None[, segments])
 * -> (n_lines, rows, fallback_idx: bytes[int64], sorted, columns: dict)
 * `segments`: many small files scanned in one call (per-call costs paid once, not per file): a
 * sequence of (byte_end, rank_hint|None, host_hint|None), one per file whose bytes were joined
 * into buf, each ending with a newline. Each file's lines are numbered from first_line with its
 * own hints; columns then also hold "seg_rows" (int64: rows emitted up to each file's end,
 * cumulative) and "seg_lines" (int64: lines read per file). fallback_idx stays the line's index
 * in buf. */
static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long first_line;
    PyObject *rank_hint, *host_hint, *segs = Py_None;
    if (!g_ready) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*LOO|O", &view, &first_line, &rank_hint, &host_hint, &segs)) return NULL;
    Hints H;
    if (read_hints(rank_hint, host_hint, &H)) { PyBuffer_Release(&view); return NULL; }
    Py_ssize_t nseg = 0;
    Hints *SH = NULL;
    size_t *ends = NULL;
    int64_t *seg_rows = NULL, *seg_lines = NULL;
    if (segs != Py_None) {
        nseg = PySequence_Length(segs);
        if (nseg < 0) { PyBuffer_Release(&view); return NULL; }
        SH = calloc((size_t)nseg + 1, sizeof(Hints));
        ends = calloc((size_t)nseg + 1, sizeof(size_t));
        seg_rows = calloc((size_t)nseg + 1, sizeof(int64_t));
        seg_lines = calloc((size_t)nseg + 1, sizeof(int64_t));
        int bad = !SH || !ends || !seg_rows || !seg_lines;
        if (bad) PyErr_NoMemory();
        for (Py_ssize_t k = 0; !bad && k < nseg; k++) {
            PyObject *t = PySequence_GetItem(segs, k);
            PyObject *e, *rh, *hh;
            /* the host string's bytes belong to the tuple the caller holds for the call */
            bad = !t || !PyArg_ParseTuple(t, "OOO", &e, &rh, &hh) || read_hints(rh, hh, &SH[k]);
            if (!bad) {
                ends[k] = (size_t)PyLong_AsSize_t(e);
                bad = PyErr_Occurred() != NULL;
            }
            Py_XDECREF(t);
        }
        if (bad) {
            free(SH); free(ends); free(seg_rows); free(seg_lines);
            PyBuffer_Release(&view);
            return NULL;
        }
        if (nseg) H = SH[0];
    }
    const char *buf = view.buf;
    size_t len = (size_t)view.len;

    int64_t nlines = 0;
    Out o;
    memset(&o, 0, sizeof(o));
    Line *L = malloc(sizeof(Line));
    int rc = 0;
    if (L) {
        for (int k = 0; k < MAX_METRICS; k++) L->slot[k].prio = NO_VALUE;
        L->nt = 0;
    }
    Py_BEGIN_ALLOW_THREADS
    nlines = count_lines(buf, len);
    if (!L || out_init(&o, nlines) || buf_reserve(&o.s[S_EXTRA].data, len) || buf_reserve(&o.s[S_MESSAGE].data, len / 2)) {
        rc = -1;
    } else {
        int64_t i = 0, base = 0;     /* base: index of the current file's first line */
        Py_ssize_t seg = 0;
        for (const char *q = buf, *e = buf + len; q < e; i++) {
            while (seg < nseg && (size_t)(q - buf) >= ends[seg]) {   /* the next file starts here */
                seg_rows[seg] = o.n;
                seg_lines[seg] = i - base;
                base = i;
                if (++seg < nseg) H = SH[seg];
            }
            const char *nl = memchr(q, '\n', (size_t)(e - q));
            size_t n = nl ? (size_t)(nl - q) : (size_t)(e - q);
            int r = do_line(&o, L, q, n, first_line + i - base, &H);
            if (r < 0) { rc = -1; break; }
            if (r == 1) {
                /* roll back nothing: do_line writes only when it emits */
                if (buf_put(&o.fallback, &i, 8)) { rc = -1; break; }
            }
            if (!nl) break;
            q = nl + 1;
        }
        for (; seg < nseg; seg++) {
            seg_rows[seg] = o.n;
            seg_lines[seg] = (rc ? i : nlines) - base;
            base = rc ? i : nlines;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    free(L);
    free(SH);
    free(ends);
    if (rc) {
        out_free(&o);
        free(seg_rows);
        free(seg_lines);
        return PyErr_NoMemory();
    }
    int64_t n = o.n;
    size_t vb = (size_t)(n + 7) / 8;
    PyObject *cols = PyDict_New();
    PyObject *fb = NULL, *res = NULL;
    if (!cols) goto done;
#define PUT(key, obj) do { PyObject *_v = (obj); if (!_v || PyDict_SetItemString(cols, key, _v)) { Py_XDECREF(_v); goto done; } Py_DECREF(_v); } while (0)
    PUT("timestamp", Py_BuildValue("(NNL)", o.ts_null ? bytes_of(&o.ts_valid, vb) : (Py_INCREF(Py_None), Py_None),
                                   bytes_of(&o.ts, (size_t)n * 8), (long long)o.ts_null));
    PUT("rank", Py_BuildValue("(NNL)", o.rank_null ? bytes_of(&o.rank_valid, vb) : (Py_INCREF(Py_None), Py_None),
                              bytes_of(&o.rank, (size_t)n * 4), (long long)o.rank_null));
    PUT("rank_source", bytes_of(&o.rank_src, (size_t)n));
    PUT("level", bytes_of(&o.level, (size_t)n));
    PUT("event_source", bytes_of(&o.event_src, (size_t)n));
    PUT("line", bytes_of(&o.line, (size_t)n * 8));
    PUT("host", str_tuple(&o.s[S_HOST], n));
    PUT("event", str_tuple(&o.s[S_EVENT], n));
    PUT("message", str_tuple(&o.s[S_MESSAGE], n));
    PUT("extra", str_tuple(&o.s[S_EXTRA], n));
    PUT("fields", str_tuple(&o.s[S_FIELDS], n));
    PyObject *metrics = PyList_New(g_nm);
    if (!metrics) goto done;
    PUT("metrics", metrics);
    for (int m = 0; m < g_nm; m++) {
        PyObject *t;
        if (g_kind[m] == K_STR) {
            t = str_tuple(&o.txt[m], n);
        } else {
            int64_t nn = n - o.num[m].nvalid;
            if (nn == n) t = Py_BuildValue("(OOL)", Py_None, Py_None, (long long)nn);
            else t = Py_BuildValue("(NNL)", nn ? bytes_of(&o.num[m].valid, vb) : (Py_INCREF(Py_None), Py_None),
                                   bytes_of(&o.num[m].val, (size_t)n * (g_kind[m] == K_I32 ? 4 : 8)), (long long)nn);
        }
        if (!t) goto done;
        PyList_SET_ITEM(metrics, m, t);
    }
    if (segs != Py_None) {
        PUT("seg_rows", PyBytes_FromStringAndSize((const char *)seg_rows, (Py_ssize_t)(nseg * 8)));
        PUT("seg_lines", PyBytes_FromStringAndSize((const char *)seg_lines, (Py_ssize_t)(nseg * 8)));
    }
#undef PUT
    fb = bytes_of(&o.fallback, o.fallback.n);
    if (!fb) goto done;
    res = Py_BuildValue("(LLNOO)", (long long)nlines, (long long)n, fb, (o.sorted && n > 0) ? Py_True : Py_False, cols);
    fb = NULL;
done:
    Py_XDECREF(cols);
    Py_XDECREF(fb);
    out_free(&o);
    free(seg_rows);
    free(seg_lines);
    return res;
}

/* find(haystack, needle, end): where needle first occurs in haystack[:end], or -1 -- what
 * bytes.find(needle, 0, end) says, by glibc's memmem: ~4x faster on JSON text, whose quotes
 * keep CPython's search on its slow path (formats.sniff looks for two keys in every file's
 * first 64 KiB). */
static PyObject *find(PyObject *self, PyObject *args) {
    Py_buffer hay;
    const char *needle;
    Py_ssize_t nlen, end;
    if (!PyArg_ParseTuple(args, "y*y#n", &hay, &needle, &nlen, &end)) return NULL;
    size_t n = (size_t)(end < 0 ? 0 : (end < hay.len ? end : hay.len));
    const char *at;
    Py_BEGIN_ALLOW_THREADS
    at = memmem(hay.buf, n, needle, (size_t)nlen);
    Py_END_ALLOW_THREADS
    Py_ssize_t pos = at ? (Py_ssize_t)(at - (const char *)hay.buf) : -1;
    PyBuffer_Release(&hay);
    return PyLong_FromSsize_t(pos);
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "Load the schema's names (once per process)."},
    {"scan", scan, METH_VARARGS, "Scan one block of JSON lines into column buffers (GIL released)."},
    {"find", find, METH_VARARGS, "bytes.find(needle, 0, end) by memmem (GIL released)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "JSON-lines hot path of forensics ingest.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&OwnedType) < 0) return NULL;
    return PyModule_Create(&module);
}
