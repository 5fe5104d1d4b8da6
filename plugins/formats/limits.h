// Fixed limits no model file may exceed, shared by the format plugins and the host's tokenizer builder
// (docs/reliability.md, "Limits a file cannot exceed"). Each lies far above what real models need and is
// checked before anything sized by it is allocated, so a hostile header cannot make a reader reserve huge
// tables. Crossing one fails with a message naming the file and the limit: CELLM_ERR_CORRUPT, except the
// model size, which a real model could one day reach (CELLM_ERR_UNSUPPORTED).
#pragma once

#include <cstdint>
#include <string>

namespace cellm::file_limits {

// Real models have a few hundred to a few thousand tensors (Llama 3.1 405B: about 1,100; a MoE checkpoint with one
// tensor per expert: ~100k).
inline constexpr uint64_t max_tensors = uint64_t{1} << 20;
// Real files carry tens of metadata keys.
inline constexpr uint64_t max_metadata_entries = uint64_t{1} << 20;
// Elements of one metadata array: the longest real ones are the vocabulary and the merges, a few hundred thousand.
inline constexpr uint64_t max_array_elements = uint64_t{1} << 24;
// Bytes of one string (key, value, tensor name, token): the longest real ones are chat templates, tens of KB.
inline constexpr uint64_t max_string_bytes = uint64_t{1} << 20;
// Tokens in a vocabulary: the largest real one is Gemma 3's 262,144.
inline constexpr uint64_t max_vocab = uint64_t{1} << 22;
// Bytes mapped for one model, and bytes of all its tensors together (4 TiB): the largest open checkpoints are
// ~2 TB in BF16 (Kimi K2, 1T parameters).
inline constexpr uint64_t max_model_bytes = uint64_t{1} << 42;

// "tensor count 5000000 exceeds the limit of 1048576", with `unit` (" bytes") after the limit.
inline std::string exceeds(const std::string& what, uint64_t value, uint64_t limit, const char* unit = "") {
    return what + " " + std::to_string(value) + " exceeds the limit of " + std::to_string(limit) + unit;
}

}  // namespace cellm::file_limits
