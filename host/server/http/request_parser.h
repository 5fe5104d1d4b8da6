// Reads one HTTP/1.1 request from bytes as they arrive, in any pieces, without ever holding more than the limits
// allow. The transport feeds it what each read gives; it never blocks and never reads the socket itself.
#pragma once

#include "message.h"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cellm::server::http {

struct ParserLimits {
    size_t max_header_bytes = 16 * 1024;  // request line and headers together; beyond: 431
    size_t max_body_bytes = size_t{1} << 20;  // beyond, declared or chunked: 413
};

class RequestParser {
public:
    enum class State { headers, body, complete, failed };

    explicit RequestParser(ParserLimits limits) : limits_(limits) {}

    // Takes bytes of `data` until one request is complete (or the input is bad) and returns how many it used;
    // the rest belongs to the next request.
    size_t feed(std::string_view data);

    State state() const { return state_; }
    // Once the headers are read: the body's declared length, or nothing for a chunked body.
    std::optional<size_t> declared_length() const { return declared_; }
    // Once the headers are read: whether the client waits for "100 Continue" before sending its body.
    bool expects_continue() const { return expects_continue_; }
    // Once complete: whether the client keeps the connection for another request (HTTP/1.1 unless it said
    // "Connection: close"; HTTP/1.0 only with "keep-alive").
    bool keep_alive() const { return keep_alive_; }
    // When failed: the status to answer (400, 413, 431, 501, 505) and why, in one line.
    int error_status() const { return error_status_; }
    const std::string& error() const { return error_; }

    // The complete request; the parser is then ready for the next one.
    Request take();

private:
    size_t feed_headers(std::string_view data);
    size_t feed_body(std::string_view data);
    size_t feed_chunked(std::string_view data);
    void parse_head();
    void fail(int status, std::string why);

    enum class Chunk { size, data, data_end, trailer };

    ParserLimits limits_;
    State state_ = State::headers;
    std::string head_;  // request line and headers so far
    Request request_;
    std::optional<size_t> declared_;
    bool expects_continue_ = false;
    bool keep_alive_ = true;
    Chunk chunk_ = Chunk::size;
    std::string line_;       // a chunk-size or trailer line so far
    size_t chunk_left_ = 0;  // bytes of the current chunk still to come
    int error_status_ = 0;
    std::string error_;
};

}  // namespace cellm::server::http
