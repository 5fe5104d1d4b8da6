// cellm's decoding and Idefics3 preprocessing against transformers' (tests/data/vision/reference.json): the
// tile grid, the frame shapes, every pixel value, the expanded prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "error.h"
#include "vision/idefics3_processor.h"
#include "vision/image.h"

namespace cellm::vision {
namespace {

const std::filesystem::path kData = CELLM_VISION_DATA;

nlohmann::json reference() {
    std::ifstream in(kData / "reference.json");
    return nlohmann::json::parse(in);
}

std::vector<float> read_floats(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> values(bytes.size() / sizeof(float));
    std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));  // little-endian, as the host
    return values;
}

std::string fnv1a64(const std::vector<float>& values) {
    std::uint64_t hash = 0xCBF29CE484222325ull;
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(values.data());
    for (std::size_t i = 0; i < values.size() * sizeof(float); ++i) hash = (hash ^ bytes[i]) * 0x100000001B3ull;
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
    return text;
}

TEST(Idefics3Reference, EveryCaseMatchesTransformers) {
    const nlohmann::json ref = reference();
    ASSERT_GE(ref["cases"].size(), 10u);
    for (const auto& c : ref["cases"]) {
        const std::string name = c["name"];
        SCOPED_TRACE(name);
        Idefics3Config config;
        config.longest_edge = c["longest_edge"];
        config.tile = c["tile"];
        config.split = c["split"];
        std::vector<Idefics3Image> images;
        std::vector<float> pixels;
        for (std::size_t i = 0; i < c["images"].size(); ++i) {
            images.push_back(preprocess_idefics3(load_image(kData / c["images"][i].get<std::string>()), config));
            EXPECT_EQ(images.back().rows, c["rows"][i]);
            EXPECT_EQ(images.back().cols, c["cols"][i]);
            pixels.insert(pixels.end(), images.back().pixels.begin(), images.back().pixels.end());
        }
        const auto shape = c["shape"].get<std::vector<std::size_t>>();
        ASSERT_EQ(shape.size(), 4u);
        EXPECT_EQ(shape[2], std::size_t(config.tile));
        ASSERT_EQ(pixels.size(), shape[0] * shape[1] * shape[2] * shape[3]);
        if (c.contains("fnv1a64")) {
            EXPECT_EQ(fnv1a64(pixels), c["fnv1a64"].get<std::string>());
        } else {
            const std::vector<float> expected = read_floats(kData / c["pixels"].get<std::string>());
            ASSERT_EQ(pixels.size(), expected.size());
            // Exact: the same decoders' output, PIL's integer resampling and numpy's float arithmetic.
            std::size_t differing = 0;
            float worst = 0.0f;
            for (std::size_t i = 0; i < pixels.size(); ++i) {
                if (pixels[i] != expected[i]) ++differing;
                worst = std::max(worst, std::fabs(pixels[i] - expected[i]));
            }
            EXPECT_EQ(differing, 0u) << "largest difference " << worst;
        }
        const int seq_len = c["image_seq_len"];
        EXPECT_EQ(expand_image_tokens(c["text"].get<std::string>(), images, seq_len), c["expanded"].get<std::string>());
    }
}

TEST(Idefics3Prompt, ImageSeqLenOfSmolVLMCheckpoints) {
    EXPECT_EQ(idefics3_image_seq_len(512, 16, 4), 64);   // SmolVLM-256M / 500M
    EXPECT_EQ(idefics3_image_seq_len(384, 14, 3), 81);   // SmolVLM-Instruct (2B)
    EXPECT_EQ(idefics3_image_seq_len(364, 14, 2), 169);  // Idefics3-8B, the processors' default
    EXPECT_THROW(idefics3_image_seq_len(512, 0, 4), Error);
}

TEST(Idefics3Prompt, SingleFrameAndGrid) {
    EXPECT_EQ(idefics3_image_prompt(0, 0, 2),
              "<fake_token_around_image><global-img><image><image><fake_token_around_image>");
    EXPECT_EQ(idefics3_image_prompt(1, 2, 1),
              "<fake_token_around_image><row_1_col_1><image><fake_token_around_image><row_1_col_2><image>\n"
              "\n<fake_token_around_image><global-img><image><fake_token_around_image>");
}

TEST(Idefics3Prompt, ImageCountMustMatch) {
    const std::vector<Idefics3Image> one(1);
    EXPECT_THROW(expand_image_tokens("no image here", one, 4), Error);
    EXPECT_THROW(expand_image_tokens("<image><image>", one, 4), Error);
    EXPECT_EQ(expand_image_tokens("a<image>b", one, 1),
              "a<fake_token_around_image><global-img><image><fake_token_around_image>b");
}

}  // namespace
}  // namespace cellm::vision
