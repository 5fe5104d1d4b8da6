// cellm-host perplexity: on SmolLM2-135M over Paradise Lost (scripts/fetch_text.sh) its perplexity is within 0.5%
// of llama-perplexity's (the committed reference, make_reference.py), a saved run compared with itself gives KL 0
// and the same top token everywhere; and bad input (a missing text, one too short, a logits file that is not one,
// is truncated or belongs to another model or text, both logits flags at once) gives one error line and a non-zero
// exit. The PerplexityReal tests skip when the model or the text is missing.
#include "test_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <regex>

namespace fs = std::filesystem;

namespace cellm::testing {
namespace {

fs::path text_path() {
    const char* cache = std::getenv("CELLM_CACHE");
    const char* home = std::getenv("HOME");
    if (cache != nullptr) return fs::path(cache) / "text/paradise-lost.txt";
    return fs::path(home != nullptr ? home : "/root") / ".cache/cellm/text/paradise-lost.txt";
}

// config/smollm2-135m.toml's settings, without its [plugins] folder (the build's own plugins are found anyway, and
// another build's there would add warnings to the one line an error must be).
std::string manifest() {
    const fs::path path = temp_dir() / "smollm2.toml";
    if (!fs::exists(path)) {
        std::ofstream(path) << "[model]\npath = " << nlohmann::json(smollm2_path().string()).dump()
                            << "\n[backend]\nname = \"openblas\"\nthreads = 2\nprecision = \"fast\"\n"
                               "[context]\nlength = 2048\n";
    }
    return shell_quote(path.string());
}

// The one line bad input gets: "cellm-host: error: ..." on stderr, nothing else there, a non-zero exit.
void expect_one_error(const CommandResult& r, const std::string& needle) {
    EXPECT_NE(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.rfind("cellm-host: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << "no '" << needle << "' in: " << r.err;
}

double number_after(const std::string& text, const std::string& label) {
    std::smatch m;
    const std::string escaped = std::regex_replace(label, std::regex(R"([()+.])"), R"(\$&)");
    const std::regex pattern(escaped + R"(\s*:?\s*(-?[0-9.]+|nan|-nan))");
    if (!std::regex_search(text, m, pattern)) {
        ADD_FAILURE() << "no '" << label << "' in:\n" << text;
        return NAN;
    }
    return std::stod(m[1]);
}

void write_bytes(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A logits file of the right shape for its header: n_ctx, n_vocab, n_chunk, tokens 0, rows of zeros.
std::string logits_file(int32_t n_ctx, int32_t n_vocab, int32_t n_chunk) {
    std::string bytes = "_logits_";
    for (int32_t v : {n_ctx, n_vocab, n_chunk}) bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    const size_t rows = static_cast<size_t>(n_ctx - 1 - n_ctx / 2) * static_cast<size_t>(n_chunk);
    const size_t row = static_cast<size_t>(2 * ((n_vocab + 1) / 2) + 4);
    bytes.append(static_cast<size_t>(n_ctx) * static_cast<size_t>(n_chunk) * 4 + rows * row * 2, '\0');
    return bytes;
}

// ---- Without a model: the checks that come before it loads ---------------------------------------------------

TEST(Perplexity, MissingTextIsOneError) {
    const fs::path missing = temp_dir() / "no-such-text.txt";
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(missing.string())),
                     missing.string());
}

TEST(Perplexity, SaveAndCompareTogetherIsOneError) {
    const fs::path text = temp_dir() / "short.txt";
    write_bytes(text, "Of Man's first disobedience\n");
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(text.string()) +
                              " --save-logits a.bin --kl-divergence b.bin"),
                     "excludes");
}

TEST(Perplexity, NotALogitsFileIsOneError) {
    const fs::path text = temp_dir() / "short.txt", bad = temp_dir() / "bad-magic.bin";
    write_bytes(text, "Of Man's first disobedience\n");
    write_bytes(bad, "GGUF and then some bytes that are no logits file at all");
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(text.string()) +
                              " --kl-divergence " + shell_quote(bad.string())),
                     "is not a logits file");
}

TEST(Perplexity, TruncatedLogitsFileIsOneError) {
    const fs::path text = temp_dir() / "short.txt", cut = temp_dir() / "truncated.bin";
    write_bytes(text, "Of Man's first disobedience\n");
    std::string bytes = logits_file(64, 100, 2);
    bytes.resize(bytes.size() - 10);
    write_bytes(cut, bytes);
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(text.string()) +
                              " --kl-divergence " + shell_quote(cut.string())),
                     "is truncated");
    write_bytes(cut, "_logits_\x40");
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(text.string()) +
                              " --kl-divergence " + shell_quote(cut.string())),
                     "is truncated");
}

TEST(Perplexity, OtherContextThanTheLogitsFileIsOneError) {
    const fs::path text = temp_dir() / "short.txt", base = temp_dir() / "c64.bin";
    write_bytes(text, "Of Man's first disobedience\n");
    write_bytes(base, logits_file(64, 100, 2));
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(text.string()) +
                              " --kl-divergence " + shell_quote(base.string()) + " --context 128"),
                     "context of 64");
}

// ---- SmolLM2-135M over Paradise Lost -------------------------------------------------------------------------

class PerplexityReal : public ::testing::Test {
protected:
    void SetUp() override {
        if (!fs::exists(smollm2_path())) GTEST_SKIP() << smollm2_path() << " is missing: run scripts/fetch_models.sh";
        if (!fs::exists(text_path())) GTEST_SKIP() << text_path() << " is missing: run scripts/fetch_text.sh";
    }
    std::string args(const std::string& more) {
        return "perplexity --manifest " + manifest() + " --file " + shell_quote(text_path().string()) + " " + more;
    }
};

TEST_F(PerplexityReal, WithinHalfAPercentOfLlamaCpp) {
    std::ifstream in(source_dir() / "tests/perplexity/smollm2-135m-c512-k4.json");
    const nlohmann::json reference = nlohmann::json::parse(in);
    const auto context = reference["context"].get<int>(), chunks = reference["chunks"].get<int>();
    const CommandResult r =
        run_host(args("--context " + std::to_string(context) + " --chunks " + std::to_string(chunks)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int i = 1; i <= chunks; ++i) {
        std::string mark = "[";  // built by appending: GCC 12 warns (-Wrestrict) on "[" + std::to_string(i)
        mark += std::to_string(i);
        mark += ']';
        EXPECT_NE(r.out.find(mark), std::string::npos) << r.out;
    }
    const double ppl = number_after(r.out, "Final estimate: PPL =");
    const double want = reference["ppl"].get<double>();
    EXPECT_LT(std::fabs(ppl / want - 1), 0.005) << "cellm " << ppl << ", llama-perplexity " << want;
    std::printf("cellm %.4f, llama-perplexity %.4f (%+.3f%%)\n", ppl, want, 100 * (ppl / want - 1));
}

TEST_F(PerplexityReal, SavedRunAgainstItselfHasNoDivergence) {
    const fs::path saved = temp_dir() / "smollm2-c512-k2.bin";
    const CommandResult save = run_host(args("--context 512 --chunks 2 --save-logits " + shell_quote(saved.string())));
    ASSERT_EQ(save.exit_code, 0) << save.err;
    ASSERT_TRUE(fs::exists(saved));
    EXPECT_FALSE(fs::exists(saved.string() + ".partial"));
    const double ppl = number_after(save.out, "Final estimate: PPL =");

    const CommandResult same = run_host(args("--kl-divergence " + shell_quote(saved.string())));
    ASSERT_EQ(same.exit_code, 0) << same.err;
    EXPECT_LT(number_after(same.out, "Mean    KLD"), 1e-4) << same.out;
    EXPECT_LT(number_after(same.out, "99.0%   KLD"), 1e-3) << same.out;
    EXPECT_EQ(number_after(same.out, "Same top p:"), 100.0) << same.out;
    EXPECT_NEAR(number_after(same.out, "Mean PPL(Q)"), ppl, 1e-3 * ppl) << same.out;
    EXPECT_NEAR(number_after(same.out, "Mean PPL(base)"), ppl, 1e-3 * ppl) << same.out;

    // The same file against another text, and against the text cut short.
    const fs::path other = temp_dir() / "reversed.txt";
    std::string text = read_bytes(text_path());
    std::reverse(text.begin(), text.end());
    write_bytes(other, text);
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(other.string()) +
                              " --kl-divergence " + shell_quote(saved.string())),
                     "holds other tokens");
    // A truncated copy of a real file.
    const fs::path cut = temp_dir() / "cut.bin";
    std::string bytes = read_bytes(saved);
    bytes.resize(bytes.size() / 2);
    write_bytes(cut, bytes);
    expect_one_error(run_host(args("--kl-divergence " + shell_quote(cut.string()))), "is truncated");
}

TEST_F(PerplexityReal, OtherModelsLogitsFileIsOneError) {
    const fs::path base = temp_dir() / "vocab100.bin";
    write_bytes(base, logits_file(512, 100, 2));
    expect_one_error(run_host(args("--kl-divergence " + shell_quote(base.string()))), "another model");
}

TEST_F(PerplexityReal, TextShorterThanTwoChunksIsOneError) {
    const fs::path text = temp_dir() / "short.txt";
    write_bytes(text, "Of Man's first disobedience, and the fruit\nOf that forbidden tree whose mortal taste\n");
    expect_one_error(run_host("perplexity --manifest " + manifest() + " --file " + shell_quote(text.string()) +
                              " --context 512"),
                     "needs at least 1024");
}

}  // namespace
}  // namespace cellm::testing
