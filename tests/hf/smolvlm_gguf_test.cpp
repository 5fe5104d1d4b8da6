// tests/data/gguf-smolvlm-tiny: tests/data/hf/smolvlm-tiny as llama.cpp ships a SmolVLM, a text GGUF (llama,
// F32) and an mmproj GGUF (clip, idefics3; F16 matrices, the 4-D patch convolution), written as llama.cpp's
// converter writes them (scripts/hf_reference/smolvlm_gguf.py). cellm runs the pair against transformers'
// outputs for the folder (tests/data/hf/smolvlm-tiny/reference.json): the same prompt tokens, and the image
// embeddings and logits at cosine >= 0.9999; the image embeddings also against llama.cpp's own for the pair
// (scripts/hf_reference/smolvlm_gguf_llamacpp.py). The F16 rounding of the vision matrices keeps transformers itself
// at cosine 0.99999964 of its float32 logits (the pair's reference.json), far inside the bar, which therefore
// stays the issue's.
#include "smolvlm_support.h"

#include "error.h"
#include "gguf_writer.h"
#include "schedule/scheduler.h"
#include "vision/image_prompt.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

constexpr double kMinCosine = kSmolVlmMinCosine;

fs::path pair() { return source_dir() / "tests/data/gguf-smolvlm-tiny"; }
fs::path text_gguf() { return pair() / "smolvlm-tiny-F32.gguf"; }
fs::path mmproj_gguf() { return pair() / "mmproj-smolvlm-tiny-F16.gguf"; }
const nlohmann::json& reference() { return smolvlm_reference(); }

class SmolVlmGguf : public SmolVlmFixture {
protected:
    void SetUp() override { open(text_gguf(), mmproj_gguf()); }
};

TEST_P(SmolVlmGguf, ThePairIsOneIdefics3ModelReadInPlace) {
    const Model& model = *stack_.model;
    EXPECT_EQ(model.architecture(), "idefics3");
    EXPECT_EQ(std::string(model.arch_plugin().name()), "idefics3");
    ASSERT_TRUE(model.vision().has_value());
    EXPECT_EQ(model.vision()->image_size, 32);
    EXPECT_EQ(model.vision()->patch_size, 8);
    EXPECT_EQ(model.vision()->tokens_per_image, reference().at("image_seq_len").get<int32_t>());
    // The text file names the model; the mmproj adds its clip.* keys and the processor settings derived from them.
    const ModelFile& file = model.file();
    EXPECT_EQ(file.get_string("general.architecture"), "llama");
    EXPECT_EQ(file.get_string("clip.projector_type"), "idefics3");
    EXPECT_EQ(file.get_int("cellm.vision.tile_size"), 32);
    EXPECT_EQ(file.get_int("cellm.vision.longest_edge"), 64);  // clip.vision.preproc_image_size
    EXPECT_EQ(file.get_bool("cellm.vision.do_image_splitting"), true);
    // The 4-D convolution [8, 8, 3, 32] as the product [192, 32], in place; the matrices stay F16.
    const cellm_tensor_info* patch = file.tensor("v.patch_embd.weight");
    ASSERT_NE(patch, nullptr);
    EXPECT_EQ(patch->n_dims, 2u);
    EXPECT_EQ(patch->ne[0], 3 * 8 * 8);
    EXPECT_EQ(patch->ne[1], 32);
    EXPECT_EQ(file.tensor("v.blk.0.attn_q.weight")->type, CELLM_TYPE_F16);
    EXPECT_EQ(file.tensor("mm.model.fc.weight")->type, CELLM_TYPE_F16);
    // Both files' mappings are wrapped by the CPU backends, nothing copied; a GPU backend uploads them.
    EXPECT_EQ(file.regions().size(), 2u);
    if (GetParam() != "vulkan") {
        EXPECT_TRUE(stack_.engine->weights().zero_copy());
    }
}

TEST_P(SmolVlmGguf, PromptTokensAndImageEmbeddingsMatchTransformers) {
    const nlohmann::json& c = reference()["cases"]["image"];
    const ImagePrompter::Prompt p = build(c);
    EXPECT_EQ(p.tokens, c.at("input_ids").get<std::vector<int32_t>>());
    ASSERT_NE(p.embeddings, nullptr);
    const double worst = worst_cosine(p.embeddings->values, floats_of(c.at("image_embeddings").at("file")), 64);
    RecordProperty("image_embeddings_worst_cosine", std::to_string(worst));
    std::printf("[ measured ] %s: image embeddings worst cosine %.9f\n", GetParam().c_str(), worst);
    EXPECT_GE(worst, kMinCosine);

    // llama.cpp's own embeddings of the pair (its preprocessing and encoder, through llama-cpp-python's mtmd).
    const nlohmann::json llamacpp = read_json(pair() / "reference.json").at("llamacpp");
    const double vs_llamacpp = worst_cosine(
        p.embeddings->values, floats_of(llamacpp.at("image_embeddings").at("file").get<std::string>(), pair()), 64);
    RecordProperty("image_embeddings_worst_cosine_vs_llamacpp", std::to_string(vs_llamacpp));
    std::printf("[ measured ] %s: image embeddings worst cosine against llama.cpp %.9f\n", GetParam().c_str(), vs_llamacpp);
    EXPECT_GE(vs_llamacpp, kMinCosine);
}

TEST_P(SmolVlmGguf, LogitsMatchTransformersWholeAndInChunks) {
    const nlohmann::json& c = reference()["cases"]["image"];
    const ImagePrompter::Prompt p = build(c);
    const std::vector<float> want = floats_of(c.at("logits").at("file"));
    for (size_t chunk : {p.tokens.size(), size_t{7}}) {
        const double worst = worst_cosine(logits(p, chunk), want, n_vocab_);
        RecordProperty("logits_chunk_" + std::to_string(chunk) + "_worst_cosine", std::to_string(worst));
        std::printf("[ measured ] %s: logits (chunks of %zu) worst cosine %.9f\n", GetParam().c_str(), chunk, worst);
        EXPECT_GE(worst, kMinCosine) << "chunks of " << chunk;
    }
    // Against transformers over the weights as the mmproj stores them (F16 matrices): the last position.
    const std::vector<float> all = logits(p, p.tokens.size());
    const std::vector<float> last(all.end() - static_cast<ptrdiff_t>(n_vocab_), all.end());
    const auto rounded = read_json(pair() / "reference.json").at("f16_rounding").at("last_logits").get<std::vector<float>>();
    EXPECT_GE(worst_cosine(last, rounded, n_vocab_), kMinCosine);
}

TEST_P(SmolVlmGguf, TextWithoutImagesMatchesTransformers) {
    const nlohmann::json& c = reference()["cases"]["text"];
    const ImagePrompter::Prompt p{c.at("input_ids").get<std::vector<int32_t>>(), nullptr};
    EXPECT_EQ(stack_.model->tokenizer().encode(c.at("prompt").get<std::string>(), false, true), p.tokens);
    const std::vector<float> all = logits(p, p.tokens.size());
    const std::vector<float> last(all.end() - static_cast<ptrdiff_t>(n_vocab_), all.end());
    EXPECT_GE(worst_cosine(last, c.at("last_logits").get<std::vector<float>>(), n_vocab_), kMinCosine);
}

TEST_P(SmolVlmGguf, GreedyGenerationMatchesTransformers) {
    const nlohmann::json& c = reference()["cases"]["image"];
    const ImagePrompter::Prompt p = build(c);
    Scheduler scheduler(*stack_.engine, stack_.model->tokenizer(), SchedulerOptions{});
    SessionOptions o;
    o.sampling.temperature = 0;
    o.max_tokens = 8;
    o.ignore_end_of_generation = true;  // the random model's end-of-text token is an ordinary byte
    const SessionId id = scheduler.create(o);
    scheduler.submit(id, p.tokens, p.embeddings);
    scheduler.run();
    EXPECT_EQ(scheduler.session(id).result().tokens, c.at("greedy").get<std::vector<int32_t>>());
}

INSTANTIATE_TEST_SUITE_P(Backends, SmolVlmGguf, ::testing::ValuesIn(all_backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// An mmproj's header keys, with no tensors unless a test adds them.
gguf::Writer mmproj_keys(const std::string& projector, uint32_t projection_dim) {
    gguf::Writer w;
    w.add("general.architecture", std::string_view("clip"));
    w.add("general.type", std::string_view("mmproj"));
    w.add("clip.has_vision_encoder", true);
    w.add("clip.projector_type", std::string_view(projector));
    w.add("clip.vision.projection_dim", projection_dim);
    w.add("clip.vision.image_size", uint32_t{32});
    return w;
}

std::string load_error(const fs::path& mmproj) {
    try {
        make_stack(text_gguf(), "scalar", EngineOptions{}, mmproj);
    } catch (const Error& e) {
        return e.what();
    }
    return "no error";
}

TEST(SmolVlmGgufErrors, BadMmprojFilesAreRefusedWithOneLine) {
    const fs::path missing = temp_dir() / "no-such-mmproj.gguf";
    const fs::path gemma = temp_dir() / "mmproj-gemma3.gguf";
    mmproj_keys("gemma3", 64).write(gemma.string());
    const fs::path wide = temp_dir() / "mmproj-wide.gguf";
    mmproj_keys("idefics3", 576).write(wide.string());

    const std::vector<std::pair<std::string, std::string>> cases = {
        {load_error(missing), "mmproj '" + missing.string() + "' does not exist"},
        {load_error(gemma), "projector type 'gemma3' is not supported (clip.projector_type: idefics3)"},
        {load_error(wide), "projects into 576 values, but the text model '" + text_gguf().string() +
                               "' is 64 wide (llama.embedding_length)"},
        {load_error(text_gguf()), "is not an mmproj file: its general.architecture is 'llama'"},
    };
    for (const auto& [error, want] : cases) {
        EXPECT_NE(error.find(want), std::string::npos) << error;
        EXPECT_EQ(error.find('\n'), std::string::npos) << error;
    }
}

TEST(SmolVlmGgufErrors, AnArchWithoutImagesCannotUseAnMmproj) {
    try {
        Model::load(registry(), text_gguf(), {}, "llama", mmproj_gguf());
        FAIL() << "llama loaded an mmproj";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("arch 'llama' takes no images"), std::string::npos) << e.what();
    }
}

// llama.cpp's converter stores every 1-D tensor and the ".embeddings." ones in F32; a file that stores one the
// encoder adds or normalises with in F16 anyway is refused naming it.
TEST(SmolVlmGgufErrors, AnF16BiasIsRefusedNamingIt) {
    gguf::Writer w = mmproj_keys("idefics3", 64);
    w.add("clip.vision.patch_size", uint32_t{8});
    w.add("clip.vision.embedding_length", uint32_t{32});
    w.add("clip.vision.feed_forward_length", uint32_t{64});
    w.add("clip.vision.block_count", uint32_t{2});
    w.add("clip.vision.attention.head_count", uint32_t{4});
    w.add("clip.vision.attention.layer_norm_epsilon", 1e-6f);
    w.add("clip.vision.projector.scale_factor", uint32_t{2});
    w.add_tensor("v.patch_embd.weight", CELLM_TYPE_F32, {8, 8, 3, 32}, std::vector<uint8_t>(8 * 8 * 3 * 32 * 4));
    w.add_tensor("v.patch_embd.bias", CELLM_TYPE_F16, {32}, std::vector<uint8_t>(32 * 2));
    const fs::path path = temp_dir() / "mmproj-f16-bias.gguf";
    w.write(path.string());
    const std::string error = load_error(path);
    EXPECT_NE(error.find("tensor 'v.patch_embd.bias' has type 1, expected F32"), std::string::npos) << error;
}

TEST(SmolVlmGgufCli, RunAndAManifestTakeTheMmproj) {
    const nlohmann::json& c = reference()["cases"]["image"];
    const std::string image = shell_quote((source_dir() / c.at("image").get<std::string>()).string());
    const std::string common = " --backend scalar --temperature 0 --max-tokens 8 --raw --json --prompt " +
                               shell_quote(c.at("prompt").get<std::string>()) + " --image " + image;
    const auto greedy = c.at("greedy").get<std::vector<int32_t>>();
    auto check = [&](const CommandResult& r) {
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const nlohmann::json out = nlohmann::json::parse(r.out);
        EXPECT_EQ(out.at("prompt_tokens").get<size_t>(), c.at("input_ids").size());
        // The random model's end-of-text is byte token 11, which greedy decoding reaches second: compare what came.
        const auto tokens = out.at("tokens").get<std::vector<int32_t>>();
        ASSERT_FALSE(tokens.empty());
        EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), greedy.begin())) << r.out;
    };
    // Flags over a manifest for another model.
    check(run_host("run --manifest " + shell_quote((source_dir() / "config/smollm2-135m.toml").string()) + " --model " +
                   shell_quote(text_gguf().string()) + " --mmproj " + shell_quote(mmproj_gguf().string()) + common));
    // [model] mmproj, relative to the manifest's folder.
    const fs::path manifest = temp_dir() / "smolvlm-gguf.toml";
    fs::copy_file(text_gguf(), temp_dir() / "text.gguf", fs::copy_options::overwrite_existing);
    fs::copy_file(mmproj_gguf(), temp_dir() / "mmproj.gguf", fs::copy_options::overwrite_existing);
    std::ofstream(manifest) << "[model]\npath = \"text.gguf\"\nmmproj = \"mmproj.gguf\"\n";
    check(run_host("run --manifest " + shell_quote(manifest.string()) + common));

    // A --model without --mmproj drops the manifest's mmproj, which described its own model: no images then.
    const CommandResult text_only = run_host("run --manifest " + shell_quote(manifest.string()) + " --model " +
                                             shell_quote(text_gguf().string()) + common);
    EXPECT_NE(text_only.exit_code, 0);
    const CommandResult missing = run_host("run --manifest " + shell_quote(manifest.string()) +
                                           " --mmproj /nonexistent/mmproj.gguf" + common);
    EXPECT_NE(missing.exit_code, 0);
    EXPECT_NE(missing.err.find("mmproj '/nonexistent/mmproj.gguf' does not exist"), std::string::npos) << missing.err;
    EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;
}

}  // namespace
}  // namespace cellm::testing
