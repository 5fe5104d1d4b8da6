// llama.cpp's logits file, as llama-perplexity --kl-divergence-base writes it and --kl-divergence reads it, so that
// cellm and llama.cpp can each compare against the other's: the magic "_logits_", int32 n_ctx, n_vocab and n_chunk,
// the n_chunk * n_ctx tokens the chunks were cut from (before any BOS replaced a chunk's first token), then for each
// chunk the compact rows (perplexity_math.h) of its scored positions n_ctx/2 .. n_ctx-2, in order. Integers and
// floats in the machine's byte order (little-endian wherever llama.cpp and cellm run).
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace cellm::cli {

struct LogitsHeader {
    int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
    std::vector<int32_t> tokens;  // n_chunk * n_ctx
};

// Positions scored in each chunk of n_ctx tokens: n_ctx/2 .. n_ctx-2, each predicting the token after it.
int32_t scored_per_chunk(int32_t n_ctx);

// Writes `path` through a temporary file beside it, renamed into place by finish(): an interrupted run leaves no
// file that reads as complete. Throws cellm::Error naming the file when writing fails.
class LogitsWriter {
public:
    LogitsWriter(const std::string& path, const LogitsHeader& header);
    ~LogitsWriter();
    LogitsWriter(const LogitsWriter&) = delete;
    LogitsWriter& operator=(const LogitsWriter&) = delete;

    void write_row(std::span<const uint16_t> row);
    void finish();

private:
    std::string path_, partial_;
    std::ofstream out_;
    bool finished_ = false;
};

// Reads and checks the header, and that the file's size is exactly what it promises. Throws cellm::Error with one
// line naming the file and what is wrong (no such file, not a logits file, impossible sizes, truncated, too long).
class LogitsReader {
public:
    explicit LogitsReader(const std::string& path);

    const LogitsHeader& header() const { return header_; }
    // The next compact row (compact_row_size(n_vocab) entries).
    void read_row(std::span<uint16_t> row);

private:
    std::string path_;
    std::ifstream in_;
    LogitsHeader header_;
};

}  // namespace cellm::cli
