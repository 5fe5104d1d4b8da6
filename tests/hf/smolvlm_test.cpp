// tests/data/hf/smolvlm-tiny: a tiny random SmolVLM (SigLIP encoder, pixel-shuffle projector, Llama text model)
// that transformers saved with its processor, and transformers' outputs for prompts with images
// (scripts/hf_reference/smolvlm.py). cellm must give the same prompt tokens, image embeddings and logits on every
// backend that runs the vision ops, whether the prompt goes in whole or in chunks, and must reuse an image's
// encoding for a second question. The bar is the issue's: cosine >= 0.9999, on f32 weights.
#include "smolvlm_support.h"

#include "error.h"
#include "schedule/scheduler.h"
#include "vision/idefics3_processor.h"
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

fs::path folder() { return smolvlm_folder(); }
const nlohmann::json& reference() { return smolvlm_reference(); }

class SmolVlm : public SmolVlmFixture {
protected:
    void SetUp() override { open(folder()); }
};

TEST_P(SmolVlm, PromptTokensAndImageEmbeddingsMatchTransformers) {
    const nlohmann::json& c = reference()["cases"]["image"];
    const ImagePrompter::Prompt p = build(c);
    EXPECT_EQ(p.tokens, c.at("input_ids").get<std::vector<int32_t>>());
    ASSERT_NE(p.embeddings, nullptr);
    EXPECT_EQ(p.embeddings->positions.size(), c.at("frames").get<size_t>() * reference().at("image_seq_len").get<size_t>());
    const double worst = worst_cosine(p.embeddings->values, floats_of(c.at("image_embeddings").at("file")), 64);
    RecordProperty("image_embeddings_worst_cosine", std::to_string(worst));
    EXPECT_GE(worst, kMinCosine);
}

TEST_P(SmolVlm, LogitsMatchTransformersWholeAndInChunks) {
    const nlohmann::json& c = reference()["cases"]["image"];
    const ImagePrompter::Prompt p = build(c);
    const std::vector<float> want = floats_of(c.at("logits").at("file"));
    // 7-token chunks cut through the image's tokens, so some steps splice a few rows and some none.
    for (size_t chunk : {p.tokens.size(), size_t{7}}) {
        const double worst = worst_cosine(logits(p, chunk), want, n_vocab_);
        RecordProperty("logits_chunk_" + std::to_string(chunk) + "_worst_cosine", std::to_string(worst));
        EXPECT_GE(worst, kMinCosine) << "chunks of " << chunk;
    }
}

TEST_P(SmolVlm, ASecondQuestionReusesTheImagesEncoding) {
    build(reference()["cases"]["image"]);
    const nlohmann::json& c = reference()["cases"]["image2"];
    const ImagePrompter::Prompt p = build(c);
    EXPECT_EQ(prompter_->images_encoded(), 1);
    EXPECT_EQ(prompter_->cache_hits(), 1);
    EXPECT_EQ(p.tokens, c.at("input_ids").get<std::vector<int32_t>>());
    std::vector<float> all = logits(p, p.tokens.size());
    const std::vector<float> last(all.end() - static_cast<ptrdiff_t>(n_vocab_), all.end());
    EXPECT_GE(worst_cosine(last, c.at("last_logits").get<std::vector<float>>(), n_vocab_), kMinCosine);
}

TEST_P(SmolVlm, TextWithoutImagesMatchesTransformers) {
    const nlohmann::json& c = reference()["cases"]["text"];
    const ImagePrompter::Prompt p{c.at("input_ids").get<std::vector<int32_t>>(), nullptr};
    EXPECT_EQ(stack_.model->tokenizer().encode(c.at("prompt").get<std::string>(), false, true), p.tokens);
    std::vector<float> all = logits(p, p.tokens.size());
    const std::vector<float> last(all.end() - static_cast<ptrdiff_t>(n_vocab_), all.end());
    EXPECT_GE(worst_cosine(last, c.at("last_logits").get<std::vector<float>>(), n_vocab_), kMinCosine);
}

TEST_P(SmolVlm, ASingleTileImageMatchesTransformers) {
    // The saved processor splits every image (longest edge 64, tiles of 32); the reference ran this case with a
    // longest edge of 32, so only the global frame remains, and so does this test.
    const nlohmann::json& c = reference()["cases"]["one_tile"];
    vision::Idefics3Config config;
    config.longest_edge = 32;
    config.tile = 32;
    const vision::Idefics3Image image =
        vision::preprocess_idefics3(vision::load_image(source_dir() / c.at("image").get<std::string>()), config);
    ASSERT_EQ(image.frames, 1);
    ASSERT_EQ(image.rows, 0);
    VisionEncoder encoder(*stack_.model, *stack_.backend, stack_.engine->weights());
    EXPECT_GE(worst_cosine(encoder.encode(image.pixels, 1), floats_of(c.at("image_embeddings").at("file")), 64), kMinCosine);
}

TEST_P(SmolVlm, GreedyGenerationThroughTheSchedulerMatchesTransformers) {
    const nlohmann::json& c = reference()["cases"]["image"];
    ImagePrompter::Prompt p = build(c);
    Scheduler scheduler(*stack_.engine, stack_.model->tokenizer(), SchedulerOptions{});
    SessionOptions o;
    o.sampling.temperature = 0;
    o.max_tokens = 8;
    o.ignore_end_of_generation = true;  // the random model's end-of-text token is an ordinary byte
    const SessionId id = scheduler.create(o);
    scheduler.submit(id, p.tokens, p.embeddings);
    scheduler.run();
    EXPECT_EQ(scheduler.session(id).result().tokens, c.at("greedy").get<std::vector<int32_t>>());

    // The same turn again: the blocks holding image tokens were never published, so nothing is reused past
    // the first image token, and the answer is the same.
    scheduler.submit(id, p.tokens, p.embeddings);
    scheduler.run();
    EXPECT_EQ(scheduler.session(id).result().tokens, c.at("greedy").get<std::vector<int32_t>>());
    EXPECT_LE(scheduler.session(id).result().reused_tokens, p.embeddings->positions.front());
}

INSTANTIATE_TEST_SUITE_P(Backends, SmolVlm, ::testing::ValuesIn(all_backends()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// Bad input: one error naming the problem, and the engine still serves the next prompt.
TEST(SmolVlmErrors, BadImagesAndMarkersAreRefusedWithOneLine) {
    Stack stack = make_stack(folder(), "scalar");
    ImagePrompter prompter(*stack.model, *stack.backend, stack.engine->weights());
    const std::vector<uint8_t> good = image_bytes("tests/data/vision/smolvlm_rgb_32x32.png");
    const std::vector<uint8_t> truncated(good.begin(), good.begin() + static_cast<ptrdiff_t>(good.size() / 2));
    const std::vector<uint8_t> text{'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
    const auto error_of = [&](std::string_view prompt, std::vector<std::span<const uint8_t>> images) {
        try {
            prompter.build(prompt, images, false);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(error_of("<image>hi", {truncated}).find("image 1"), std::string::npos);
    EXPECT_NE(error_of("<image>hi", {text}).find("image 1"), std::string::npos);
    EXPECT_NE(error_of("<image><image>hi", {good}).find("2 <image> markers for 1 images"), std::string::npos);
    EXPECT_NE(error_of("<image>hi", {good, good}).find("1 <image> markers for 2 images"), std::string::npos);
    const std::string no_marker = error_of("hi", {good});  // the image goes first
    EXPECT_EQ(no_marker, "no error");
    for (const std::string& e : {error_of("<image>hi", {truncated}), error_of("<image>hi", {text})}) {
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    }
}

TEST(SmolVlmErrors, ModelsWithoutAVisionEncoderRefuseImages) {
    Stack stack = make_stack(source_dir() / "tests/data/hf/qwen3-tiny", "scalar");
    EXPECT_FALSE(stack.model->vision().has_value());
    try {
        ImagePrompter prompter(*stack.model, *stack.backend, stack.engine->weights());
        FAIL() << "an ImagePrompter for a text model";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("has no vision encoder"), std::string::npos) << e.what();
    }
    Scheduler scheduler(*stack.engine, stack.model->tokenizer(), SchedulerOptions{});
    const SessionId id = scheduler.create(SessionOptions{});
    auto embeddings = std::make_shared<PromptEmbeddings>();
    embeddings->positions = {0};
    embeddings->values.assign(static_cast<size_t>(stack.model->info().n_embd), 0.0f);
    EXPECT_THROW(scheduler.submit(id, {1, 2, 3}, embeddings), Error);
}

// SmolVLM-256M's vision geometry (12 layers of 768 over 512-pixel tiles, 1024 patches a tile, 9 frames for this
// image) on random weights: scripts/hf_reference/smolvlm_256m_shape.py writes the folder and transformers' image
// embeddings into the models folder. Minutes on two cores, so only under scripts/test.sh --full.
TEST(SmolVlmRealSize, ImageEmbeddingsMatchTransformers) {
    const fs::path dir = models_dir() / "smolvlm-256m-shape";
    if (!full_suite()) GTEST_SKIP() << "a long check: scripts/test.sh --full runs it";
    if (!fs::exists(dir / "reference.json")) GTEST_SKIP() << dir << " is missing (scripts/hf_reference/smolvlm_256m_shape.py)";
    std::ifstream in(dir / "reference.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    Stack stack = make_stack(dir, "openblas");
    ImagePrompter prompter(*stack.model, *stack.backend, stack.engine->weights());
    const std::vector<uint8_t> bytes = image_bytes(ref.at("image").get<std::string>());
    const std::span<const uint8_t> images[] = {bytes};
    const ImagePrompter::Prompt p = prompter.build(ref.at("prompt").get<std::string>(), images, false);
    EXPECT_EQ(p.tokens, ref.at("input_ids").get<std::vector<int32_t>>());
    std::ifstream f(dir / "embeddings.f32", std::ios::binary);
    std::vector<char> raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<float> want(raw.size() / sizeof(float));
    std::memcpy(want.data(), raw.data(), want.size() * sizeof(float));
    ASSERT_NE(p.embeddings, nullptr);
    const double worst = worst_cosine(p.embeddings->values, want, static_cast<size_t>(stack.model->info().n_embd));
    RecordProperty("worst_cosine", std::to_string(worst));
    std::printf("SmolVLM-256M-shaped image embeddings: worst cosine %.9f over %zu rows\n", worst,
                p.embeddings->positions.size());
    EXPECT_GE(worst, kMinCosine);
}

TEST(SmolVlmCli, RunAnswersAboutAnImage) {
    const nlohmann::json& c = reference()["cases"]["image"];
    const CommandResult r = run_host(
        "run --manifest " + shell_quote((source_dir() / "config/smollm2-135m.toml").string()) + " --model " +
        shell_quote(folder().string()) + " --backend scalar --temperature 0 --max-tokens 8 --raw --json --prompt " +
        shell_quote(c.at("prompt").get<std::string>()) + " --image " +
        shell_quote((source_dir() / c.at("image").get<std::string>()).string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json out = nlohmann::json::parse(r.out);
    EXPECT_EQ(out.at("prompt_tokens").get<size_t>(), c.at("input_ids").size());
    // The random model's end-of-text is byte token 11, which greedy decoding reaches second: compare what came.
    const auto tokens = out.at("tokens").get<std::vector<int32_t>>();
    ASSERT_FALSE(tokens.empty());
    const auto greedy = c.at("greedy").get<std::vector<int32_t>>();
    EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), greedy.begin())) << r.out;

    const CommandResult bad = run_host("run --manifest " + shell_quote((source_dir() / "config/smollm2-135m.toml").string()) +
                                       " --model " + shell_quote(folder().string()) + " --backend scalar --raw --prompt hi --image " +
                                       shell_quote((source_dir() / "tests/data/hf/smolvlm-tiny/config.json").string()));
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.err.find("image 1"), std::string::npos) << bad.err;
}

TEST(SmolVlmCli, InspectShowsTheVisionTowerAndProcessor) {
    const CommandResult r = run_host("inspect " + shell_quote(folder().string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* line : {"\nvision:\n", "clip.vision.image_size", "cellm.vision.tile_size", "cellm.vision.image_mean"}) {
        EXPECT_NE(r.out.find(line), std::string::npos) << line << " missing from:\n" << r.out;
    }
}

TEST(SmolVlmCli, ChatAttachesImagesAndSurvivesABadOne) {
    const std::string image = (source_dir() / "tests/data/vision/smolvlm_rgb_20x48.png").string();
    const CommandResult r = run_host(
        "chat --manifest " + shell_quote((source_dir() / "config/smollm2-135m.toml").string()) + " --model " +
            shell_quote(folder().string()) + " --backend scalar --temperature 0 --max-tokens 4",
        "/image " + image + "\nWhat is in this picture?\n/image " + folder().string() + "/config.json\nhi\nagain\n/exit\n");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // The first turn is the reference's prompt; the bad image is refused in one line and its message dropped; the
    // next turn still carries the first image (its 12 image tokens again, after the first turn's text).
    EXPECT_NE(r.err.find("[46 prompt tokens"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("error: image 2: not a PNG or JPEG file"), std::string::npos) << r.err;
    size_t turns = 0;
    for (size_t at = r.err.find(" prompt tokens, "); at != std::string::npos; at = r.err.find(" prompt tokens, ", at + 1)) ++turns;
    EXPECT_EQ(turns, 2u) << r.err;
}

}  // namespace
}  // namespace cellm::testing
