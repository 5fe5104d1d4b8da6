// The data.pkl of a PyTorch checkpoint read without running it: a restricted unpickler that knows only the
// opcodes and globals torch.save writes for a state dict (a dict of name -> tensor), and refuses everything else
// with one line. Nothing is ever called or imported; the few allowed globals are recognised by name and their
// effect is rebuilt here.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cellm::safetensors_plugin {

// A storage a tensor views: the entry data/<key> of the archive, `numel` elements of `type_name`.
struct PickledStorage {
    std::string key;
    std::string type_name;  // FloatStorage, HalfStorage, BFloat16Storage, LongStorage, ...
    cellm_dtype type;       // F32, F16, BF16; CELLM_TYPE_COUNT_GGUF for a type cellm does not run
    uint64_t element_size;  // bytes per element of type_name
    uint64_t numel;
};

// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...): sizes and strides in elements,
// outermost first. Nothing is checked against the storage here (pytorch_zip.cpp does that).
struct PickledTensor {
    std::string name;
    size_t storage;  // index into PickledStateDict::storages
    uint64_t offset;
    std::vector<int64_t> shape, stride;
};

struct PickledStateDict {
    std::vector<PickledStorage> storages;  // each key once
    std::vector<PickledTensor> tensors;    // in the pickle's order
};

// Reads `size` bytes of pickle at `data`. Throws plugin::Failure (CORRUPT for a malformed stream, UNSUPPORTED for
// anything outside a state dict: another global, a call of anything but the allowed rebuilders, an unknown opcode,
// a value that is not a tensor) with a one-line message that starts with `where`.
PickledStateDict read_state_dict_pickle(const uint8_t* data, uint64_t size, const std::string& where);

}  // namespace cellm::safetensors_plugin
