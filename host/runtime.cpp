#include "runtime.h"

#include "error.h"

namespace cellm {

OptionList backend_options(const BackendConfig& config) {
    OptionList options;
    for (const auto& [key, value] : config.options) options.emplace_back(key, value);
    // A --threads override changes config.threads after the manifest filled the options.
    for (auto& [key, value] : options) {
        if (key == "threads") value = std::to_string(config.threads);
    }
    return options;
}

cellm_dtype kv_type(const std::string& name) {
    if (name == "f32") return CELLM_TYPE_F32;
    if (name == "f16") return CELLM_TYPE_F16;
    if (name == "q8") return CELLM_TYPE_I8;
    if (name == "r4") return CELLM_TYPE_R4;
    if (name == "r3") return CELLM_TYPE_R3;
    throw Error("unknown KV type '" + name + "' (expected f32, f16, q8, r4 or r3)");
}

namespace {

// For a manifest without a backend name (a model file alone): the fastest CPU backend found. Vulkan is only
// taken when asked for: where the only Vulkan device is a CPU one (lavapipe) it is slower than openblas.
const Plugin& fastest_cpu_backend(const PluginRegistry& registry) {
    for (const char* name : {"openblas", "scalar"}) {
        if (const Plugin* plugin = registry.find(CELLM_PLUGIN_BACKEND, name)) return *plugin;
    }
    throw Error("no CPU backend plugin found (backend plugins: " + registry.names(CELLM_PLUGIN_BACKEND) + ")");
}

}  // namespace

Runtime::Runtime(const Manifest& manifest, int32_t max_sequences) : manifest_(manifest) {
    registry_.discover(manifest.plugin_paths);
    model_ = Model::load(registry_, manifest.model.path, manifest.model.format, manifest.model.arch,
                         manifest.model.mmproj);
    const Plugin* backend = manifest.backend.name.empty()
                                ? &fastest_cpu_backend(registry_)
                                : registry_.find(CELLM_PLUGIN_BACKEND, manifest.backend.name);
    if (backend == nullptr) {
        throw Error("unknown backend '" + manifest.backend.name + "' (backend plugins: " +
                    registry_.names(CELLM_PLUGIN_BACKEND) + ")");
    }
    manifest_.backend.name = backend->name();
    backend_ = std::make_unique<Backend>(*backend, backend_options(manifest.backend));
    EngineOptions options;
    options.context_length = manifest.context.length;
    options.block_size = manifest.context.block_size;
    options.max_sequences = max_sequences;
    options.kv_memory = static_cast<uint64_t>(manifest.context.kv_memory_mib) << 20;
    options.memory_budget = static_cast<uint64_t>(manifest.context.memory_budget_mib) << 20;
    options.max_step_tokens = manifest.scheduler.token_budget;
    options.kv_type = kv_type(manifest.context.kv_type);
    options.prefix_cache = manifest.context.prefix_cache;
    engine_ = std::make_unique<Engine>(*model_, *backend_, options);
}

Runtime::~Runtime() {
    engine_.reset();
    backend_.reset();
    model_.reset();
}

}  // namespace cellm
