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
    app.add_option("--preset", preset, "model shape and arch: tiny, smollm2-135m (llama), qwen2-tiny, qwen3-tiny, gemma3-tiny, gemma3-tiny-softcap")
        ->capture_default_str();
    app.add_option("--type", type, "2-D weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k")
        ->capture_default_str();
    app.add_option("--seed", seed, "random seed")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    try {
        cellm::synthetic::ModelOptions options{preset, cellm::synthetic::parse_weight_type(type), seed};
        cellm::synthetic::write_model(out, options);
    } catch (const std::exception& e) {
        std::cerr << "cellm-make-model: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
