// The key transform of a coded (r4, r3) KV cache (graph.h, "Coded pools"), measured on the model itself.
//
// Rotated 4-bit keys lose most where a few channels of K are large: in Gemma 3 those are channels where q is
// small, and the rotation spreads their error into the channels q reads (tools/kv_study, point 2). Two exact
// changes of coordinates fix that: keys are stored centred (q . mu is the same for every key of a query, so
// softmax ignores it) and smoothed per channel by a (keys times a, queries divided by it), with
// a = (ms_q / ms_k)^(3/16) per KV head, normalised to a geometric mean of 1. mu, ms_k and ms_q come from a
// prefill of a fixed English text (the Gettysburg Address and the Declaration of Independence's opening, 448
// tokens for SmolLM2) with an F32 cache; position 0 (an attention sink) is left out. Calibrating on 256 tokens
// of the Address alone gave a 10-15 % larger KL divergence (Paradise Lost, 2,048-token chunks, both models).
// Logit soft-capping is not shift-invariant, so its layers are only smoothed.
#pragma once

#include "kv/kv_cache.h"
#include "model/model.h"
#include "model/weights.h"
#include "plugin/backend.h"

namespace cellm {

// Measures and sets `kv`'s key transform for every layer with pools, running the model on `backend` over at
// most `max_tokens` tokens of the text (blocks of `block_size`). Throws Error when the model cannot run it.
void calibrate_key_transform(const Model& model, Backend& backend, const WeightStore& weights, KvCache& kv,
                             int32_t block_size, int32_t max_tokens);

}  // namespace cellm
