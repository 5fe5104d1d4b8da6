// ABI conformance: a plugin built for ABI 1.0 still loads and runs on the current 1.x host. cellm-llama10 is the
// llama arch compiled against the frozen 1.0 headers in tests/abi10/include alone (README.md there); it
// reports abi_minor 0 and never writes cellm_arch_info.n_head_kv (added in 1.1). Checked here:
//  - the registry accepts it beside the in-tree plugins, skipping nothing, with its minor 0 (the host's is newer);
//  - the host reads its n_head_kv as 0 and its q8 KV cache falls back to one scale per run of 32 values;
//  - with an f32 or f16 KV cache it gives bit-identical logits to the in-tree llama arch, and with q8 logits
//    that stay within f16's bar of f32 (the in-tree arch scales per KV head instead, so q8 cannot be compared
//    bit for bit);
//  - manifests naming it (arch = "llama10", [plugins].paths) run through cellm-host and give the same greedy
//    tokens as the in-tree arch for f32 and f16, and run to max_tokens with q8.
#include "test_support.h"

#include "kv/kv_cache.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

namespace cellm::testing {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPluginName = "llama10";

// The in-tree plugins first (as the host finds them), then the folder holding only cellm-llama10.so.
const PluginRegistry& both_registry() {
    static PluginRegistry* r = [] {
        auto* reg = new PluginRegistry();  // lives to the end of the process, like the host's
        reg->add_directory(CELLM_PLUGIN_DIR);
        reg->add_directory(CELLM_ABI10_PLUGIN_DIR);
        return reg;
    }();
    return *r;
}

std::vector<int32_t> sample_tokens(size_t n) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 5) % 300);
    return t;
}

struct Prefill {
    std::unique_ptr<Model> model;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Engine> engine;
    std::vector<float> logits;  // every position of one prefill
};

Prefill prefill(const std::string& arch, cellm_dtype kv_type) {
    Prefill r;
    r.model = Model::load(both_registry(), synthetic_model(CELLM_TYPE_Q8_0), "", arch);
    const Plugin* scalar = both_registry().find(CELLM_PLUGIN_BACKEND, "scalar");
    if (scalar == nullptr) throw std::runtime_error("the scalar backend was not built");
    r.backend = std::make_unique<Backend>(*scalar, OptionList{});
    EngineOptions o;
    o.kv_type = kv_type;
    o.context_length = 64;
    o.block_size = 4;  // a 24-token prompt spans several pages
    r.engine = std::make_unique<Engine>(*r.model, *r.backend, o);
    const auto tokens = sample_tokens(24);
    const Engine::Work work{r.engine->create_sequence(), tokens, LogitsWanted::All};
    r.engine->step({&work, 1}, r.logits);
    return r;
}

TEST(Abi10Plugin, RegistryAcceptsItWithMinor0) {
    const PluginRegistry& reg = both_registry();
    for (const SkippedFile& s : reg.skipped()) ADD_FAILURE() << "skipped " << s.file << ": " << s.reason;
    const Plugin* old = reg.find(CELLM_PLUGIN_ARCH, kPluginName);
    ASSERT_NE(old, nullptr) << "cellm-llama10.so was not accepted";
    EXPECT_EQ(old->file.parent_path(), fs::weakly_canonical(CELLM_ABI10_PLUGIN_DIR));
    EXPECT_EQ(old->desc->abi_major, 1u);
    EXPECT_EQ(old->desc->abi_minor, 0u);
    const Plugin* current = reg.find(CELLM_PLUGIN_ARCH, "llama");
    ASSERT_NE(current, nullptr);
    EXPECT_EQ(current->desc->abi_minor, static_cast<uint32_t>(CELLM_ABI_MINOR));
    EXPECT_GT(current->desc->abi_minor, old->desc->abi_minor) << "the host is no newer than the frozen 1.0 headers";
    // Both list general.architecture "llama"; the first found (the in-tree one) serves it unless a manifest names
    // the arch. On its own, the 1.0 plugin serves it.
    EXPECT_EQ(reg.find_arch_for("llama"), current);
    PluginRegistry alone;
    alone.add_directory(CELLM_ABI10_PLUGIN_DIR);
    ASSERT_NE(alone.find_arch_for("llama"), nullptr);
    EXPECT_STREQ(alone.find_arch_for("llama")->name(), kPluginName);
}

TEST(Abi10Plugin, HostReadsNoKvHeadsAndFallsBackToRunsOf32) {
    const Prefill old = prefill(kPluginName, CELLM_TYPE_I8);
    const Prefill current = prefill("llama", CELLM_TYPE_I8);
    const cellm_arch_info& a = old.model->info();
    const cellm_arch_info& b = current.model->info();
    EXPECT_EQ(a.n_layer, b.n_layer);
    EXPECT_EQ(a.n_vocab, b.n_vocab);
    EXPECT_EQ(a.n_embd, b.n_embd);
    EXPECT_EQ(a.n_ctx_train, b.n_ctx_train);
    EXPECT_EQ(a.kv_dim, b.kv_dim);
    EXPECT_EQ(a.n_head_kv, 0) << "a 1.0 plugin cannot have written n_head_kv";
    ASSERT_EQ(b.n_head_kv, 2);  // the tiny preset: 2 KV heads of 64, so per-head scales differ from runs of 32
    // A 1.0 plugin has no get_layer_info: every layer takes get_info's row.
    ASSERT_EQ(old.model->layers().size(), static_cast<size_t>(a.n_layer));
    for (const cellm_arch_layer_info& layer : old.model->layers()) {
        EXPECT_EQ(layer.kv_dim, a.kv_dim);
        EXPECT_EQ(KvCache::scale_runs(layer), a.kv_dim / 32);
    }
    EXPECT_EQ(KvCache::scale_runs(current.model->layers()[0]), b.n_head_kv);
    // One byte per value and one float per run of 32, per token, layer, K and V.
    const auto runs_of_32 = 2u * static_cast<uint64_t>(a.n_layer) * static_cast<uint64_t>(a.kv_dim + a.kv_dim / 32 * 4);
    EXPECT_EQ(old.engine->kv_cache().bytes_per_token(), runs_of_32);
    EXPECT_LT(current.engine->kv_cache().bytes_per_token(), runs_of_32);
}

class Abi10SameLogits : public ::testing::TestWithParam<cellm_dtype> {};

TEST_P(Abi10SameLogits, AsTheInTreeArch) {
    const Prefill old = prefill(kPluginName, GetParam());
    const Prefill current = prefill("llama", GetParam());
    ASSERT_FALSE(old.logits.empty());
    EXPECT_TRUE(old.logits == current.logits) << "the 1.0 plugin's logits differ from the in-tree arch's";
}

INSTANTIATE_TEST_SUITE_P(F32AndF16Kv, Abi10SameLogits, ::testing::Values(CELLM_TYPE_F32, CELLM_TYPE_F16),
                         [](const auto& param_info) { return std::string(param_info.param == CELLM_TYPE_F32 ? "f32" : "f16"); });

// Engine.Q8KvCacheStaysCloseToF32's bar (tests/e2e/engine_test.cpp), met here with runs of 32 instead of per-head
// scales.
TEST(Abi10Plugin, Q8KvCacheStaysCloseToF32) {
    const Prefill f32 = prefill(kPluginName, CELLM_TYPE_F32);
    const Prefill q8 = prefill(kPluginName, CELLM_TYPE_I8);
    ASSERT_EQ(f32.logits.size(), q8.logits.size());
    const auto n_vocab = static_cast<size_t>(f32.engine->n_vocab());
    for (size_t p = 0; p * n_vocab < f32.logits.size(); ++p) {
        EXPECT_GT(cosine(f32.logits.data() + p * n_vocab, q8.logits.data() + p * n_vocab, n_vocab), 0.9995) << "position " << p;
    }
}

// A manifest for cellm-host on the synthetic model; `arch` empty: chosen by general.architecture.
fs::path write_manifest(const std::string& arch, const std::string& kv_type) {
    const fs::path path = temp_dir() / ("abi10-" + (arch.empty() ? std::string("auto") : arch) + "-" + kv_type + ".toml");
    std::ofstream out(path);
    out << "[model]\npath = \"" << synthetic_model(CELLM_TYPE_Q8_0).string() << "\"\n";
    if (!arch.empty()) out << "arch = \"" << arch << "\"\n";
    out << "[backend]\nname = \"scalar\"\nthreads = 1\n"
        << "[context]\nlength = 64\nkv_type = \"" << kv_type << "\"\n"
        << "[sampling]\ntemperature = 0\nmax_tokens = 12\n"
        << "[plugins]\npaths = [\"" << CELLM_ABI10_PLUGIN_DIR << "\"]\n";
    return path;
}

// The greedy token ids cellm-host generates for one prompt under `manifest`.
std::vector<int32_t> greedy_tokens(const fs::path& manifest) {
    const CommandResult r = run_host("run --manifest " + shell_quote(manifest.string()) + " --prompt 'the cat sat' --raw --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return {};
    return nlohmann::json::parse(r.out).at("tokens").get<std::vector<int32_t>>();
}

TEST(Abi10Manifest, CellmHostListsItAsAbi10) {
    const CommandResult r = run_host("plugins --path " + shell_quote(CELLM_ABI10_PLUGIN_DIR));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("arch     llama10    0.1.0    abi 1.0"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("skipped"), std::string::npos) << r.out;
}

TEST(Abi10Manifest, SameGreedyTokensAsTheInTreeArch) {
    for (const std::string kv : {"f32", "f16"}) {
        const std::vector<int32_t> expected = greedy_tokens(write_manifest("", kv));
        ASSERT_EQ(expected.size(), 12u) << "kv_type " << kv;
        EXPECT_EQ(greedy_tokens(write_manifest(kPluginName, kv)), expected) << "kv_type " << kv;
    }
}

TEST(Abi10Manifest, RunsWithQ8Kv) {
    EXPECT_EQ(greedy_tokens(write_manifest(kPluginName, "q8")).size(), 12u);
}

}  // namespace
}  // namespace cellm::testing
