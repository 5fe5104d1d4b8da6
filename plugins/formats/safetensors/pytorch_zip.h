// A PyTorch checkpoint in torch.save's zip format (PyTorch 1.6 on: pytorch_model.bin, its shards, .pt state
// dicts): a zip archive whose entries share one top folder (its name varies: "archive", the file's stem),
// <top>/data.pkl, the pickled state dict (pickle.h), and <top>/data/<key>, each storage's raw little-endian
// elements. torch.save stores every entry uncompressed, so tensors are served from the mapped file in place, as
// the safetensors reader serves them.
#pragma once

#include "shard.h"

#include <cstdint>
#include <string>
#include <vector>

namespace cellm::safetensors_plugin {

// Validates the archive `file` (`data`, `size`: its mapping) and returns its tensors. Every zip record, entry
// range, storage size, tensor offset, size and stride is checked against the file; compressed or encrypted
// entries, non-contiguous tensors and big-endian archives are refused. A tensor named lm_head.weight that is the
// very same view as another tensor (the tied output torch.save keeps and save_pretrained drops) is left out.
// Throws plugin::Failure (CORRUPT, or UNSUPPORTED for what cellm does not read) with a one-line message that
// starts with `file`.
std::vector<ShardTensor> read_pytorch_zip(const std::string& file, const uint8_t* data, uint64_t size);

}  // namespace cellm::safetensors_plugin
