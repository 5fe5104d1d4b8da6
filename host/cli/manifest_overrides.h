// Command-line flags that override a manifest, shared by run and chat: flags win over the file, so one
// manifest serves every backend and model without edits or rebuilds.
#pragma once

#include "manifest.h"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>

namespace cellm::cli {

struct ManifestOverrides {
    std::string manifest;
    std::optional<std::string> model;
    std::optional<std::string> mmproj;
    std::optional<std::string> backend;
    std::optional<int32_t> threads;
    std::optional<std::string> precision;
    std::optional<int32_t> max_tokens;
    std::optional<float> temperature;
    std::optional<uint64_t> seed;
    std::optional<int32_t> context;
    std::optional<std::string> kv_type;
    std::optional<int32_t> memory_budget;  // MiB

    void add_to(CLI::App& app);
    // Loads the manifest and applies the flags that were given.
    Manifest load() const;
};

}  // namespace cellm::cli
