// Shared by the end-to-end tests: where things are, a synthetic model on disk, and running cellm-host.
#pragma once

#include "engine/engine.h"
#include "model/model.h"
#include "plugin/plugin_registry.h"

#include <cellm/tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace cellm::testing {

std::filesystem::path source_dir();
// The folder scripts/fetch_models.sh fills: $CELLM_MODELS, else ~/.cache/cellm/models.
std::filesystem::path models_dir();
std::filesystem::path smollm2_path();
// True under `scripts/test.sh --full` (CELLM_TEST_FULL=1): the checks that take minutes and that others imply
// run too. The default run, which CI runs, skips them with the reason.
bool full_suite();
// A fresh folder under the system temp dir, removed at exit of the test program.
std::filesystem::path temp_dir();

// Writes (once per process and type) the synthetic tiny llama model with 2-D weights of `type`.
std::filesystem::path synthetic_model(cellm_dtype type);

// A registry that loaded the built plugins.
const PluginRegistry& registry();

// A model on a scalar backend with an engine over it, as the CLI wires them.
struct Stack {
    std::unique_ptr<Model> model;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Engine> engine;
};
// `backend` is a plugin name, optionally with options: "vulkan:precision=fast". `mmproj`: llama.cpp's mmproj file
// beside a text GGUF, or empty.
Stack make_stack(const std::filesystem::path& model, const std::string& backend = "scalar", EngineOptions options = {},
                 const std::filesystem::path& mmproj = {});

struct CommandResult {
    int exit_code = -1;
    std::string out, err;
};
// Runs cellm-host with `args` (already shell-quoted where needed) and `input` on its standard input.
CommandResult run_host(const std::string& args, const std::string& input = "");
std::string shell_quote(const std::string& s);

// Every position's logits of `tokens`, in one step (LogitsWanted::All) of a fresh sequence.
std::vector<float> all_logits(Stack& stack, const std::vector<int32_t>& tokens);
// Prompt and greedy tokens of a prompt of the parity reference files (tests/data/parity): every position whose
// logits the reference holds.
std::vector<int32_t> teacher_tokens(const nlohmann::json& prompt);

// The scalar backend's logits of `tokens` in one pass (LogitsWanted::All), context length 512. They are the
// slowest part of the parity suites (minutes per model on two cores) and several tests compare against the same
// ones, so under ctest a setup test per model computes them once into the folder $CELLM_SCALAR_LOGITS names
// (tests/e2e/CMakeLists.txt) and the others read them from there. Without that folder, or without the file, they
// are computed here. `refresh`: compute and write even if the file is there (the setup test).
std::vector<float> scalar_logits(const std::filesystem::path& model, const std::vector<int32_t>& tokens,
                                 bool refresh = false);

// Cosine similarity of two equally long vectors.
double cosine(const float* a, const float* b, size_t n);

}  // namespace cellm::testing
