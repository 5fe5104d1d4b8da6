// The session manifest: one TOML file naming the model, the backend and its options, the context size, the
// sampling defaults, the chat template and where plugins live. Loading validates everything up front, so a bad
// manifest fails with one line "FILE:LINE:COL: KEY: message" before any model is touched.
#pragma once

#include "schedule/sampler.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

struct ModelConfig {
    std::filesystem::path path;  // absolute: ~ and ${VAR} expanded, relative paths taken from the manifest's folder
    std::string format;          // empty: detect from the file's magic
    std::string arch;            // empty: from the file's general.architecture
    std::filesystem::path mmproj;  // llama.cpp's mmproj file beside a text GGUF (resolved like path); empty: none
};

struct BackendConfig {
    std::string name = "scalar";  // empty: the fastest CPU backend found (runtime.cpp)
    int32_t threads = 1;  // defaults to the machine's physical cores
    // Every [backend] key except name, as text, for the backend's create(); always holds "threads".
    std::map<std::string, std::string> options;
};

struct ContextConfig {
    int32_t length = 2048;    // tokens per sequence
    int32_t block_size = 16;  // KV-cache block size in tokens, a power of two in 1..256
    std::string kv_type = "f16";  // f32 | f16 | q8
    int32_t kv_memory_mib = 0;    // KV pool size; 0: one full context per session the manifest runs at once
    int32_t memory_budget_mib = 0;  // weights, scratch and KV together; the KV pool gets what is left (0: no budget)
    bool prefix_cache = true;     // reuse cached blocks of an identical prompt prefix
};

// How one sequence is generated. [sampling] gives the defaults; a per-session table may later override them.
struct GenerationConfig {
    SamplingParams sampling;  // seed: the manifest's, or drawn from std::random_device when not given
    bool seed_given = false;
    int32_t max_tokens = 256;
    std::vector<std::string> stop;
};

// One [[session]] table: a conversation `cellm-host run` serves beside the others. Sampling keys default to
// [sampling]'s.
struct SessionConfig {
    std::string name;
    std::string prompt;
    GenerationConfig generation;
    int32_t priority = 1;          // higher first; "interactive" = 1, "background" = 0
    std::optional<bool> chat;      // wrap the prompt in the chat template; unset: when the model has one
};

// [scheduler]: how steps are filled.
struct SchedulerConfig {
    int32_t token_budget = 256;  // tokens per step: decode tokens plus prompt chunks
    int32_t max_running = 8;     // sessions admitted at once
};

// [policy]: caps standing in for a small device's thermal and battery limits.
struct PolicyConfig {
    int32_t max_batch = 0;             // sessions per step; 0: no cap
    double max_tokens_per_second = 0;  // generated tokens per second over all sessions; 0: no cap
};

// [server]: `cellm-host serve`'s address and limits (docs/server.md). A key left out keeps the server's default;
// a flag given on the command line wins over the key.
struct ServeConfig {
    std::optional<std::string> host;
    std::optional<int32_t> port;
    std::optional<int64_t> max_body_bytes;
    std::optional<float> header_timeout, body_timeout, idle_timeout, write_timeout;  // seconds
    std::optional<float> max_request_seconds;  // 0: no limit
    std::optional<int64_t> min_body_rate, max_connections, max_connections_per_client, workers, max_waiting;
};

struct ChatConfig {
    std::string template_name = "auto";        // auto | jinja (the model's own) | chatml | llama3 | gemma | plain
    std::optional<std::string> system_prompt;  // unset: the template's own default
};

struct Manifest {
    std::filesystem::path source;  // the manifest file itself
    ModelConfig model;
    BackendConfig backend;
    ContextConfig context;
    GenerationConfig generation;
    ChatConfig chat;
    SchedulerConfig scheduler;
    PolicyConfig policy;
    ServeConfig serve;
    std::vector<SessionConfig> sessions;
    std::vector<std::filesystem::path> plugin_paths;  // resolved like model.path, in manifest order
    // Set for manifest_for_model: the model file's own general.sampling.* keys replace the [sampling] defaults.
    bool sampling_from_model = false;
};

// Reads and validates a manifest file. Throws cellm::Error with one line naming file, position and key.
Manifest load_manifest(const std::filesystem::path& file);
// `name` when it is a KV type a manifest may name (f32, f16, q8); otherwise throws cellm::Error listing them.
const std::string& check_kv_type(const std::string& name);

// Validates manifest text; `source` names it in errors and anchors relative paths (its parent folder).
Manifest parse_manifest(std::string_view text, const std::filesystem::path& source);

// What a model file alone runs with (`cellm-host run --model FILE`, the SDK without a manifest), as llama.cpp and
// Ollama open a file: format and arch from the file, the fastest CPU backend found, fast precision, every
// physical core, the model's own chat template, its general.sampling.* defaults where the file has them and
// [sampling]'s defaults (llama.cpp's) elsewhere, plugins from the default folders.
Manifest manifest_for_model(const std::filesystem::path& model);

// The number of physical CPU cores (hyper-threads counted once), at least 1.
int32_t physical_core_count();

}  // namespace cellm
