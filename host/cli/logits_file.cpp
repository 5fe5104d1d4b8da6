#include "logits_file.h"

#include "error.h"
#include "perplexity_math.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;

namespace cellm::cli {

namespace {

constexpr char magic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};

}  // namespace

int32_t scored_per_chunk(int32_t n_ctx) { return n_ctx - 1 - n_ctx / 2; }

LogitsWriter::LogitsWriter(const std::string& path, const LogitsHeader& header)
    : path_(path), partial_(path + ".partial") {
    out_.open(partial_, std::ios::binary | std::ios::trunc);
    if (!out_) throw Error("cannot write " + partial_ + ": " + std::strerror(errno));
    out_.write(magic, sizeof magic);
    out_.write(reinterpret_cast<const char*>(&header.n_ctx), sizeof header.n_ctx);
    out_.write(reinterpret_cast<const char*>(&header.n_vocab), sizeof header.n_vocab);
    out_.write(reinterpret_cast<const char*>(&header.n_chunk), sizeof header.n_chunk);
    out_.write(reinterpret_cast<const char*>(header.tokens.data()),
               static_cast<std::streamsize>(header.tokens.size() * sizeof(int32_t)));
    if (!out_) throw Error("cannot write " + partial_);
}

LogitsWriter::~LogitsWriter() {
    if (finished_) return;
    out_.close();
    std::error_code ec;
    fs::remove(partial_, ec);
}

void LogitsWriter::write_row(std::span<const uint16_t> row) {
    out_.write(reinterpret_cast<const char*>(row.data()), static_cast<std::streamsize>(row.size_bytes()));
    if (!out_) throw Error("cannot write " + partial_ + " (disk full?)");
}

void LogitsWriter::finish() {
    out_.close();
    if (!out_) throw Error("cannot write " + partial_ + " (disk full?)");
    std::error_code ec;
    fs::rename(partial_, path_, ec);
    if (ec) throw Error("cannot rename " + partial_ + " to " + path_ + ": " + ec.message());
    finished_ = true;
}

LogitsReader::LogitsReader(const std::string& path) : path_(path) {
    in_.open(path, std::ios::binary);
    if (!in_) throw Error("cannot read " + path + ": " + std::strerror(errno));
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    if (ec) throw Error("cannot read " + path + ": " + ec.message());
    char check[sizeof magic] = {};
    int32_t fields[3] = {};
    in_.read(check, sizeof check);
    if (!in_ || std::memcmp(check, magic, sizeof magic) != 0) {
        throw Error(path + " is not a logits file (llama-perplexity's or cellm-host perplexity --save-logits'): it "
                           "does not start with \"_logits_\"");
    }
    in_.read(reinterpret_cast<char*>(fields), sizeof fields);
    if (!in_) throw Error(path + " is truncated: it ends inside its header");
    header_.n_ctx = fields[0];
    header_.n_vocab = fields[1];
    header_.n_chunk = fields[2];
    const std::string shape = "context " + std::to_string(header_.n_ctx) + ", vocabulary " +
                              std::to_string(header_.n_vocab) + ", " + std::to_string(header_.n_chunk) + " chunks";
    if (header_.n_ctx < 3 || header_.n_vocab < 1 || header_.n_chunk < 1) {
        throw Error(path + " has an impossible header (" + shape + ")");
    }
    // Sizes past any file (and past 64 bits) are nonsense, not a truncation.
    const double bytes = static_cast<double>(header_.n_chunk) *
                         (4.0 * header_.n_ctx + 2.0 * scored_per_chunk(header_.n_ctx) *
                                                    static_cast<double>(compact_row_size(header_.n_vocab)));
    if (bytes > 1e18) throw Error(path + " has an impossible header (" + shape + ")");
    const auto n_ctx = static_cast<uint64_t>(header_.n_ctx), n_chunk = static_cast<uint64_t>(header_.n_chunk);
    const uint64_t tokens = n_ctx * n_chunk;
    const uint64_t rows = static_cast<uint64_t>(scored_per_chunk(header_.n_ctx)) * n_chunk;
    const uint64_t expected = sizeof magic + sizeof fields + tokens * sizeof(int32_t) +
                              rows * compact_row_size(header_.n_vocab) * sizeof(uint16_t);
    if (size < expected) {
        throw Error(path + " is truncated: " + std::to_string(size) + " bytes where its header (" + shape + ") needs " +
                    std::to_string(expected));
    }
    if (size > expected) {
        throw Error(path + " has " + std::to_string(size - expected) + " bytes more than its header (" + shape +
                    ") describes");
    }
    header_.tokens.resize(tokens);
    in_.read(reinterpret_cast<char*>(header_.tokens.data()), static_cast<std::streamsize>(tokens * sizeof(int32_t)));
    if (!in_) throw Error("cannot read " + path);
}

void LogitsReader::read_row(std::span<uint16_t> row) {
    in_.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(row.size_bytes()));
    if (!in_) throw Error("cannot read " + path_ + ": it ended before its last row");
}

}  // namespace cellm::cli
