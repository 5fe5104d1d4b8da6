// cellm-host: runs models from manifests, and inspects models, tokenizers and plugins.
#include "commands.h"

#include "error.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <vector>

int main(int argc, char** argv) {
    spdlog::set_pattern("%^%l%$: %v");
    spdlog::set_level(spdlog::level::warn);
    // Logs go to stderr so that stdout carries only the answer (or the JSON object).
    spdlog::default_logger()->sinks().clear();
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    spdlog::default_logger()->sinks().push_back(sink);

    CLI::App app{"cellm-host: LLM inference for small devices, wired by TOML manifests"};
    app.require_subcommand(1);
    bool verbose = false;
    app.add_flag("-v,--verbose", verbose, "Log plugin discovery and loading details");
    std::vector<std::pair<CLI::App*, cellm::cli::Command>> commands;
    auto add = [&](const char* name, const char* help, cellm::cli::Command (*registrar)(CLI::App&)) {
        CLI::App* sub = app.add_subcommand(name, help);
        commands.emplace_back(sub, registrar(*sub));
    };
    add("run", "Generate an answer to one prompt", cellm::cli::add_run);
    add("chat", "Interactive multi-turn chat that keeps the KV cache between turns", cellm::cli::add_chat);
    add("plugins", "List discovered plugins, what they support, and skipped files", cellm::cli::add_plugins);
    add("inspect", "Show a model file's format, arch, hyperparameters, tokenizer and tensors", cellm::cli::add_inspect);
    add("tokenize", "Show the token ids of a text", cellm::cli::add_tokenize);
    add("bench", "Measure prefill and decode speed, time to first token and peak memory", cellm::cli::add_bench);
    add("convert", "Write any model the host can open as a .cellm file (docs/format.md)", cellm::cli::add_convert);
    add("serve", "Serve the model over an OpenAI-compatible HTTP API", cellm::cli::add_serve);
    add("perplexity", "Perplexity over a text as llama-perplexity computes it, and KL divergence against a saved run",
        cellm::cli::add_perplexity);

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help
        std::fprintf(stderr, "cellm-host: error: %s (see cellm-host --help)\n", e.what());
        return 2;
    }
    if (verbose) spdlog::set_level(spdlog::level::debug);
    try {
        for (auto& [sub, run] : commands) {
            if (sub->parsed()) return run();
        }
    } catch (const cellm::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "cellm-host: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "cellm-host: error: %s\n", e.what());
        return 1;
    }
    return 1;
}
