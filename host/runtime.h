// Everything a manifest wires together, built in dependency order and torn down in reverse: the plugin
// registry, the model, the backend and the engine.
#pragma once

#include "plugin/backend.h"
#include "engine/engine.h"
#include "manifest.h"
#include "model/model.h"
#include "plugin/plugin_registry.h"

#include <memory>

namespace cellm {

class Runtime {
public:
    // Discovers plugins (default folder, CELLM_PLUGIN_PATH, the manifest's [plugins].paths), loads the model,
    // creates the backend and the engine. Throws cellm::Error with one clear line.
    explicit Runtime(const Manifest& manifest, int32_t max_sequences = 1);
    ~Runtime();

    const Manifest& manifest() const { return manifest_; }
    const PluginRegistry& registry() const { return registry_; }
    const Model& model() const { return *model_; }
    Backend& backend() const { return *backend_; }
    Engine& engine() const { return *engine_; }

private:
    Manifest manifest_;
    PluginRegistry registry_;  // first member to live, last to go: plugins stay loaded while objects exist
    std::unique_ptr<Model> model_;
    std::unique_ptr<Backend> backend_;
    std::unique_ptr<Engine> engine_;
};

// The element type of a manifest's [context].kv_type (f32, f16, q8: int8 with a scale per token and head).
cellm_dtype kv_type(const std::string& name);

// The backend options a manifest's [backend] table carries, as strings.
OptionList backend_options(const BackendConfig& config);

}  // namespace cellm
