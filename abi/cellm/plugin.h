/* cellm plugin ABI: versioning, status, host services and the plugin entry point.
 *
 * This header set (the headers in abi/cellm) is the whole contract between the cellm host and a plugin. It is plain C99,
 * has no dependency beyond <stddef.h>/<stdint.h>, and exposes none of the host's internals.
 *
 * Conventions that hold for every header of the set:
 *  - Every struct that crosses the boundary starts with `size_t struct_size`. The writer sets it to
 *    sizeof() of the struct it was compiled with; a reader uses a field only if struct_size covers it
 *    (CELLM_HAS_FIELD). Structs only grow at the end, within one ABI major.
 *  - Functions that can fail return `cellm_status*`: NULL means success. A non-NULL status is created with
 *    cellm_host_api.status_new and is owned by whoever receives it (in practice the host, which frees it).
 *  - Strings passed in are borrowed for the duration of the call unless a field says otherwise; a receiver
 *    that needs a string later copies it.
 *  - No C++ exception crosses the boundary and no plugin aborts the process: every failure is a status.
 *  - A plugin library stays loaded while any object it created is alive (the host never dlcloses it
 *    before destroying those objects).
 */
#ifndef CELLM_PLUGIN_H
#define CELLM_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header set. A plugin and a host of different majors never talk to each other.
 * Within one major, a newer minor only appends fields to structs and functions to tables. */
#define CELLM_ABI_MAJOR 1
#define CELLM_ABI_MINOR 5

#if defined(_WIN32)
#define CELLM_EXPORT __declspec(dllexport)
#else
#define CELLM_EXPORT __attribute__((visibility("default")))
#endif

/* True when `ptr`, a struct written by the other side, is large enough to hold `field`. */
#define CELLM_HAS_FIELD(ptr, type, field) \
    ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

/* ---- Status ------------------------------------------------------------------------------------------ */

typedef enum cellm_status_code {
    CELLM_OK = 0,
    CELLM_ERR_INVALID_ARGUMENT = 1, /* a caller passed something malformed */
    CELLM_ERR_NOT_FOUND = 2,        /* file, key, tensor or device missing */
    CELLM_ERR_UNSUPPORTED = 3,      /* valid request this plugin cannot serve (op, type, feature) */
    CELLM_ERR_CORRUPT = 4,          /* malformed or truncated data (model file, header) */
    CELLM_ERR_OUT_OF_MEMORY = 5,
    CELLM_ERR_IO = 6,
    CELLM_ERR_VERSION = 7, /* ABI or file-format version mismatch */
    CELLM_ERR_INTERNAL = 8
} cellm_status_code;

/* Opaque error object. Created only through cellm_host_api.status_new (so one allocator owns them all),
 * read with status_code/status_message, and freed by its receiver with status_free. */
typedef struct cellm_status cellm_status;

/* ---- Logging ----------------------------------------------------------------------------------------- */

typedef enum cellm_log_level {
    CELLM_LOG_DEBUG = 0,
    CELLM_LOG_INFO = 1,
    CELLM_LOG_WARN = 2,
    CELLM_LOG_ERROR = 3
} cellm_log_level;

/* ---- Host services ----------------------------------------------------------------------------------- */

/* Functions the host offers every plugin. The table and everything it points to is owned by the host and
 * stays valid while the plugin library is loaded, so a plugin may keep the pointer it received.
 * All functions are thread-safe. */
typedef struct cellm_host_api {
    size_t struct_size;
    uint32_t abi_major; /* CELLM_ABI_MAJOR of the host */
    uint32_t abi_minor; /* newest minor the host implements */

    /* Writes one line into the host's log. `plugin` and `message` are borrowed for the call. */
    void (*log)(cellm_log_level level, const char* plugin, const char* message);

    /* Creates an error status. `message` is copied. Never returns NULL for code != CELLM_OK
     * (allocation failure yields a preallocated out-of-memory status). */
    cellm_status* (*status_new)(cellm_status_code code, const char* message);

    /* Read a status. The message pointer lives as long as the status. */
    cellm_status_code (*status_code)(const cellm_status* status);
    const char* (*status_message)(const cellm_status* status);

    /* Frees a status received from a call into another plugin (NULL is allowed). */
    void (*status_free)(cellm_status* status);
} cellm_host_api;

/* ---- Options ----------------------------------------------------------------------------------------- */

/* A key/value option from the manifest or the command line (e.g. threads = "4", device = "0").
 * Both strings are borrowed for the duration of the call that receives them. A plugin rejects keys it does
 * not know with CELLM_ERR_INVALID_ARGUMENT, naming the key, so typos surface. */
typedef struct cellm_option {
    const char* key;
    const char* value;
} cellm_option;

/* ---- Plugin descriptor and entry point --------------------------------------------------------------- */

typedef enum cellm_plugin_kind {
    CELLM_PLUGIN_BACKEND = 1, /* iface is a cellm_backend_iface (backend.h) */
    CELLM_PLUGIN_ARCH = 2,    /* iface is a cellm_arch_iface    (arch.h)    */
    CELLM_PLUGIN_FORMAT = 3   /* iface is a cellm_format_iface  (format.h)  */
} cellm_plugin_kind;

/* What a plugin says about itself. Owned by the plugin (normally static storage) and valid, with every
 * string and table it points to, while the library is loaded. */
typedef struct cellm_plugin_desc {
    size_t struct_size;
    uint32_t abi_major;      /* must equal the host's major */
    uint32_t abi_minor;      /* the minor the plugin implements; the host accepts any it knows a window for */
    cellm_plugin_kind kind;
    const char* name;        /* unique per kind, lower case: "gguf", "llama", "scalar" */
    const char* version;     /* the plugin's own version, free form */
    const char* description; /* one line for `cellm-host plugins` */
    const void* iface;       /* the function table for `kind`; starts with its own struct_size */
} cellm_plugin_desc;

/* The one symbol every plugin exports.
 *
 * The host offers its ABI major and the newest minor it implements, plus its services. The plugin returns
 * its descriptor, or NULL if it cannot serve that major (the host then skips the file with a warning).
 * `host` outlives the library, so the plugin may store it. Called once per load, from one thread. */
#define CELLM_PLUGIN_ENTRY_SYMBOL "cellm_plugin_entry"
typedef const cellm_plugin_desc* (*cellm_plugin_entry_fn)(const cellm_host_api* host, uint32_t host_abi_major,
                                                           uint32_t host_abi_minor);

#ifdef __cplusplus
}
#endif
#endif /* CELLM_PLUGIN_H */
