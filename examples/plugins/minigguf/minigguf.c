/* minigguf: a cellm format plugin that reads GGUF v2 and v3 files, in plain C99 against the plugin ABI headers
 * alone. cellm's own `gguf` plugin reads the same files; this one is the example of docs/abi.md ("Writing a plugin
 * out of tree") and a starting point for a new format. It maps the file, checks every count, offset and size it
 * reads against the mapping, and serves metadata and tensor data from the mapping without copying them.
 * Nested metadata arrays are refused as unsupported (cellm's gguf plugin skips them instead). */
#define _POSIX_C_SOURCE 200809L /* open, fstat, mmap under -std=c99 */

#include <cellm/format.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Kept from the entry point: the host guarantees it outlives this library (plugin.h). */
static const cellm_host_api* host;

/* An open file. The view's arrays live here and are freed by close; metadata strings, numeric arrays and
 * tensor data point into the mapping. String arrays are the only allocations inside `meta`. */
struct cellm_model_file {
    void* map;
    size_t map_size;
    cellm_meta_kv* meta;
    uint64_t n_meta;
    cellm_tensor_info* tensors;
    uint64_t n_tensors;
};

static cellm_status* error(cellm_status_code code, const char* format, ...) __attribute__((format(printf, 2, 3)));
static cellm_status* error(cellm_status_code code, const char* format, ...) {
    char message[512];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    return host->status_new(code, message); /* copies the message */
}

/* Reads the mapping front to back. The first failure is kept and later reads yield zeros, so the parser need
 * only check for it before it trusts a value (a count it allocates for, a divisor). */
typedef struct reader {
    const uint8_t* data;
    uint64_t size;
    uint64_t pos;
    const char* path; /* borrowed from open, for messages */
    cellm_status* failure;
} reader;

static void fail(reader* r, cellm_status_code code, const char* format, ...) __attribute__((format(printf, 3, 4)));
static void fail(reader* r, cellm_status_code code, const char* format, ...) {
    char detail[384];
    va_list args;
    if (r->failure != NULL) return;
    va_start(args, format);
    vsnprintf(detail, sizeof detail, format, args);
    va_end(args);
    r->failure = error(code, "minigguf: %s: %s", r->path, detail);
}

/* For "%.*s": a file's strings are not NUL-terminated and may be long. */
static int width(cellm_string_ref s) { return s.len < 120 ? (int)s.len : 120; }

static uint64_t left(const reader* r) { return r->size - r->pos; }

static const uint8_t* take(reader* r, uint64_t n, const char* what) {
    const uint8_t* p;
    if (r->failure != NULL) return NULL;
    if (n > left(r)) {
        fail(r, CELLM_ERR_CORRUPT, "truncated: %s needs %" PRIu64 " bytes at offset %" PRIu64 ", %" PRIu64 " are left",
             what, n, r->pos, left(r));
        return NULL;
    }
    p = r->data + r->pos;
    r->pos += n;
    return p;
}

/* GGUF is little endian, as is every machine cellm runs on, so fields are copied as they are. */
static uint32_t read_u32(reader* r, const char* what) {
    uint32_t v = 0;
    const uint8_t* p = take(r, sizeof v, what);
    if (p != NULL) memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t read_u64(reader* r, const char* what) {
    uint64_t v = 0;
    const uint8_t* p = take(r, sizeof v, what);
    if (p != NULL) memcpy(&v, p, sizeof v);
    return v;
}

static cellm_string_ref read_string(reader* r, const char* what) {
    cellm_string_ref s = {NULL, 0};
    uint64_t len = read_u64(r, what);
    const uint8_t* p = take(r, len, what);
    if (p != NULL) {
        s.data = (const char*)p;
        s.len = len;
    }
    return s;
}

/* Bytes of one number of GGUF value type `type`; 0 for strings, arrays and unknown types. */
static uint64_t number_size(uint32_t type) {
    switch (type) {
    case CELLM_VALUE_U8: case CELLM_VALUE_I8: case CELLM_VALUE_BOOL: return 1;
    case CELLM_VALUE_U16: case CELLM_VALUE_I16: return 2;
    case CELLM_VALUE_U32: case CELLM_VALUE_I32: case CELLM_VALUE_F32: return 4;
    case CELLM_VALUE_U64: case CELLM_VALUE_I64: case CELLM_VALUE_F64: return 8;
    default: return 0;
    }
}

#define WIDEN(T, field) { T x; memcpy(&x, p, sizeof x); v->v.field = x; } break

/* A scalar, widened as tensor.h asks: unsigned and bool into u64, signed into i64, floats into f64. */
static void read_number(reader* r, uint32_t type, cellm_meta_value* v) {
    const uint8_t* p = take(r, number_size(type), "metadata value");
    if (p == NULL) return;
    switch (type) {
    case CELLM_VALUE_BOOL: v->v.u64 = p[0] != 0 ? 1u : 0u; break;
    case CELLM_VALUE_U8: WIDEN(uint8_t, u64);
    case CELLM_VALUE_U16: WIDEN(uint16_t, u64);
    case CELLM_VALUE_U32: WIDEN(uint32_t, u64);
    case CELLM_VALUE_U64: WIDEN(uint64_t, u64);
    case CELLM_VALUE_I8: WIDEN(int8_t, i64);
    case CELLM_VALUE_I16: WIDEN(int16_t, i64);
    case CELLM_VALUE_I32: WIDEN(int32_t, i64);
    case CELLM_VALUE_I64: WIDEN(int64_t, i64);
    case CELLM_VALUE_F32: WIDEN(float, f64);
    case CELLM_VALUE_F64: WIDEN(double, f64);
    }
}

/* Numeric arrays stay packed in the mapping; string arrays need an array of cellm_string_ref, which `v` owns
 * from the moment it is allocated, so that close frees it even when a later read fails. */
static void read_array(reader* r, cellm_meta_value* v, cellm_string_ref key) {
    uint32_t elem = read_u32(r, "array element type");
    uint64_t count = read_u64(r, "array length");
    /* The smallest encoding of one element (a string's length field): bounds count before allocating. */
    uint64_t elem_size = elem == CELLM_VALUE_STRING ? 8 : number_size(elem);
    cellm_string_ref* strings;
    uint64_t i;
    if (r->failure != NULL) return;
    if (elem == CELLM_VALUE_ARRAY) {
        fail(r, CELLM_ERR_UNSUPPORTED, "metadata '%.*s': nested arrays are not supported", width(key), key.data);
        return;
    }
    if (elem_size == 0) {
        fail(r, CELLM_ERR_CORRUPT, "metadata '%.*s': unknown array element type %" PRIu32, width(key), key.data, elem);
        return;
    }
    if (count > left(r) / elem_size) {
        fail(r, CELLM_ERR_CORRUPT, "metadata '%.*s': %" PRIu64 " array elements cannot fit in the %" PRIu64
             " bytes left", width(key), key.data, count, left(r));
        return;
    }
    v->v.arr.elem_type = (cellm_value_type)elem;
    v->v.arr.count = count;
    if (elem != CELLM_VALUE_STRING) {
        v->v.arr.data = take(r, count * elem_size, "array data");
        return;
    }
    strings = malloc(count > 0 ? count * sizeof *strings : 1);
    v->v.arr.data = strings;
    if (strings == NULL) {
        fail(r, CELLM_ERR_OUT_OF_MEMORY, "out of memory for metadata '%.*s'", width(key), key.data);
        return;
    }
    for (i = 0; i < count; ++i) strings[i] = read_string(r, "array string");
}

static void read_metadata(reader* r, cellm_model_file* f, uint64_t count) {
    uint64_t i;
    if (r->failure != NULL) return;
    /* A key's length field, a value type and at least one byte of value: 13 bytes at least per entry. */
    if (count > left(r) / 13) {
        fail(r, CELLM_ERR_CORRUPT, "metadata count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left", count,
             left(r));
        return;
    }
    f->meta = calloc(count > 0 ? count : 1, sizeof *f->meta);
    if (f->meta == NULL) {
        fail(r, CELLM_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " metadata entries", count);
        return;
    }
    f->n_meta = count;
    for (i = 0; i < count && r->failure == NULL; ++i) {
        cellm_meta_kv* kv = &f->meta[i];
        uint32_t type;
        kv->key = read_string(r, "metadata key");
        type = read_u32(r, "metadata value type");
        kv->value.type = (cellm_value_type)type;
        if (type == CELLM_VALUE_STRING) {
            kv->value.v.str = read_string(r, "metadata string");
        } else if (type == CELLM_VALUE_ARRAY) {
            read_array(r, &kv->value, kv->key);
        } else if (number_size(type) > 0) {
            read_number(r, type, &kv->value);
        } else {
            fail(r, CELLM_ERR_CORRUPT, "metadata '%.*s' has unknown value type %" PRIu32, width(kv->key),
                 kv->key.data, type);
        }
    }
}

/* general.alignment when the file sets it (a power of two), else GGUF's default of 32. */
static uint64_t alignment_of(reader* r, const cellm_model_file* f) {
    static const char key[] = "general.alignment";
    uint64_t i;
    for (i = 0; i < f->n_meta; ++i) {
        const cellm_meta_kv* kv = &f->meta[i];
        uint64_t a = kv->value.v.u64;
        if (kv->key.len != sizeof key - 1 || memcmp(kv->key.data, key, sizeof key - 1) != 0) continue;
        if (kv->value.type == CELLM_VALUE_U32 && a != 0 && (a & (a - 1)) == 0) return a;
        fail(r, CELLM_ERR_CORRUPT, "general.alignment must be a u32 power of two");
        break;
    }
    return 32;
}

/* One tensor info: name, dimensions, type and its data offset (relative to the data section, stored in
 * *offset until the section's start is known). */
static void read_tensor_info(reader* r, cellm_tensor_info* t, uint64_t alignment, uint64_t* offset) {
    int64_t n_elements = 1, block;
    uint64_t n_blocks, block_bytes;
    uint32_t d, type;
    t->struct_size = sizeof *t;
    t->name = read_string(r, "tensor name");
    t->n_dims = read_u32(r, "tensor dimension count");
    if (r->failure != NULL) return;
    if (t->n_dims == 0 || t->n_dims > CELLM_MAX_DIMS) {
        fail(r, CELLM_ERR_CORRUPT, "tensor '%.*s' has %" PRIu32 " dimensions (1 to %d)", width(t->name), t->name.data,
             t->n_dims, CELLM_MAX_DIMS);
        return;
    }
    for (d = 0; d < CELLM_MAX_DIMS; ++d) {
        t->ne[d] = d < t->n_dims ? (int64_t)read_u64(r, "tensor dimension") : 1;
        if (r->failure != NULL) return;
        if (t->ne[d] <= 0 || t->ne[d] > INT64_MAX / n_elements) {
            fail(r, CELLM_ERR_CORRUPT, "tensor '%.*s' dimension %" PRIu32 " is %" PRId64, width(t->name),
                 t->name.data, d, t->ne[d]);
            return;
        }
        n_elements *= t->ne[d];
    }
    type = read_u32(r, "tensor type");
    *offset = read_u64(r, "tensor data offset");
    if (r->failure != NULL) return;
    /* Checked before the cast: the ABI's helpers know every GGUF type, and 0 means an unknown one. */
    block = type < CELLM_TYPE_COUNT_GGUF ? cellm_dtype_block_size((cellm_dtype)type) : 0;
    if (block == 0) {
        fail(r, CELLM_ERR_UNSUPPORTED, "tensor '%.*s' has unknown type %" PRIu32, width(t->name), t->name.data, type);
        return;
    }
    if (t->ne[0] % block != 0) {
        fail(r, CELLM_ERR_CORRUPT, "tensor '%.*s' row of %" PRId64 " is not a whole number of %" PRId64 "-blocks",
             width(t->name), t->name.data, t->ne[0], block);
        return;
    }
    t->type = (cellm_dtype)type;
    n_blocks = (uint64_t)(n_elements / block);
    block_bytes = (uint64_t)cellm_dtype_type_size(t->type);
    if (n_blocks > UINT64_MAX / block_bytes || *offset % alignment != 0) {
        fail(r, CELLM_ERR_CORRUPT, "tensor '%.*s' is too large or its offset %" PRIu64 " is not aligned to %" PRIu64,
             width(t->name), t->name.data, *offset, alignment);
        return;
    }
    t->size = n_blocks * block_bytes;
}

static void read_tensors(reader* r, cellm_model_file* f, uint64_t count, uint64_t alignment) {
    uint64_t* offsets;
    uint64_t i, data_start, data_bytes;
    if (r->failure != NULL) return;
    /* A name's length field, a dimension count, one dimension, a type and an offset: 32 bytes at least. */
    if (count > left(r) / 32) {
        fail(r, CELLM_ERR_CORRUPT, "tensor count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left", count,
             left(r));
        return;
    }
    f->tensors = calloc(count > 0 ? count : 1, sizeof *f->tensors);
    offsets = calloc(count > 0 ? count : 1, sizeof *offsets);
    if (f->tensors == NULL || offsets == NULL) {
        fail(r, CELLM_ERR_OUT_OF_MEMORY, "out of memory for %" PRIu64 " tensors", count);
        free(offsets);
        return;
    }
    f->n_tensors = count;
    for (i = 0; i < count && r->failure == NULL; ++i) read_tensor_info(r, &f->tensors[i], alignment, &offsets[i]);

    /* The data section starts at the first aligned offset after the tensor infos. */
    data_start = r->pos + (alignment - r->pos % alignment) % alignment;
    data_bytes = data_start < r->size ? r->size - data_start : 0;
    for (i = 0; i < count && r->failure == NULL; ++i) {
        cellm_tensor_info* t = &f->tensors[i];
        if (offsets[i] > data_bytes || t->size > data_bytes - offsets[i]) {
            fail(r, CELLM_ERR_CORRUPT, "tensor '%.*s' (%" PRIu64 " bytes at data offset %" PRIu64
                 ") runs past the end of the file", width(t->name), t->name.data, t->size, offsets[i]);
        } else {
            t->data = r->data + data_start + offsets[i];
        }
    }
    free(offsets);
}

static cellm_status* parse(const char* path, cellm_model_file* f) {
    reader r = {NULL, 0, 0, NULL, NULL};
    const uint8_t* magic;
    uint32_t version;
    uint64_t n_tensors, n_meta;
    r.data = f->map;
    r.size = f->map_size;
    r.path = path;
    magic = take(&r, 4, "magic");
    if (magic != NULL && memcmp(magic, "GGUF", 4) != 0) fail(&r, CELLM_ERR_CORRUPT, "not a GGUF file");
    version = read_u32(&r, "version");
    if (r.failure == NULL && version != 2 && version != 3) {
        fail(&r, CELLM_ERR_VERSION, "GGUF version %" PRIu32 " (this plugin reads 2 and 3)", version);
    }
    n_tensors = read_u64(&r, "tensor count");
    n_meta = read_u64(&r, "metadata count");
    read_metadata(&r, f, n_meta);
    read_tensors(&r, f, n_tensors, alignment_of(&r, f));
    return r.failure;
}

static cellm_status* errno_error(const char* path, const char* action) {
    int err = errno;
    return error(err == ENOENT ? CELLM_ERR_NOT_FOUND : CELLM_ERR_IO, "minigguf: %s: cannot %s: %s", path, action,
                 strerror(err));
}

static cellm_status* map_file(const char* path, cellm_model_file* f) {
    struct stat st;
    cellm_status* status = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno_error(path, "open");
    if (fstat(fd, &st) != 0) {
        status = errno_error(path, "stat");
    } else if (!S_ISREG(st.st_mode)) {
        status = error(CELLM_ERR_IO, "minigguf: %s: not a regular file", path);
    } else if (st.st_size > 0) { /* mmap refuses an empty range; the parser reports the file as truncated */
        f->map_size = (size_t)st.st_size;
        f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            status = errno_error(path, "map");
        }
    }
    close(fd); /* the mapping outlives the descriptor */
    return status;
}

/* ---- The format interface ------------------------------------------------------------------------------- */

static int probe(const char* path, const uint8_t* head, size_t head_len) {
    (void)path;
    /* Below the 100 of cellm's own gguf plugin, which therefore keeps GGUF files when both are installed; a
     * manifest picks this one by name ([model] format = "minigguf"). */
    return head_len >= 4 && memcmp(head, "GGUF", 4) == 0 ? 50 : 0;
}

static void close_file(cellm_model_file* f) {
    uint64_t i;
    if (f == NULL) return;
    for (i = 0; i < f->n_meta; ++i) {
        const cellm_meta_value* v = &f->meta[i].value;
        if (v->type == CELLM_VALUE_ARRAY && v->v.arr.elem_type == CELLM_VALUE_STRING) free((void*)v->v.arr.data);
    }
    free(f->meta);
    free(f->tensors);
    if (f->map != NULL) munmap(f->map, f->map_size);
    free(f);
}

static cellm_status* open_file(const char* path, cellm_model_file** out) {
    cellm_model_file* f;
    cellm_status* status;
    if (path == NULL || out == NULL) return error(CELLM_ERR_INVALID_ARGUMENT, "minigguf: open: NULL argument");
    f = calloc(1, sizeof *f);
    if (f == NULL) return error(CELLM_ERR_OUT_OF_MEMORY, "minigguf: out of memory");
    status = map_file(path, f);
    if (status == NULL) status = parse(path, f);
    if (status != NULL) {
        close_file(f);
        return status;
    }
    *out = f;
    return NULL;
}

static cellm_status* get_view(const cellm_model_file* f, cellm_model_view* out) {
    cellm_model_view view;
    if (f == NULL || out == NULL) return error(CELLM_ERR_INVALID_ARGUMENT, "minigguf: get_view: NULL argument");
    view.struct_size = out->struct_size;
    view.n_meta = f->n_meta;
    view.meta = f->meta;
    view.n_tensors = f->n_tensors;
    view.tensors = f->tensors;
    view.tensor_stride = sizeof(cellm_tensor_info);
    view.mapping = f->map;
    view.mapping_size = f->map_size;
    /* The caller sized `out` (perhaps for an older minor): fill only what its struct_size covers. */
    memcpy(out, &view, out->struct_size < sizeof view ? out->struct_size : sizeof view);
    return NULL;
}

static const cellm_format_iface iface = {sizeof iface, probe, open_file, close_file, get_view};

static const cellm_plugin_desc desc = {sizeof desc, CELLM_ABI_MAJOR, CELLM_ABI_MINOR, CELLM_PLUGIN_FORMAT, "minigguf",
                                       "0.1.0", "GGUF v2/v3 in plain C: the out-of-tree example plugin", &iface};

CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* h, uint32_t host_abi_major,
                                                         uint32_t host_abi_minor) {
    (void)host_abi_minor; /* only 1.0 host services (status_new) are used, so any minor will do */
    if (h == NULL || host_abi_major != CELLM_ABI_MAJOR) return NULL;
    host = h;
    return &desc;
}
