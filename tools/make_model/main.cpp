// cellm-make-model: writes a synthetic llama, qwen2, qwen3 or gemma3 GGUF with random weights, for tests and benchmarks
// on machines that have no real checkpoint (and no Python).
#include "synthetic_model.h"

#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

int main(int argc, char** argv) {
    CLI::App app{"Write a synthetic llama, qwen2, qwen3 or gemma3 GGUF model with random weights"};
    std::string out, preset = "tiny", type = "f32";
    uint64_t seed = 1;
    app.add_option("--out", out, "output GGUF path")->required();
    app.add_option("--preset", preset,
                   "model shape and arch: tiny, smollm2-135m (llama), qwen2-tiny, qwen3-tiny, gemma3-tiny, "
                   "gemma3-tiny-softcap, gemma3-270m (exact shape)")
        ->capture_default_str();
    app.add_option("--type", type, "2-D weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k, or q4_k_m: "
                   "per tensor, as llama.cpp's Q4_K_M mixes Q4_K, Q6_K, Q5_0 and Q8_0")
        ->capture_default_str();
    app.add_option("--seed", seed, "random seed")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        cellm::synthetic::ModelOptions options{preset, CELLM_TYPE_F32, seed};
        cellm::synthetic::set_type(options, type);
        cellm::synthetic::write_model(out, options);
    } catch (const std::exception& e) {
        std::cerr << "cellm-make-model: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
