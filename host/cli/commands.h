// The cellm-host subcommands. Each registers its options on the app and returns the function that runs it;
// a command throws cellm::Error for bad input, which main prints as one line before exiting non-zero.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace cellm::cli {

using Command = std::function<int()>;

Command add_run(CLI::App& app);
Command add_chat(CLI::App& app);
Command add_plugins(CLI::App& app);
Command add_inspect(CLI::App& app);
Command add_tokenize(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_convert(CLI::App& app);
Command add_serve(CLI::App& app);
Command add_perplexity(CLI::App& app);

}  // namespace cellm::cli
