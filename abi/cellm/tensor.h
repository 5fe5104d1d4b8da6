/* cellm plugin ABI: element types, tensor descriptors and the read-only model view.
 * See plugin.h for the conventions (struct_size, ownership, status). */
#ifndef CELLM_TENSOR_H
#define CELLM_TENSOR_H

#include "cellm/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. Values 0..39 are GGUF's (ggml_type) so a GGUF file's type field maps one to one; cellm's
 * own types start at 100. Quantized types store blocks of CELLM_TYPE block_size elements in type_size
 * bytes, laid out exactly as GGUF defines them (cellm's own: as described at their values). */
typedef enum cellm_dtype {
    CELLM_TYPE_F32 = 0,
    CELLM_TYPE_F16 = 1,
    CELLM_TYPE_Q4_0 = 2,
    CELLM_TYPE_Q4_1 = 3,
    CELLM_TYPE_Q5_0 = 6,
    CELLM_TYPE_Q5_1 = 7,
    CELLM_TYPE_Q8_0 = 8,
    CELLM_TYPE_Q8_1 = 9,
    CELLM_TYPE_Q2_K = 10,
    CELLM_TYPE_Q3_K = 11,
    CELLM_TYPE_Q4_K = 12,
    CELLM_TYPE_Q5_K = 13,
    CELLM_TYPE_Q6_K = 14,
    CELLM_TYPE_Q8_K = 15,
    CELLM_TYPE_I8 = 24,
    CELLM_TYPE_I16 = 25,
    CELLM_TYPE_I32 = 26,
    CELLM_TYPE_I64 = 27,
    CELLM_TYPE_F64 = 28,
    CELLM_TYPE_BF16 = 30,
    CELLM_TYPE_COUNT_GGUF = 40,
    /* cellm's own weight types (docs/format.md), one per group size G = 32, 64, 128. Each block is one group
     * of G consecutive elements of a row; halves are IEEE f16, codes follow in element order, and 4-bit codes
     * pack two per byte, the even element in the low nibble.
     *  I8S:  int8 symmetric.   f16 d, G int8 codes q in [-127, 127];        x = d * q.        2 + G bytes.
     *  I4S:  int4 symmetric.   f16 d, G/2 bytes of u in [0, 15];            x = d * (u - 8).  2 + G/2 bytes.
     *  Q4A:  4-bit affine (MLX's scale and bias per group).
     *                          f16 scale s, f16 bias b, G/2 bytes of u;     x = s * u + b.    4 + G/2 bytes. */
    CELLM_TYPE_I8S_G32 = 100,
    CELLM_TYPE_I8S_G64 = 101,
    CELLM_TYPE_I8S_G128 = 102,
    CELLM_TYPE_I4S_G32 = 103,
    CELLM_TYPE_I4S_G64 = 104,
    CELLM_TYPE_I4S_G128 = 105,
    CELLM_TYPE_Q4A_G32 = 106,
    CELLM_TYPE_Q4A_G64 = 107,
    CELLM_TYPE_Q4A_G128 = 108,
    CELLM_TYPE_COUNT_CELLM = 109, /* one past cellm's own weight types */
    /* Since 1.5: KV-cache-only types (graph.h, "Coded pools"), never weights. Codes index a fixed table of
     * levels (CELLM_KV_LEVELS_R4 / _R3); each pool row comes with F16 scales in a companion pool.
     *  R4: 16 levels, 4-bit indices packed two per byte, the even element in the low nibble.   block 2 in 1 byte.
     *  R3: 8 levels, 3-bit indices, 8 elements in 3 bytes: element i at bits 3i..3i+2 of the little-endian
     *      24-bit word.                                                                           block 8 in 3 bytes. */
    CELLM_TYPE_R4 = 120,
    CELLM_TYPE_R3 = 121
} cellm_dtype;

/* Elements per block and bytes per block of a type (1 and the element size for plain types);
 * 0 for a value this header does not know. */
static inline int64_t cellm_dtype_block_size(cellm_dtype t) {
    switch (t) {
    case CELLM_TYPE_F32: case CELLM_TYPE_F16: case CELLM_TYPE_BF16: case CELLM_TYPE_I8:
    case CELLM_TYPE_I16: case CELLM_TYPE_I32: case CELLM_TYPE_I64: case CELLM_TYPE_F64: return 1;
    case CELLM_TYPE_Q4_0: case CELLM_TYPE_Q4_1: case CELLM_TYPE_Q5_0: case CELLM_TYPE_Q5_1:
    case CELLM_TYPE_Q8_0: case CELLM_TYPE_Q8_1: return 32;
    case CELLM_TYPE_Q2_K: case CELLM_TYPE_Q3_K: case CELLM_TYPE_Q4_K: case CELLM_TYPE_Q5_K:
    case CELLM_TYPE_Q6_K: case CELLM_TYPE_Q8_K: return 256;
    case CELLM_TYPE_I8S_G32: case CELLM_TYPE_I4S_G32: case CELLM_TYPE_Q4A_G32: return 32;
    case CELLM_TYPE_I8S_G64: case CELLM_TYPE_I4S_G64: case CELLM_TYPE_Q4A_G64: return 64;
    case CELLM_TYPE_I8S_G128: case CELLM_TYPE_I4S_G128: case CELLM_TYPE_Q4A_G128: return 128;
    case CELLM_TYPE_R4: return 2;
    case CELLM_TYPE_R3: return 8;
    default: return 0;
    }
}
static inline int64_t cellm_dtype_type_size(cellm_dtype t) {
    switch (t) {
    case CELLM_TYPE_F32: return 4;
    case CELLM_TYPE_F16: case CELLM_TYPE_BF16: case CELLM_TYPE_I16: return 2;
    case CELLM_TYPE_I8: return 1;
    case CELLM_TYPE_I32: return 4;
    case CELLM_TYPE_I64: case CELLM_TYPE_F64: return 8;
    case CELLM_TYPE_Q4_0: return 18;
    case CELLM_TYPE_Q4_1: return 20;
    case CELLM_TYPE_Q5_0: return 22;
    case CELLM_TYPE_Q5_1: return 24;
    case CELLM_TYPE_Q8_0: return 34;
    case CELLM_TYPE_Q8_1: return 36;
    case CELLM_TYPE_Q2_K: return 84;
    case CELLM_TYPE_Q3_K: return 110;
    case CELLM_TYPE_Q4_K: return 144;
    case CELLM_TYPE_Q5_K: return 176;
    case CELLM_TYPE_Q6_K: return 210;
    case CELLM_TYPE_Q8_K: return 292;
    case CELLM_TYPE_I8S_G32: return 2 + 32;
    case CELLM_TYPE_I8S_G64: return 2 + 64;
    case CELLM_TYPE_I8S_G128: return 2 + 128;
    case CELLM_TYPE_I4S_G32: return 2 + 16;
    case CELLM_TYPE_I4S_G64: return 2 + 32;
    case CELLM_TYPE_I4S_G128: return 2 + 64;
    case CELLM_TYPE_Q4A_G32: return 4 + 16;
    case CELLM_TYPE_Q4A_G64: return 4 + 32;
    case CELLM_TYPE_Q4A_G128: return 4 + 64;
    case CELLM_TYPE_R4: return 1;
    case CELLM_TYPE_R3: return 3;
    default: return 0;
    }
}

#define CELLM_MAX_DIMS 4

/* Where a tensor's data lives on a backend. Strides are in bytes; ne[0] is the innermost (fastest) dimension
 * as in GGUF. For quantized types nb[0] is the block size in bytes and ne[0] is a multiple of the block
 * size. Unused dimensions have ne = 1. The buffer is owned by whoever allocated it (see backend.h); the
 * descriptor itself is plain data and borrowed. */
typedef struct cellm_buffer cellm_buffer;
typedef struct cellm_tensor_desc {
    size_t struct_size;
    cellm_dtype type;
    uint32_t n_dims;
    int64_t ne[CELLM_MAX_DIMS];
    int64_t nb[CELLM_MAX_DIMS];
    cellm_buffer* buffer; /* NULL for tensors that are not bound to memory yet */
    uint64_t offset;      /* byte offset of element 0 inside buffer */
} cellm_tensor_desc;

/* ---- Model view: what a format plugin exposes and an arch plugin reads -------------------------------- */

/* Metadata value types; the numbering is GGUF's. */
typedef enum cellm_value_type {
    CELLM_VALUE_U8 = 0, CELLM_VALUE_I8 = 1, CELLM_VALUE_U16 = 2, CELLM_VALUE_I16 = 3,
    CELLM_VALUE_U32 = 4, CELLM_VALUE_I32 = 5, CELLM_VALUE_F32 = 6, CELLM_VALUE_BOOL = 7,
    CELLM_VALUE_STRING = 8, CELLM_VALUE_ARRAY = 9, CELLM_VALUE_U64 = 10, CELLM_VALUE_I64 = 11,
    CELLM_VALUE_F64 = 12
} cellm_value_type;

typedef struct cellm_string_ref {
    const char* data; /* not NUL-terminated; may contain any bytes */
    uint64_t len;
} cellm_string_ref;

/* One metadata entry. Scalars are widened into u64/i64/f64 (bool into u64); strings point into memory owned
 * by the model file; arrays hold `count` elements of `elem_type`:
 *  - numeric elements are packed at their natural size (little endian) at `data`, which need not be aligned
 *    (read them with memcpy);
 *  - string elements are an array of cellm_string_ref at `data`;
 *  - nested arrays are not exposed (count is set, data is NULL). */
typedef struct cellm_meta_value {
    cellm_value_type type;
    union {
        uint64_t u64;
        int64_t i64;
        double f64;
        cellm_string_ref str;
        struct {
            cellm_value_type elem_type;
            uint64_t count;
            const void* data;
        } arr;
    } v;
} cellm_meta_value;

typedef struct cellm_meta_kv {
    cellm_string_ref key;
    cellm_meta_value value;
} cellm_meta_kv;

/* One weight tensor of the model file. `data` points at `size` bytes inside the memory-mapped file: it is
 * never copied and stays valid until the model file is closed. */
typedef struct cellm_tensor_info {
    size_t struct_size;
    cellm_string_ref name;
    cellm_dtype type;
    uint32_t n_dims;
    int64_t ne[CELLM_MAX_DIMS]; /* ne[0] innermost; unused dims are 1 */
    const void* data;
    uint64_t size; /* bytes */
} cellm_tensor_info;

/* A model file as the host, the tokenizer and the arch see it. The vocabulary of metadata keys is GGUF's
 * (general.architecture, <arch>.block_count, tokenizer.ggml.tokens, ...): a format plugin for another
 * file type translates its own metadata into those keys, tokenizer included, so archs and the host read
 * every format the same way. Owned by the format plugin's model file; valid until it is closed. */
typedef struct cellm_model_view {
    size_t struct_size;
    uint64_t n_meta;
    const cellm_meta_kv* meta;
    uint64_t n_tensors;
    const cellm_tensor_info* tensors; /* array stride is tensor_stride bytes (>= sizeof known fields) */
    size_t tensor_stride;
    const void* mapping;      /* the whole mapped file, so a backend can wrap it without copying (may be NULL) */
    uint64_t mapping_size;
} cellm_model_view;

static inline const cellm_tensor_info* cellm_model_tensor(const cellm_model_view* m, uint64_t i) {
    return (const cellm_tensor_info*)((const char*)m->tensors + i * m->tensor_stride);
}

#ifdef __cplusplus
}
#endif
#endif /* CELLM_TENSOR_H */
