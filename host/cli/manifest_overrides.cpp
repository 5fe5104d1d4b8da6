#include "manifest_overrides.h"

#include "error.h"

namespace cellm::cli {

void ManifestOverrides::add_to(CLI::App& app) {
    app.add_option("--manifest", manifest,
                   "TOML manifest that wires model, backend and sampling (without it, --model alone runs with the "
                   "file's own settings and the fastest CPU backend)");
    app.add_option("--model", model, "Model file or folder (overrides [model].path)");
    app.add_option("--mmproj", mmproj, "llama.cpp mmproj file of the model's vision tower (overrides [model].mmproj)");
    app.add_option("--backend", backend, "Backend plugin name (overrides [backend].name)");
    app.add_option("--threads", threads, "Backend threads (overrides [backend].threads)")->check(CLI::PositiveNumber);
    app.add_option("--precision", precision,
                   "Backend precision (overrides [backend].precision): exact follows the scalar reference bit for "
                   "bit, fast may sum in other orders within the bounds in docs")
        ->check(CLI::IsMember({"exact", "fast"}));
    app.add_option("--max-tokens", max_tokens, "Most tokens to generate")->check(CLI::PositiveNumber);
    app.add_option("--temperature", temperature, "Sampling temperature; 0 is greedy")->check(CLI::NonNegativeNumber);
    app.add_option("--seed", seed, "Sampling seed (same seed, same output)");
    app.add_option("--context", context, "Context length in tokens")->check(CLI::PositiveNumber);
    app.add_option("--kv-type", kv_type, "KV cache encoding (overrides [context].kv_type)")
        ->check(CLI::IsMember({"f32", "f16", "q8", "r4", "r3"}));
    app.add_option("--memory-budget", memory_budget,
                   "MiB for weights, scratch and KV cache together; the KV pool gets the rest (overrides "
                   "[context].memory_budget_mib)")
        ->check(CLI::Range(1, 1 << 20));
}

Manifest ManifestOverrides::load() const {
    if (manifest.empty() && !model) throw Error("give --model FILE (a model file or folder), or --manifest FILE");
    Manifest m = manifest.empty() ? manifest_for_model(*model) : load_manifest(manifest);
    if (model && !manifest.empty()) {
        m.model.path = *model;
        m.model.format.clear();  // the manifest's format, arch and mmproj described its own model
        m.model.arch.clear();
        m.model.mmproj.clear();
    }
    if (mmproj) m.model.mmproj = *mmproj;
    if (backend) m.backend.name = *backend;
    if (threads) m.backend.threads = *threads;
    if (precision) m.backend.options["precision"] = *precision;
    if (max_tokens) m.generation.max_tokens = *max_tokens;
    if (temperature) m.generation.sampling.temperature = *temperature;
    if (seed) {
        m.generation.sampling.seed = *seed;
        m.generation.seed_given = true;
    }
    if (context) m.context.length = *context;
    if (kv_type) m.context.kv_type = *kv_type;
    if (memory_budget) {
        m.context.memory_budget_mib = *memory_budget;
        m.context.kv_memory_mib = 0;
    }
    // The sampling flags win over each [[session]]'s own keys too.
    for (SessionConfig& s : m.sessions) {
        if (max_tokens) s.generation.max_tokens = *max_tokens;
        if (temperature) s.generation.sampling.temperature = *temperature;
        if (seed) s.generation.sampling.seed = *seed;
    }
    return m;
}

}  // namespace cellm::cli
