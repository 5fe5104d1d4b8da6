/* cellm plugin ABI: compute backends (scalar reference, OpenBLAS CPU, Vulkan GPU, ...).
 * See plugin.h for the conventions (struct_size, ownership, status), graph.h for the graph.
 *
 * A backend owns device memory (buffers), turns a step's graph into a plan once, and executes that plan
 * as often as the host likes with new per-step inputs. Memory is never assumed to be host-addressable:
 * data moves in and out through buffer_write/buffer_read and the execute bindings only. */
#ifndef CELLM_BACKEND_H
#define CELLM_BACKEND_H

#include "cellm/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cellm_backend cellm_backend; /* one device context, created by create */
typedef struct cellm_plan cellm_plan;       /* a prepared graph, created by graph_prepare */

typedef enum cellm_buffer_usage {
    CELLM_BUFFER_WEIGHTS = 0,  /* written once, read by every step */
    CELLM_BUFFER_KV_CACHE = 1  /* read and written by steps */
} cellm_buffer_usage;

/* Flags in cellm_backend_info.flags. */
#define CELLM_BACKEND_HOST_MEMORY 0x1u  /* buffers are host memory; buffer_wrap_host is implemented */
#define CELLM_BACKEND_CONCURRENT 0x2u   /* one instance may execute different plans from several threads at once */

typedef struct cellm_backend_info {
    size_t struct_size;
    const char* device_name; /* owned by the backend, valid until destroy */
    uint64_t device_memory;  /* bytes the device offers, 0 when unknown */
    uint32_t flags;
    int32_t threads;         /* worker threads in use (CPU backends), 0 otherwise */
    /* Since 1.4. Bytes the backend needs beside the buffers to run the plans prepared so far (intermediate
     * results, kernel scratch), 0 when unknown; the host sizes a memory budget with it. */
    uint64_t scratch_bytes;
} cellm_backend_info;

/* Per-step data for a CELLM_OP_INPUT node, or the destination of a graph output. `data` is host memory
 * borrowed for the duration of execute; `size` must equal the node's byte size. */
typedef struct cellm_input_binding {
    int32_t node;
    const void* data;
    uint64_t size;
} cellm_input_binding;
typedef struct cellm_output_binding {
    int32_t node;
    void* data;
    uint64_t size;
} cellm_output_binding;

/* Arguments of graph_execute, owned by the caller and borrowed for the call. The binding arrays are stepped by
 * their stride (sizeof the binding struct as the caller compiled it: step with cellm_input_at/cellm_output_at),
 * so bindings can grow (e.g. device-buffer targets) and fields can be appended here (e.g. asynchronous
 * completion) within ABI 1. */
typedef struct cellm_execute_args {
    size_t struct_size;
    const cellm_input_binding* inputs;
    size_t n_inputs;
    size_t input_stride;
    const cellm_output_binding* outputs;
    size_t n_outputs;
    size_t output_stride;
} cellm_execute_args;

static inline const cellm_input_binding* cellm_input_at(const cellm_execute_args* a, size_t i) {
    return (const cellm_input_binding*)((const char*)a->inputs + i * a->input_stride);
}
static inline const cellm_output_binding* cellm_output_at(const cellm_execute_args* a, size_t i) {
    return (const cellm_output_binding*)((const char*)a->outputs + i * a->output_stride);
}

/* Threading: create, describe and the capability queries are thread-safe. One backend instance is driven
 * by one thread at a time (the host serializes calls on an instance); separate instances are independent.
 * Buffers and plans belong to the instance that made them and must be freed before it is destroyed. */
typedef struct cellm_backend_iface {
    size_t struct_size;

    /* Creates a device context. `options` (borrowed) come from the manifest's [backend] table and the
     * command line, e.g. threads = "2", device = "0". Unknown keys fail with CELLM_ERR_INVALID_ARGUMENT. */
    cellm_status* (*create)(const cellm_option* options, size_t n_options, cellm_backend** out);
    void (*destroy)(cellm_backend* backend);

    /* Fills `out` (caller sets out->struct_size). */
    cellm_status* (*get_info)(const cellm_backend* backend, cellm_backend_info* out);

    /* Capability queries, cheap and side-effect free. supports_type: weights of this type can be stored
     * and used by MATMUL and GET_ROWS. supports_op: the op can run with src0 of this type. */
    int (*supports_type)(const cellm_backend* backend, cellm_dtype type);
    int (*supports_op)(const cellm_backend* backend, cellm_op op, cellm_dtype src0_type);

    /* Device memory. Contents after alloc are undefined. A buffer is owned by the caller until
     * buffer_free and must outlive every plan that references it. */
    cellm_status* (*buffer_alloc)(cellm_backend* backend, uint64_t size, cellm_buffer_usage usage,
                                  cellm_buffer** out);
    /* (optional, CELLM_BACKEND_HOST_MEMORY only) Wraps read-only host memory, e.g. a memory-mapped model,
     * without copying. The memory is borrowed and must outlive the buffer. */
    cellm_status* (*buffer_wrap_host)(cellm_backend* backend, const void* data, uint64_t size,
                                      cellm_buffer** out);
    void (*buffer_free)(cellm_backend* backend, cellm_buffer* buffer);
    cellm_status* (*buffer_write)(cellm_backend* backend, cellm_buffer* buffer, uint64_t offset,
                                  const void* data, uint64_t size);
    cellm_status* (*buffer_read)(cellm_backend* backend, const cellm_buffer* buffer, uint64_t offset,
                                 void* data, uint64_t size);

    /* Validates `graph` (borrowed for the call) and prepares it: plans intermediate memory, picks kernels,
     * records command buffers. An op or type it cannot run fails with CELLM_ERR_UNSUPPORTED naming the
     * node. The plan (owned by the caller until plan_free) may be executed any number of times. */
    cellm_status* (*graph_prepare)(cellm_backend* backend, const cellm_graph* graph, cellm_plan** out);

    /* Runs one step: copies every input binding in, computes, and writes every requested output before
     * returning. Bindings must cover every CELLM_OP_INPUT node of the graph. */
    cellm_status* (*graph_execute)(cellm_backend* backend, cellm_plan* plan, const cellm_execute_args* args);

    void (*plan_free)(cellm_backend* backend, cellm_plan* plan);

    /* (optional) Describes the devices this backend can see, one line per call of `emit`, for
     * `cellm-host plugins`. Needs no backend instance. */
    void (*describe)(void (*emit)(void* user, const char* line), void* user);

    /* (optional, since 1.4; read it only when struct_size covers it) Host memory under part of a
     * CELLM_BUFFER_KV_CACHE buffer. A backend that implements this may allocate KV buffers without committing
     * their memory; the host then calls it with resident = 1 for bytes it is about to use (committed before it
     * returns, so steps that write them take no page faults) and resident = 0 for bytes it no longer uses (the
     * memory goes back to the system; their contents become undefined until committed again). The backend
     * rounds a commit outward and a release inward to its pages, so bytes outside the range keep their
     * contents. A host that never calls it still works: pages then come on first touch. */
    cellm_status* (*buffer_commit)(cellm_backend* backend, cellm_buffer* buffer, uint64_t offset, uint64_t size,
                                   int resident);
} cellm_backend_iface;

#ifdef __cplusplus
}
#endif
#endif /* CELLM_BACKEND_H */
