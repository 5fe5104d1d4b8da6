#include "smolvlm_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

namespace cellm::testing {

std::filesystem::path smolvlm_folder() { return source_dir() / "tests/data/hf/smolvlm-tiny"; }

nlohmann::json read_json(const std::filesystem::path& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

const nlohmann::json& smolvlm_reference() {
    static const nlohmann::json j = read_json(smolvlm_folder() / "reference.json");
    return j;
}

std::vector<float> floats_of(const std::string& file, const std::filesystem::path& dir) {
    std::ifstream in(dir / file, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<float> out(bytes.size() / sizeof(float));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
    return out;
}

std::vector<uint8_t> image_bytes(const std::string& name) {
    std::ifstream in(source_dir() / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double worst_cosine(const std::vector<float>& got, const std::vector<float>& want, size_t n) {
    EXPECT_EQ(got.size(), want.size());
    double worst = 1.0;
    for (size_t r = 0; r * n < std::min(got.size(), want.size()); ++r) {
        worst = std::min(worst, cosine(got.data() + r * n, want.data() + r * n, n));
    }
    return worst;
}

std::vector<std::string> all_backends() {
    std::vector<std::string> out;
    for (const Plugin* p : registry().plugins(CELLM_PLUGIN_BACKEND)) out.emplace_back(p->name());
    return out;
}

}  // namespace cellm::testing
