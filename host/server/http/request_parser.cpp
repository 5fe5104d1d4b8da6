#include "request_parser.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace cellm::server::http {

namespace {

constexpr size_t kMaxChunkLine = 1024;  // a chunk-size line with its extensions, or one trailer line

std::string lower(std::string_view text) {
    std::string out(text);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
}

std::string_view trim(std::string_view text) {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
    return text;
}

// RFC 9110's token characters (method and header names).
bool is_token(std::string_view text) {
    if (text.empty()) return false;
    return std::all_of(text.begin(), text.end(), [](unsigned char c) {
        return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
    });
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// Where the head ends (one past its empty line), searching from `from`; npos while it has not. A bare LF ends
// a line as well as CRLF (RFC 9112 lets a server accept it).
size_t head_end(const std::string& head, size_t from) {
    for (size_t i = head.find('\n', from); i != std::string::npos; i = head.find('\n', i + 1)) {
        if (i + 1 < head.size() && head[i + 1] == '\n') return i + 2;
        if (i + 2 < head.size() && head[i + 1] == '\r' && head[i + 2] == '\n') return i + 3;
    }
    return std::string::npos;
}

}  // namespace

std::string Request::header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
        if (key == name) return value;
    }
    return {};
}

void RequestParser::fail(int status, std::string why) {
    state_ = State::failed;
    error_status_ = status;
    error_ = std::move(why);
}

size_t RequestParser::feed(std::string_view data) {
    size_t used = 0;
    while (used < data.size() && (state_ == State::headers || state_ == State::body)) {
        const std::string_view rest = data.substr(used);
        used += state_ == State::headers ? feed_headers(rest) : declared_ ? feed_body(rest) : feed_chunked(rest);
    }
    return used;
}

size_t RequestParser::feed_headers(std::string_view data) {
    size_t skipped = 0;
    // Empty lines before a request line are ignored (some clients send one after a body).
    while (head_.empty() && skipped < data.size() && (data[skipped] == '\r' || data[skipped] == '\n')) ++skipped;
    data.remove_prefix(skipped);
    const size_t before = head_.size();
    // Never hold more than the limit (and the 3 bytes that may end it).
    const size_t room = limits_.max_header_bytes + 3 - std::min(before, limits_.max_header_bytes + 3);
    head_.append(data.substr(0, std::min(room, data.size())));
    const size_t end = head_end(head_, before >= 3 ? before - 3 : 0);
    if (end == std::string::npos) {
        if (head_.size() > limits_.max_header_bytes) {
            fail(431, "the request line and headers are longer than " + std::to_string(limits_.max_header_bytes) +
                          " bytes");
        }
        return skipped + head_.size() - before;
    }
    if (end > limits_.max_header_bytes + 2) {
        fail(431, "the request line and headers are longer than " + std::to_string(limits_.max_header_bytes) + " bytes");
        return skipped + head_.size() - before;
    }
    const size_t used = end - before;
    head_.resize(end);
    parse_head();
    return skipped + used;
}

void RequestParser::parse_head() {
    std::vector<std::string_view> lines;
    std::string_view rest(head_);
    while (!rest.empty()) {
        const size_t eol = rest.find('\n');
        std::string_view line = rest.substr(0, eol);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        lines.push_back(line);
        rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
    }
    while (!lines.empty() && lines.back().empty()) lines.pop_back();
    if (lines.empty()) return fail(400, "empty request");

    // Request line: METHOD SP target SP HTTP/x.y
    const std::string_view request_line = lines[0];
    const size_t sp1 = request_line.find(' ');
    const size_t sp2 = sp1 == std::string_view::npos ? sp1 : request_line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos || request_line.find(' ', sp2 + 1) != std::string_view::npos) {
        return fail(400, "malformed request line");
    }
    const std::string_view method = request_line.substr(0, sp1);
    const std::string_view target = request_line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view version = request_line.substr(sp2 + 1);
    if (!is_token(method) || target.empty() || target[0] != '/') return fail(400, "malformed request line");
    if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(static_cast<unsigned char>(version[5])) ||
        version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7]))) {
        return fail(400, "malformed request line");
    }
    if (version[5] != '1') return fail(505, "only HTTP/1.0 and HTTP/1.1 are served");
    const bool http10 = version == "HTTP/1.0";
    request_.method = method;
    request_.target = target;
    const std::string_view raw_path = target.substr(0, target.find('?'));
    request_.path.clear();
    for (size_t i = 0; i < raw_path.size(); ++i) {
        if (raw_path[i] != '%') {
            request_.path += raw_path[i];
            continue;
        }
        const int high = i + 2 < raw_path.size() ? hex_value(raw_path[i + 1]) : -1;
        const int low = high >= 0 ? hex_value(raw_path[i + 2]) : -1;
        if (low < 0 || (high == 0 && low == 0)) return fail(400, "malformed percent-encoding in the path");
        request_.path += static_cast<char>(high * 16 + low);
        i += 2;
    }

    bool chunked = false, has_length = false, close = false, keep = false;
    size_t length = 0;
    for (size_t i = 1; i < lines.size(); ++i) {
        const std::string_view line = lines[i];
        const size_t colon = line.find(':');
        if (line.empty() || line[0] == ' ' || line[0] == '\t') return fail(400, "malformed header line");
        if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) return fail(400, "malformed header line");
        std::string name = lower(line.substr(0, colon));
        const std::string_view value = trim(line.substr(colon + 1));
        if (name == "content-length") {
            if (value.empty() || value.size() > 18 ||
                !std::all_of(value.begin(), value.end(), [](unsigned char c) { return std::isdigit(c); })) {
                return fail(400, "malformed Content-Length");
            }
            const size_t n = std::stoull(std::string(value));
            if (has_length && n != length) return fail(400, "conflicting Content-Length headers");
            has_length = true;
            length = n;
        } else if (name == "transfer-encoding") {
            if (lower(value) != "chunked") return fail(501, "only the chunked transfer coding is served");
            chunked = true;
        } else if (name == "connection") {
            const std::string tokens = lower(value);
            close = close || tokens.find("close") != std::string::npos;
            keep = keep || tokens.find("keep-alive") != std::string::npos;
        } else if (name == "expect") {
            if (lower(value) != "100-continue") return fail(417, "only Expect: 100-continue is served");
            expects_continue_ = true;
        }
        request_.headers.emplace_back(std::move(name), std::string(value));
    }
    // Both would let a proxy in front and this server disagree on where the body ends.
    if (chunked && has_length) return fail(400, "Content-Length and Transfer-Encoding together");
    keep_alive_ = !close && (!http10 || keep);
    if (has_length && length > limits_.max_body_bytes) {
        return fail(413, "the request body is larger than " + std::to_string(limits_.max_body_bytes) + " bytes");
    }
    declared_.reset();
    if (!chunked) declared_ = has_length ? length : 0;
    state_ = declared_ == size_t{0} ? State::complete : State::body;
}

size_t RequestParser::feed_body(std::string_view data) {
    const size_t take = std::min(data.size(), *declared_ - request_.body.size());
    request_.body.append(data.substr(0, take));
    if (request_.body.size() == *declared_) state_ = State::complete;
    return take;
}

size_t RequestParser::feed_chunked(std::string_view data) {
    size_t used = 0;
    while (used < data.size() && state_ == State::body) {
        if (chunk_ == Chunk::data) {
            const size_t take = std::min(chunk_left_, data.size() - used);
            request_.body.append(data.substr(used, take));
            used += take;
            chunk_left_ -= take;
            if (chunk_left_ == 0) chunk_ = Chunk::data_end;
            continue;
        }
        // The other states read a line.
        const char c = data[used++];
        if (c != '\n') {
            if (line_.size() >= kMaxChunkLine) return fail(400, "a chunk line is too long"), used;
            line_ += c;
            continue;
        }
        std::string_view line(line_);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        switch (chunk_) {
            case Chunk::size: {
                const std::string_view digits = trim(line.substr(0, line.find(';')));
                size_t size = 0;
                if (digits.empty() || digits.size() > 15) return fail(400, "malformed chunk size"), used;
                for (const char d : digits) {
                    const int v = hex_value(d);
                    if (v < 0) return fail(400, "malformed chunk size"), used;
                    size = size * 16 + static_cast<size_t>(v);
                }
                if (size > limits_.max_body_bytes - request_.body.size()) {
                    return fail(413, "the request body is larger than " + std::to_string(limits_.max_body_bytes) +
                                         " bytes"),
                           used;
                }
                chunk_ = size == 0 ? Chunk::trailer : Chunk::data;
                chunk_left_ = size;
                break;
            }
            case Chunk::data_end:
                if (!line.empty()) return fail(400, "a chunk does not end where its size says"), used;
                chunk_ = Chunk::size;
                break;
            case Chunk::trailer:
                // Trailer fields are read and dropped; an empty line ends the body.
                if (line.empty()) state_ = State::complete;
                break;
            case Chunk::data:
                break;
        }
        line_.clear();
    }
    return used;
}

Request RequestParser::take() {
    Request out = std::move(request_);
    request_ = Request{};
    state_ = State::headers;
    head_.clear();
    declared_.reset();
    expects_continue_ = false;
    keep_alive_ = true;
    chunk_ = Chunk::size;
    line_.clear();
    chunk_left_ = 0;
    return out;
}

const char* reason_phrase(int status) {
    switch (status) {
        case 100: return "Continue";
        case 200: return "OK";
        case 400: return "Bad Request";
        case 401: return "Unauthorized";
        case 404: return "Not Found";
        case 405: return "Method Not Allowed";
        case 408: return "Request Timeout";
        case 413: return "Content Too Large";
        case 417: return "Expectation Failed";
        case 429: return "Too Many Requests";
        case 431: return "Request Header Fields Too Large";
        case 500: return "Internal Server Error";
        case 501: return "Not Implemented";
        case 503: return "Service Unavailable";
        case 505: return "HTTP Version Not Supported";
        default: return "Unknown";
    }
}

}  // namespace cellm::server::http
