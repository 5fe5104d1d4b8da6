// cellm-host convert: rewrites any model the host can open (GGUF, Hugging Face folder, .cellm) as a .cellm file,
// tensor by tensor.
#include "commands.h"

#include "cellm_writer.h"
#include "error.h"
#include "model_file.h"
#include "plugin_registry.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cstdio>
#include <string>

namespace cellm::cli {

namespace {

// One progress line per tensor on stderr; on a terminal each line overwrites the last.
void show_progress(size_t index, size_t count, const cellm_tensor_info& t, bool terminal) {
    constexpr size_t width = 30;
    const size_t done = (index + 1) * width / count;
    std::string shape;
    for (uint32_t d = 0; d < t.n_dims; ++d) shape += (d > 0 ? ", " : "") + std::to_string(t.ne[d]);
    std::fprintf(stderr, "%s[%s%s] %zu/%zu %s %s [%s]%s", terminal ? "\r" : "", std::string(done, '#').c_str(),
                 std::string(width - done, ' ').c_str(), index + 1, count,
                 std::string(to_string_view(t.name)).c_str(), dtype_name(t.type), shape.c_str(),
                 terminal ? "\x1b[K" : "\n");
    if (terminal && index + 1 == count) std::fputc('\n', stderr);
}

}  // namespace

Command add_convert(CLI::App& app) {
    struct Options {
        std::string input, output;
    };
    auto o = std::make_shared<Options>();
    app.add_option("--input", o->input, "Model file or folder to read (any format a plugin opens)")->required();
    app.add_option("--output", o->output, "The .cellm file to write")->required();
    return [o]() {
        PluginRegistry registry;
        registry.discover();
        auto file = ModelFile::open(registry, o->input);
        std::vector<std::string> skipped;
        const CellmWriter writer = CellmWriter::from_view(file->view(), skipped);
        for (const std::string& key : skipped) {
            spdlog::warn("metadata key '{}' is a nested array, which model views do not expose; left out", key);
        }
        const bool terminal = ::isatty(STDERR_FILENO) != 0;
        const CellmLayout layout = writer.write(o->output, [&](size_t index, size_t count, const cellm_tensor_info& t) {
            show_progress(index, count, t, terminal);
        });
        std::printf("wrote %s: %llu tensors, %llu metadata keys, %.1f MiB (input %.1f MiB)\n", o->output.c_str(),
                    static_cast<unsigned long long>(file->view().n_tensors),
                    static_cast<unsigned long long>(file->view().n_meta - skipped.size()),
                    static_cast<double>(layout.file_size) / 1048576.0,
                    static_cast<double>(file->file_size()) / 1048576.0);
        return 0;
    };
}

}  // namespace cellm::cli
