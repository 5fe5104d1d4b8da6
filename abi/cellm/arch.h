/* cellm plugin ABI: model-architecture plugins (llama, gemma3, qwen, ...).
 * See plugin.h for the conventions (struct_size, ownership, status), graph.h for the graph.
 *
 * An arch reads hyperparameters from the model view's metadata, checks that the tensors it needs exist
 * with the right shapes, and builds the forward graph of one step on request. It never touches weight
 * data or device memory: weights enter the graph as CELLM_OP_WEIGHT leaves naming a tensor index. */
#ifndef CELLM_ARCH_H
#define CELLM_ARCH_H

#include "cellm/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A model bound to an arch: hyperparameters and tensor indices. Created by load, destroyed by destroy. */
typedef struct cellm_arch_model cellm_arch_model;

/* What the host needs to size the KV cache and the logits. Filled by get_info. */
typedef struct cellm_arch_info {
    size_t struct_size;
    int32_t n_layer;
    int32_t n_vocab;     /* rows of the logits */
    int32_t n_embd;
    int32_t n_ctx_train; /* context length the model was trained for */
    int32_t kv_dim;      /* width of one token's K (and V) row per layer: n_head_kv * head_dim; for an arch with
                          * get_layer_info (since 1.2), the widest layer's, and the host sizes each layer apart */
    /* Since 1.1. KV heads, so that a q8 KV cache keeps one scale per token and head; 0 when unknown (a
     * plugin built for 1.0 leaves it so), and the host then scales runs of 32 values instead. */
    int32_t n_head_kv;
} cellm_arch_info;

/* Since 1.2. One layer's paged KV pools, for archs whose layers differ: Gemma 4's global layers have wider heads
 * than its local ones, a layer may read another layer's pools instead of keeping its own, and a recurrent layer
 * keeps none. Filled by get_layer_info. */
typedef struct cellm_arch_layer_info {
    size_t struct_size;
    int32_t kv_dim;    /* width of one token's K (and V) row in this layer's pools; 0 = the layer has no pools, and
                        * a CELLM_OP_KV_CACHE leaf naming it fails the build */
    int32_t n_head_kv; /* KV heads in that row (an I8 cache keeps one scale per token and head); 0 when unknown */
    /* A recurrent layer's per-sequence state (graph.h, "Recurrent state"): floats per sequence in its STATE
     * leaves, [0] its convolution window's and [1] its recurrence's; 0 = no such state. The host keeps a slot of
     * each per live sequence. */
    int32_t state_size[2];
    /* Since 1.4. Positions this layer's queries look back (a sliding window): a query at p reads the keys of
     * max(0, p - window + 1) <= j <= p only; 0 = the whole context. The host may give back the memory of rows
     * that no later query of the layer can read. */
    int32_t window;
} cellm_arch_layer_info;

/* The shape of one step. Every graph built for the same shape has the same nodes, so a backend plan made
 * for it can be executed again for any batch of that shape. */
typedef struct cellm_batch_shape {
    size_t struct_size;
    int32_t n_tokens;   /* rows of the batch */
    int32_t n_seqs;     /* rows of the block table */
    int32_t n_outputs;  /* rows whose logits are wanted */
    int32_t max_blocks; /* columns of the block table */
    int32_t block_size; /* token slots per KV block */
    /* Since 1.3. Batch rows whose embedding the host supplies (an image's, from build_vision_graph) instead of
     * the token's: the arch binds CELLM_INPUT_EMBEDDINGS F32 [n_embd, n_embd_rows] and
     * CELLM_INPUT_EMBEDDING_ROWS I32 [n_embd_rows] and puts them in place (CELLM_OP_SET_ROWS) after the token
     * embedding lookup and any scaling of it, as transformers does. 0 for a text-only step; the host asks for
     * more only from an arch that has get_vision_info. */
    int32_t n_embd_rows;
} cellm_batch_shape;

/* Since 1.3. What the host needs to feed an arch's vision encoder. Filled by get_vision_info. */
typedef struct cellm_arch_vision_info {
    size_t struct_size;
    int32_t image_size;       /* side in pixels of the square images (tiles) the encoder takes               */
    int32_t patch_size;       /* side in pixels of one patch                                                */
    int32_t tokens_per_image; /* embeddings the encoder gives per image, each standing for one image token    */
    int32_t n_embd;           /* width of each embedding: the text model's n_embd                            */
} cellm_arch_vision_info;

/* Since 1.3. The shape of one vision graph: how many preprocessed images (tiles) it encodes at once. */
typedef struct cellm_vision_shape {
    size_t struct_size;
    int32_t n_images;
} cellm_vision_shape;

/* Host service through which an arch appends nodes. Owned by the host, valid during build_graph only. */
typedef struct cellm_graph_builder {
    size_t struct_size;
    void* ctx; /* pass back unchanged */
    /* Appends a copy of `node` (its name too) and returns its index, or -1 if the node is malformed
     * (a src index out of range) or memory ran out; the host then fails the build with a message.
     * `node_size` is sizeof(cellm_node) as the arch was compiled: the host copies what both sides know and
     * zero-fills fields a newer host has beyond it, so cellm_node can grow within a major. */
    int32_t (*add_node)(void* ctx, const cellm_node* node, size_t node_size);
    /* Declares a node as a graph output, in order (the logits first). */
    void (*add_output)(void* ctx, int32_t node);
} cellm_graph_builder;

/* Threading: load and destroy are called from one thread. A loaded model is immutable: get_info and
 * build_graph may run concurrently on it. */
typedef struct cellm_arch_iface {
    size_t struct_size;

    /* NULL-terminated list of general.architecture values this plugin serves (static storage). */
    const char* const* architectures;

    /* Binds `model` (borrowed: the host keeps it alive until destroy) to this arch. Fails with
     * CELLM_ERR_CORRUPT or CELLM_ERR_NOT_FOUND naming the missing key or tensor, or the bad shape. */
    cellm_status* (*load)(const cellm_model_view* model, cellm_arch_model** out);

    void (*destroy)(cellm_arch_model* model);

    /* Fills `out` (caller sets out->struct_size). */
    cellm_status* (*get_info)(const cellm_arch_model* model, cellm_arch_info* out);

    /* Builds the forward graph of one step through `builder`. Its only output is the logits,
     * F32 [n_vocab, shape->n_outputs], for the rows CELLM_INPUT_OUTPUT_ROWS names. */
    cellm_status* (*build_graph)(const cellm_arch_model* model, const cellm_batch_shape* shape,
                                 const cellm_graph_builder* builder);

    /* Since 1.2 (optional: NULL, or a plugin of an earlier minor, means every layer has cellm_arch_info's kv_dim
     * and n_head_kv). Fills `out` (caller sets out->struct_size) for layer 0 <= layer < n_layer; called after
     * get_info, once per layer, from the thread that loaded the model. */
    cellm_status* (*get_layer_info)(const cellm_arch_model* model, int32_t layer, cellm_arch_layer_info* out);

    /* Since 1.3 (optional: NULL, or a plugin of an earlier minor, means the model takes no images). Fills `out`
     * (caller sets out->struct_size); fails with CELLM_ERR_UNSUPPORTED when this model has no vision encoder. */
    cellm_status* (*get_vision_info)(const cellm_arch_model* model, cellm_arch_vision_info* out);

    /* Since 1.3, with get_vision_info. Builds the graph that encodes shape->n_images images: its input is
     * CELLM_INPUT_PIXELS F32 [image_size, image_size, 3, n_images], normalised as the model's processor does; its
     * only output F32 [n_embd, tokens_per_image * n_images], image by image, the embeddings the text step takes
     * through CELLM_INPUT_EMBEDDINGS in place of the image tokens. Same threading as build_graph. */
    cellm_status* (*build_vision_graph)(const cellm_arch_model* model, const cellm_vision_shape* shape,
                                        const cellm_graph_builder* builder);
} cellm_arch_iface;

#ifdef __cplusplus
}
#endif
#endif /* CELLM_ARCH_H */
