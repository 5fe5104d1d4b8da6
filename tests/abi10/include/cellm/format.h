/* cellm plugin ABI: file-format plugins (GGUF, safetensors folders, .cellm).
 * See plugin.h for the conventions (struct_size, ownership, status). */
#ifndef CELLM_FORMAT_H
#define CELLM_FORMAT_H

#include "cellm/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An opened model file. Created by open, destroyed by close; the plugin owns everything inside it. */
typedef struct cellm_model_file cellm_model_file;

/* Threading: probe is pure and thread-safe. An opened model file is immutable, so its view may be read from
 * any number of threads at once; close must not race with readers. */
typedef struct cellm_format_iface {
    size_t struct_size;

    /* Cheap recognition. `head` holds the first `head_len` bytes of the file (up to 64; fewer for short
     * files), or head_len == 0 when `path` is a directory. Returns a confidence 0..100 (0: not mine).
     * The host picks the plugin with the highest score when the manifest names no format. */
    int (*probe)(const char* path, const uint8_t* head, size_t head_len);

    /* Opens and validates `path` (borrowed). Every offset and size read from the file is bounds-checked:
     * a truncated or corrupt file yields CELLM_ERR_CORRUPT with a message naming what is wrong, never a
     * crash. On success *out is owned by the caller, who releases it with close. */
    cellm_status* (*open)(const char* path, cellm_model_file** out);

    /* Releases the file, its mapping and every pointer the view handed out. */
    void (*close)(cellm_model_file* file);

    /* Fills `out` (caller sets out->struct_size). All arrays stay owned by `file`, valid until close. */
    cellm_status* (*get_view)(const cellm_model_file* file, cellm_model_view* out);
} cellm_format_iface;

#ifdef __cplusplus
}
#endif
#endif /* CELLM_FORMAT_H */
