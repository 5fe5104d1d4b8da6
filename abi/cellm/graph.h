/* cellm plugin ABI: the compute graph an arch builds and a backend runs.
 * See plugin.h for the conventions (struct_size, ownership, status).
 *
 * A graph describes one engine step: a batch of tokens that may belong to several sequences. Nodes are
 * listed in a valid execution order (every src index is smaller than the node's own index). Every tensor
 * is contiguous and its shape is ne[0..3] with ne[0] innermost; activations are F32.
 *
 * Leaves are of these kinds, all resolved by the host before the backend sees the graph:
 *  - CELLM_OP_WEIGHT: a model tensor; `tensor` says where it lives on the backend.
 *  - CELLM_OP_KV_CACHE: one layer's K or V pool, or an I8 pool's scales; `tensor` says where it lives.
 *  - CELLM_OP_STATE (since 1.2): one layer's per-sequence recurrent state; `tensor` says where it lives.
 *  - CELLM_OP_INPUT: per-step data (token ids, positions, page tables, ...) bound at execute time.
 *
 * Since 1.3 a graph may also encode images instead of running a decoder step (arch.h, build_vision_graph): its
 * input is the preprocessed pixels and its output the image's embeddings, and it has no KV or state leaves.
 *
 * The KV cache is paged: a pool of blocks of `block_size` token slots, shared by all sequences. Slot s of
 * a layer's K pool is row s of a [kv_dim, n_slots] tensor, and block b holds slots b*block_size ..
 * (b+1)*block_size-1. A sequence's page table lists its blocks in position order, so key position j of
 * sequence r lives in slot block_table[r][j / block_size] * block_size + j % block_size.
 *
 * Pools are F32, F16 or I8. An I8 pool stores int8 codes and has a companion scale pool, F32 [n_groups,
 * n_slots] (a KV_CACHE leaf of iparams[1] = 2 for K, 3 for V): each slot's row of kv_dim values is cut into
 * n_groups equal runs of kv_dim / n_groups consecutive values, and value i of slot s means
 * scales[s][i / (kv_dim / n_groups)] * codes[s][i], computed in float. A group's scale is max|x| / 127 over its
 * values and its codes are round-to-nearest-even(x / scale) clamped to [-127, 127]; a group of zeros has scale
 * 0 and codes 0. n_groups is the host's choice (any divisor of kv_dim): backends must accept every one.
 * The host adds the scale leaves and the sources that name them (KV_STORE, ATTENTION), so an arch builds the
 * same graph whatever the pool type.
 *
 * Coded pools (since 1.5): R4 and R3 pools (tensor.h) store an index into a fixed table of levels T
 * (CELLM_KV_LEVELS_R4 / _R3 below) per value and have a companion scale pool like I8's, but F16, with one scale
 * per group: value i of slot s means float(scales[s][g]) * T[code[s][i]], g = i / w, w = kv_dim / n_groups.
 * A group's codes and scale are chosen from its w values y as follows, all in float with these operations in
 * this order: S = sum of fma(y_i, y_i, S) over i ascending from S = 0; each value's magnitude class k is the
 * number of thresholds t of CELLM_KV_THRESHOLDS_R4 / _R3 with (y_i * y_i) * w > (t * t) * S, and its code is
 * L/2 + k when y_i >= 0 (or is NaN) and L/2 - 1 - k when y_i < 0 (L levels); then P = sum of fma(y_i, T[code_i], P)
 * and Q = sum of fma(T[code_i], T[code_i], Q) likewise, and the scale is P / Q (the least-squares scale of the
 * chosen levels) rounded to F16, nearest even. The levels are those of the minimum-MSE quantizer of a unit
 * normal, which is what a group's values look like after the rotation the host puts in front of the store:
 * for coded pools the host adds HADAMARD nodes (and, for keys, a fixed per-channel shift and scale, folded
 * back into the query) between the arch's nodes, so an arch builds the same graph for every pool type. Those
 * constants are KV_CACHE leaves of kinds 4..7 (below), plain F32 data to a backend.
 *
 * Recurrent state (since 1.2). A recurrent layer (Qwen3.5's gated DeltaNet) keeps no KV rows: each sequence has
 * a fixed-size state per layer instead, in STATE leaves shaped [state_size, n_state_slots], one slot per live
 * sequence. The host owns the slots: it zeroes one when a sequence starts (or starts again), copies it when a
 * sequence forks and frees it with the sequence, and binds CELLM_INPUT_STATE_SLOTS to say which slot each
 * block-table row uses. SSM_CONV and DELTA_NET read their sequence's slot and write it back in place, so a step
 * advances each sequence's state by that step's tokens, and a prompt split over several steps gives what one
 * step would. A state cannot be cut back to an earlier position.
 */
#ifndef CELLM_GRAPH_H
#define CELLM_GRAPH_H

#include "cellm/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CELLM_MAX_SRC 8
#define CELLM_MAX_PARAMS 8

typedef enum cellm_op {
    CELLM_OP_NONE = 0,

    /* Leaves. */
    CELLM_OP_WEIGHT = 1,   /* iparams[0]: tensor index in the model view                                   */
    CELLM_OP_KV_CACHE = 2, /* iparams[0]: layer, iparams[1]: 0 = K, 1 = V. ne = [kv_dim, n_slots];
                            * 2 = K scales, 3 = V scales of I8 pools: F32 ne = [n_groups, n_slots] (F16 for
                            * R4 and R3 pools). Since 1.5, constants of a coded pool's layer: 4 = K shift,
                            * 5 = K channel scale, F32 [kv_dim]; 6 = query channel scale, F32
                            * [head_dim, 1, n_head_kv]; 7 = rotation signs, F32 [head_dim]                  */
    CELLM_OP_INPUT = 3,    /* iparams[0]: a cellm_input_kind. I32 data (F32 for the kinds that say so), shape
                            * per kind (see below)                                                          */

    /* Table lookup: out[:, i] = dequant(src0[:, src1[i]]). src0: [n, rows] any supported type,
     * src1: I32 [m]. out: F32 [n, m]. Used for embeddings and to pick output rows. */
    CELLM_OP_GET_ROWS = 10,

    /* out = src1 x src0^T as in y = W x: src0 the weight [k, m] (any supported type), src1 F32 [k, n].
     * out: F32 [m, n]. */
    CELLM_OP_MATMUL = 11,

    /* Element-wise on F32. src1 is broadcast: each of its dims is either equal to src0's or 1. */
    CELLM_OP_ADD = 12,
    CELLM_OP_MUL = 13,
    CELLM_OP_SCALE = 14, /* out = src0 * fparams[0] */

    /* RMS normalisation over ne[0]: out = src0 / sqrt(mean(src0^2) + fparams[0]) (eps), then multiplied by
     * src1 (F32 [ne0], broadcast) when src[1] >= 0. */
    CELLM_OP_RMS_NORM = 15,

    /* Unary activations on F32. */
    CELLM_OP_SILU = 16,
    CELLM_OP_GELU = 17, /* tanh approximation */
    CELLM_OP_TANH = 18,

    /* Gated unit: out = act(src0) * src1, act = SILU when iparams[0] == 0 (SwiGLU), GELU (tanh) when 1. */
    CELLM_OP_GLU = 19,

    /* Rotary position embedding on src0 F32 [head_dim, n_heads, n_tokens] with positions src1 (I32 [n_tokens]).
     * iparams[0]: n_rot (leading dims of each head that rotate), iparams[1]: cellm_rope_mode.
     * fparams[0]: freq_base, fparams[1]: freq_scale (linear position scaling, 1 = none).
     * src[2] (optional, F32 [n_rot/2]): per-frequency divisors (Llama 3 "rope_freqs"). */
    CELLM_OP_ROPE = 20,

    /* Reinterpret a contiguous src0 with the node's shape (same element count). No data moves. */
    CELLM_OP_RESHAPE = 21,

    /* Write the new keys or values of this step into a layer's pool: for each token t, row t of src1
     * (F32 [kv_dim, n_tokens]) goes to slot src2[t] of src0 (a CELLM_OP_KV_CACHE leaf), converted to the
     * pool's type. The output aliases src0 and has its type and shape (the host fills both in, as it does for
     * the pool leaf); later readers list this node as a source to order after it.
     * An I8 pool takes its scale pool as src3 (-1 otherwise): the store writes each token's codes and scales. */
    CELLM_OP_KV_STORE = 22,

    /* Causal attention through the page table, multi-head with grouped KV heads.
     * src0: q F32 [head_dim, n_head, n_tokens]; src1: K pool; src2: V pool (KV_STORE nodes of this step,
     * so the new tokens are in place); src3: block table I32 [max_blocks, n_seqs]; src4: token's sequence
     * row I32 [n_tokens]; src5: positions I32 [n_tokens]; src6, src7: the scale pools (KV_CACHE leaves) of an
     * I8 K pool and an I8 V pool, -1 for the other types.
     * Token t (sequence r = src4[t], position p = src5[t]) attends to key positions j with
     * max(0, p - window + 1) <= j <= p of sequence r.
     * iparams: [0] n_head, [1] n_head_kv, [2] head_dim, [3] block_size, [4] window (0 = unlimited).
     * fparams: [0] scale applied to q.k, [1] logit soft-cap (0 = none: s = cap * tanh(s / cap)).
     * out: F32 [head_dim * n_head, n_tokens]. */
    CELLM_OP_ATTENTION = 23,

    /* Since 1.2. A strided window of src0 (F32), copied out contiguous:
     * out[i0, i1, i2, i3] = src0[iparams[0] + i0 + i1 * iparams[1] + i2 * iparams[2] + i3 * iparams[3]],
     * indexing src0's elements in memory order: iparams[0] is an offset and iparams[1..3] the strides of dims 1..3
     * (dim 0 is contiguous), all in elements and non-negative, every index within src0. Takes one layer's slice of
     * a tensor packed for all layers (Gemma 4's per-layer embeddings). out: F32, the node's shape. */
    CELLM_OP_VIEW = 24,

    /* Since 1.2: what Qwen3.5's gated DeltaNet layers need (see "Recurrent state" above). */

    /* Unary on F32: out = 1 / (1 + exp(-src0)), and out = log(1 + exp(src0)) (src0 itself above 20, as torch). */
    CELLM_OP_SIGMOID = 25,
    CELLM_OP_SOFTPLUS = 26,

    /* Leaf: one layer's per-sequence state. iparams[0]: layer, iparams[1]: which of its states (0 = convolution,
     * 1 = recurrence). F32 ne = [state_size, n_state_slots]; the host resolves it as it does KV_CACHE leaves. */
    CELLM_OP_STATE = 27,

    /* Depthwise causal convolution along each sequence, its last kernel - 1 inputs carried in the state.
     * src0: x F32 [channels, n_tokens]; src1: weights F32 [kernel, channels] (the taps of channel c, oldest input
     * first); src2: state (a STATE leaf) F32 [(kernel - 1) * channels, n_state_slots], a slot holding its
     * sequence's last kernel - 1 inputs oldest first, each a row of `channels`; src3: token's sequence row I32
     * [n_tokens]; src4: state slot of each sequence row I32 [n_seqs].
     * Token t of row r sees, oldest first, the slot's kernel - 1 inputs, the earlier tokens of row r in this
     * step, then its own: out[c, t] = sum_j w[j, c] * in_j[c] over its last `kernel` inputs. After the step the
     * slot holds row r's last kernel - 1 inputs. A row's tokens are in position order. out: F32 [channels, n_tokens]. */
    CELLM_OP_SSM_CONV = 28,

    /* Gated delta rule (Gated DeltaNet's recurrence) along each sequence, its state updated in place.
     * src0: q F32 [d_k, n_k_heads, n_tokens]; src1: k, the same shape; src2: v F32 [d_v, n_v_heads, n_tokens];
     * src3: g (log of the decay, <= 0) F32 [n_v_heads, n_tokens]; src4: beta F32 [n_v_heads, n_tokens];
     * src5: state (a STATE leaf) F32 [n_v_heads * d_k * d_v, n_state_slots]: value head h's matrix S_h [d_k][d_v]
     * at h * d_k * d_v, row-major; src6: token's sequence row I32 [n_tokens]; src7: state slot of each sequence
     * row I32 [n_seqs].
     * iparams[0]: which key head value head h reads: 0 = h / (n_v_heads / n_k_heads) (Hugging Face's order),
     * 1 = h % n_k_heads (llama.cpp's GGUF order). For each token in order and each value head, with its key
     * head's q and k:   S = exp(g) S;   u = beta (v - S^T k);   S = S + k u^T;   out = S^T q
     * q and k arrive as the model wants them (normalised and scaled by the arch). A row's tokens are in position
     * order. out: F32 [d_v, n_v_heads, n_tokens]. */
    CELLM_OP_DELTA_NET = 29,

    /* Since 1.3: what vision encoders (SigLIP, ViT) and the splicing of their output into a text step need. */

    /* Layer normalisation over ne[0]: out = (src0 - mean) / sqrt(var + fparams[0]), var the biased variance, then
     * multiplied by src1 (F32 [ne0], broadcast) when src[1] >= 0 and src2 (F32 [ne0]) added when src[2] >= 0. */
    CELLM_OP_LAYER_NORM = 30,

    /* Cut images into square patches, as a convolution of stride = kernel = p (iparams[0]) reads them.
     * src0: F32 [width, height, channels, n_images] (planar: each channel a row-major height x width plane).
     * out: F32 [channels * p * p, (height / p) * (width / p) * n_images]: column (n, py, px), patches row by row
     * of each image, holds src0[n][c][py * p + ky][px * p + kx] at row c * p * p + ky * p + kx, which is a
     * convolution weight's [out, channels, p, p] layout, so MATMUL with that weight is the convolution. Pixels
     * past the last whole patch of a row or column are not read. */
    CELLM_OP_PATCHES = 31,

    /* Attention without a cache or mask: every token attends to every token of its group. src0: q F32
     * [head_dim, n_head, n_tokens]; src1: k, src2: v F32 [head_dim, n_head_kv, n_tokens] (n_head a multiple of
     * n_head_kv, query head h reading KV head h / (n_head / n_head_kv)). Tokens form groups of iparams[3]
     * consecutive tokens (one image each; n_tokens a multiple of it) and attend within their group.
     * iparams: [0] n_head, [1] n_head_kv, [2] head_dim, [3] group size. fparams: [0] scale applied to q.k.
     * out: F32 [head_dim * n_head, n_tokens]. */
    CELLM_OP_SELF_ATTENTION = 32,

    /* src0 with some columns replaced: out = src0, then out[:, src2[i]] = src1[:, i] for each i.
     * src0: F32 [n, m]; src1: F32 [n, k]; src2: I32 [k], distinct, each in [0, m). out: F32 [n, m].
     * Puts image embeddings in place of the image tokens' rows of a text step. */
    CELLM_OP_SET_ROWS = 33,

    /* Since 1.5. A Walsh-Hadamard rotation of each run of d = iparams[0] consecutive values of src0 (F32; d a
     * power of two >= 2 dividing ne[0]), with signs src1 (F32 [d]: value i of a run is multiplied by src1[i])
     * and normalisation c = fparams[0]. iparams[1] = 0: out = c * H (s * x); 1: out = s * (c * H x), the inverse
     * when c = 1/sqrt(d) and every sign is +-1. H x is computed in place by butterflies in natural (Sylvester)
     * order: for h = 1, 2, 4, .. d/2, every j with j mod 2h < h, (x_j, x_j+h) <- (x_j + x_j+h, x_j - x_j+h), in
     * float. out: F32, src0's shape. The host uses it around coded KV pools (see "Coded pools"). */
    CELLM_OP_HADAMARD = 34,

    CELLM_OP_COUNT
} cellm_op;

/* Since 1.5. The levels of the coded KV types, ascending (the minimum-MSE quantizer of a unit normal), and the
 * magnitude thresholds between their positive levels (see "Coded pools"). */
#define CELLM_KV_LEVELS_R4                                                                                     \
    { -2.7322f, -2.0685f, -1.6175f, -1.2557f, -0.9419f, -0.6564f, -0.3878f, -0.1283f,                          \
      0.1283f, 0.3878f, 0.6564f, 0.9419f, 1.2557f, 1.6175f, 2.0685f, 2.7322f }
#define CELLM_KV_THRESHOLDS_R4 { 0.25805f, 0.5221f, 0.79915f, 1.0988f, 1.4366f, 1.843f, 2.40035f }
#define CELLM_KV_LEVELS_R3 { -2.1520f, -1.3440f, -0.7561f, -0.2451f, 0.2451f, 0.7561f, 1.3440f, 2.1520f }
#define CELLM_KV_THRESHOLDS_R3 { 0.5006f, 1.05005f, 1.748f }

typedef enum cellm_rope_mode {
    CELLM_ROPE_ADJACENT = 0, /* rotate pairs (2i, 2i+1): GGUF's permuted Llama Q/K layout */
    CELLM_ROPE_HALVES = 1    /* rotate pairs (i, i + n_rot/2): Hugging Face layout, GPT-NeoX, Qwen, Gemma */
} cellm_rope_mode;

/* What a CELLM_OP_INPUT leaf carries. The host binds host memory for each at execute time. */
typedef enum cellm_input_kind {
    CELLM_INPUT_TOKENS = 0,       /* I32 [n_tokens]: token ids                                       */
    CELLM_INPUT_POSITIONS = 1,    /* I32 [n_tokens]: position of each token in its sequence           */
    CELLM_INPUT_TOKEN_SEQ = 2,    /* I32 [n_tokens]: row of the block table each token belongs to     */
    CELLM_INPUT_SLOTS = 3,        /* I32 [n_tokens]: KV slot each token's keys and values go to        */
    CELLM_INPUT_BLOCK_TABLE = 4,  /* I32 [max_blocks, n_seqs]: page table per sequence (-1 padding)   */
    CELLM_INPUT_OUTPUT_ROWS = 5,  /* I32 [n_outputs]: batch rows whose logits are wanted, ascending     */
    CELLM_INPUT_STATE_SLOTS = 6,  /* I32 [n_seqs]: state slot of each block-table row (since 1.2)      */
    /* Since 1.3. F32 inputs: the leaf's type is CELLM_TYPE_F32 and the host binds float data. */
    CELLM_INPUT_PIXELS = 7,       /* F32 [image_size, image_size, 3, n_images]: preprocessed images, planar
                                   * RGB (a vision graph's input)                                       */
    CELLM_INPUT_EMBEDDINGS = 8,   /* F32 [n_embd, n_embd_rows]: embeddings that replace token rows      */
    CELLM_INPUT_EMBEDDING_ROWS = 9, /* I32 [n_embd_rows]: the batch rows they replace, ascending        */
    CELLM_INPUT_COUNT
} cellm_input_kind;

/* One node. Plain data; the graph's owner keeps it alive. Sizes are fixed for ABI major 1: a later minor
 * may append fields, so readers step through arrays with cellm_graph.node_size. */
typedef struct cellm_node {
    cellm_op op;
    cellm_dtype type;           /* output element type (F32 except for leaves)                          */
    int64_t ne[CELLM_MAX_DIMS]; /* output shape                                                          */
    int32_t src[CELLM_MAX_SRC]; /* indices of earlier nodes, -1 when unused                               */
    int32_t iparams[CELLM_MAX_PARAMS];
    float fparams[CELLM_MAX_PARAMS];
    const char* name;           /* optional, for debugging; owned by the graph's owner                  */
    cellm_tensor_desc tensor;   /* leaves WEIGHT and KV_CACHE: resolved storage; otherwise zeroed       */
} cellm_node;

/* A whole step. Built by the host (from the arch's nodes); owned by the host and valid for the call that
 * receives it. A backend that keeps information past that call copies it (graph_prepare does). */
typedef struct cellm_graph {
    size_t struct_size;
    size_t node_size; /* sizeof(cellm_node) as the writer compiled it */
    int32_t n_nodes;
    const cellm_node* nodes;
    int32_t n_outputs;      /* nodes whose values the host reads back after execute (logits) */
    const int32_t* outputs;
} cellm_graph;

static inline const cellm_node* cellm_graph_node(const cellm_graph* g, int32_t i) {
    return (const cellm_node*)((const char*)g->nodes + (size_t)i * g->node_size);
}

static inline int64_t cellm_node_nelements(const cellm_node* n) {
    return n->ne[0] * n->ne[1] * n->ne[2] * n->ne[3];
}

#ifdef __cplusplus
}
#endif
#endif /* CELLM_GRAPH_H */
