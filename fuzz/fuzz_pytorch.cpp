// libFuzzer target: PyTorch checkpoints (plugins/formats/safetensors/pickle.h, pytorch_zip.h). An input that starts
// with a zip signature is a whole pytorch_model.bin, opened through the safetensors plugin in a folder beside a
// small Llama config.json; any other input is a data.pkl stream, read by the restricted unpickler alone. Seeds:
// tests/safetensors/pytorch_cases.py seeds (make_corpus.sh).
#include "fuzz_common.h"

#include "formats/safetensors/pickle.h"
#include "plugin_host.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size >= 4 && std::memcmp(data, "PK\x03\x04", 4) == 0) {
        const auto dir = cellm::fuzz::scratch() / "pytorch";
        std::filesystem::create_directories(dir);
        cellm::fuzz::write_file(dir / "config.json",
                                R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
                                    "intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
                                    "max_position_embeddings": 32, "vocab_size": 4, "rms_norm_eps": 1e-5})");
        cellm::fuzz::write_file(dir / "pytorch_model.bin", std::string_view(reinterpret_cast<const char*>(data), size));
        cellm::fuzz::open_and_walk(dir);
        return 0;
    }
    try {
        const auto dict = cellm::safetensors_plugin::read_state_dict_pickle(data, size, "data.pkl");
        for (const auto& t : dict.tensors) {
            if (t.storage >= dict.storages.size()) cellm::fuzz::fail("tensor refers to a storage that was not listed");
            if (t.shape.size() != t.stride.size()) cellm::fuzz::fail("tensor size and stride differ in length");
        }
    } catch (const cellm::plugin::Failure& f) {
        if (f.code == CELLM_ERR_INTERNAL || f.message.find('\n') != std::string::npos) {
            std::fprintf(stderr, "internal error: %s\n", f.message.c_str());
            cellm::fuzz::fail("the unpickler failed with an internal or multi-line error");
        }
    }
    return 0;
}
