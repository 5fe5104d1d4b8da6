// libFuzzer target: the server's HTTP request parser (host/server/http/request_parser.cpp), which reads bytes
// straight from the network. The input's first byte picks how it is cut into reads; the rest is fed as a
// client's stream of pipelined requests. A parse must end complete or failed with a status, never read past
// what it was given, and never hold more than its limits.
#include "http/request_parser.h"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const size_t step = size_t{1} + data[0] % 64;  // bytes per read
    std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
    cellm::server::http::ParserLimits limits;
    limits.max_header_bytes = 1024;
    limits.max_body_bytes = 4096;
    cellm::server::http::RequestParser parser(limits);
    using State = cellm::server::http::RequestParser::State;
    while (!stream.empty()) {
        const std::string_view read = stream.substr(0, step);
        const size_t used = parser.feed(read);
        if (used > read.size()) std::abort();
        stream.remove_prefix(used);
        if (parser.state() == State::failed) {
            const int status = parser.error_status();
            if (status < 400 || status > 505 || parser.error().empty()) std::abort();
            return 0;
        }
        if (parser.state() == State::complete) {
            const cellm::server::http::Request request = parser.take();
            if (request.body.size() > limits.max_body_bytes || request.path.empty()) std::abort();
        } else if (used < read.size()) {
            std::abort();  // still reading, yet it left input unread
        }
    }
    return 0;
}
