// cellm-host convert: rewrites any model the host can open (GGUF, Hugging Face folder, .cellm) as a .cellm file,
// tensor by tensor, optionally quantizing its matrices to one of cellm's group types; then, for a quantized
// output, measures how far its logits drift from the input's on a few fixed prompts.
#include "commands.h"

#include "blocks.h"
#include "model/cellm_writer.h"
#include "engine/engine.h"
#include "error.h"
#include "model/model.h"
#include "model/model_file.h"
#include "plugin/plugin_registry.h"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
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

// The group type a --quantize choice and group size name.
cellm_dtype quantized_type(const std::string& scheme, int32_t group) {
    static const std::map<std::pair<std::string, int32_t>, cellm_dtype> types = {
        {{"int8", 32}, CELLM_TYPE_I8S_G32},      {{"int8", 64}, CELLM_TYPE_I8S_G64},
        {{"int8", 128}, CELLM_TYPE_I8S_G128},    {{"int4", 32}, CELLM_TYPE_I4S_G32},
        {{"int4", 64}, CELLM_TYPE_I4S_G64},      {{"int4", 128}, CELLM_TYPE_I4S_G128},
        {{"q4-affine", 32}, CELLM_TYPE_Q4A_G32}, {{"q4-affine", 64}, CELLM_TYPE_Q4A_G64},
        {{"q4-affine", 128}, CELLM_TYPE_Q4A_G128}};
    const auto it = types.find({scheme, group});
    if (it == types.end()) throw Error("--group-size must be 32, 64 or 128");
    return it->second;
}

// Matrices are quantized (the tensors the MATMUL and GET_ROWS ops read); vectors such as norms stay as they are,
// as does a matrix whose rows do not split into whole groups.
bool quantizable(const cellm_tensor_info& t, int32_t group) {
    return t.n_dims == 2 && t.ne[0] % group == 0 && blocks::supported(t.type);
}

// Each row of `t` expanded to floats by the reference and quantized to `type`; the bytes live in `store`.
cellm_tensor_info quantize_tensor(const cellm_tensor_info& t, cellm_dtype type, std::deque<std::vector<uint8_t>>& store) {
    const int64_t n = t.ne[0], rows = t.ne[1];
    const uint64_t in_row = blocks::row_bytes(t.type, n), out_row = blocks::row_bytes(type, n);
    std::vector<uint8_t>& out = store.emplace_back(out_row * static_cast<uint64_t>(rows));
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
        blocks::dequantize_row(t.type, static_cast<const uint8_t*>(t.data) + in_row * static_cast<uint64_t>(r), values.data(), n);
        blocks::quantize_row(type, values.data(), out.data() + out_row * static_cast<uint64_t>(r), n);
    }
    cellm_tensor_info q = t;
    q.type = type;
    q.data = out.data();
    q.size = out.size();
    return q;
}

struct Drift {
    double worst_cosine = 1.0, mean_cosine = 0.0;
    int32_t positions = 0, top1_agree = 0;
};

// Teacher-forced logits of both models on fixed prompts, position by position.
Drift measure_drift(const PluginRegistry& registry, const std::string& reference_path, const std::string& quantized_path,
                    const std::string& backend_name) {
    const Plugin* plugin = registry.find(CELLM_PLUGIN_BACKEND, backend_name);
    if (plugin == nullptr) throw Error("unknown backend '" + backend_name + "' for the drift report");
    const char* texts[] = {"The capital of France is", "def fibonacci(n):\n    if n < 2:\n        return n",
                           "Once upon a time, in a small village by the sea, there lived"};
    std::vector<std::vector<float>> logits[2];
    int32_t n_vocab = 0;
    for (int m = 0; m < 2; ++m) {
        auto model = Model::load(registry, m == 0 ? reference_path : quantized_path);
        Backend backend(*plugin, {});
        EngineOptions options;
        options.context_length = 256;
        Engine engine(*model, backend, options);
        n_vocab = engine.n_vocab();
        for (const char* text : texts) {
            const std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
            const int32_t seq = engine.create_sequence();
            const Engine::Work work{seq, tokens, LogitsWanted::All};
            engine.step({&work, 1}, logits[m].emplace_back());
            engine.release_sequence(seq);
        }
    }
    Drift d;
    const auto v = static_cast<size_t>(n_vocab);
    for (size_t p = 0; p < logits[0].size(); ++p) {
        for (size_t at = 0; at + v <= logits[0][p].size(); at += v) {
            const float* a = logits[0][p].data() + at;
            const float* b = logits[1][p].data() + at;
            double ab = 0, aa = 0, bb = 0;
            for (size_t i = 0; i < v; ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
            const double c = ab / std::sqrt(aa * bb);
            d.worst_cosine = std::min(d.worst_cosine, c);
            d.mean_cosine += c;
            ++d.positions;
            d.top1_agree += std::max_element(a, a + v) - a == std::max_element(b, b + v) - b ? 1 : 0;
        }
    }
    d.mean_cosine /= std::max(1, d.positions);
    return d;
}

}  // namespace

Command add_convert(CLI::App& app) {
    struct Options {
        std::string input, output, quantize = "none", backend = "openblas";
        int32_t group_size = 64;
    };
    auto o = std::make_shared<Options>();
    app.add_option("--input", o->input, "Model file or folder to read (any format a plugin opens)")->required();
    app.add_option("--output", o->output, "The .cellm file to write")->required();
    app.add_option("--quantize", o->quantize, "Matrices as: none (unchanged), int8, int4 (symmetric) or q4-affine (scale and bias)")
        ->check(CLI::IsMember({"none", "int8", "int4", "q4-affine"}));
    app.add_option("--group-size", o->group_size, "Values per scale when quantizing: 32, 64 or 128")
        ->check(CLI::IsMember({32, 64, 128}));
    app.add_option("--backend", o->backend, "Backend that runs both models for the drift report");
    return [o]() {
        PluginRegistry registry;
        registry.discover();
        auto file = ModelFile::open(registry, o->input);
        const cellm_model_view& view = file->view();
        const bool quantize = o->quantize != "none";
        const cellm_dtype type = quantize ? quantized_type(o->quantize, o->group_size) : CELLM_TYPE_F32;
        CellmWriter writer;
        std::vector<std::string> skipped;
        for (uint64_t i = 0; i < view.n_meta; ++i) {
            const cellm_meta_kv& kv = view.meta[i];
            if (!writer.add_meta(kv)) skipped.emplace_back(to_string_view(kv.key));
        }
        for (const std::string& key : skipped) {
            spdlog::warn("metadata key '{}' is a nested array, which model views do not expose; left out", key);
        }
        std::deque<std::vector<uint8_t>> quantized;
        int32_t n_quantized = 0;
        for (uint64_t i = 0; i < view.n_tensors; ++i) {
            const cellm_tensor_info& t = *cellm_model_tensor(&view, i);
            if (quantize && quantizable(t, o->group_size)) {
                writer.add_tensor(quantize_tensor(t, type, quantized));
                ++n_quantized;
            } else {
                writer.add_tensor(t);
            }
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
        if (!quantize) return 0;
        std::printf("quantized %d matrices to %s (groups of %d); the other tensors are unchanged\n", n_quantized,
                    dtype_name(type), o->group_size);
        std::fflush(stdout);
        const Drift d = measure_drift(registry, o->input, o->output, o->backend);
        std::printf("logit drift against the input on %d positions of 3 prompts (%s): cosine mean %.6f, worst %.6f; "
                    "top-1 agreement %.1f%% (%d of %d)\n",
                    d.positions, o->backend.c_str(), d.mean_cosine, d.worst_cosine,
                    100.0 * d.top1_agree / std::max(1, d.positions), d.top1_agree, d.positions);
        return 0;
    };
}

}  // namespace cellm::cli
