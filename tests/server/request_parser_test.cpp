// The server's HTTP request parser (host/server/http/request_parser.cpp): requests in any pieces, bodies declared
// or chunked, pipelining, and every kind of bad input answered with its status instead of read on.
#include "http/request_parser.h"

#include <gtest/gtest.h>

#include <string>

namespace cellm::server::http {
namespace {

using State = RequestParser::State;

ParserLimits small_limits() {
    ParserLimits limits;
    limits.max_header_bytes = 256;
    limits.max_body_bytes = 64;
    return limits;
}

// Feeds `text` in pieces of `step` bytes; returns the bytes used.
size_t feed_in_pieces(RequestParser& parser, const std::string& text, size_t step) {
    size_t used = 0;
    while (used < text.size() && (parser.state() == State::headers || parser.state() == State::body)) {
        const size_t n = std::min(step, text.size() - used);
        const size_t took = parser.feed(std::string_view(text).substr(used, n));
        used += took;
        if (took < n) break;
    }
    return used;
}

TEST(RequestParser, ReadsARequestFedInAnyPieces) {
    const std::string text =
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        "Content-Length: 11\r\n\r\n{\"a\": true}";
    for (size_t step : {size_t{1}, size_t{2}, size_t{7}, text.size()}) {
        RequestParser parser(small_limits());
        EXPECT_EQ(feed_in_pieces(parser, text, step), text.size()) << step;
        ASSERT_EQ(parser.state(), State::complete) << step;
        EXPECT_TRUE(parser.keep_alive());
        const Request request = parser.take();
        EXPECT_EQ(request.method, "POST");
        EXPECT_EQ(request.target, "/v1/chat/completions?x=1");
        EXPECT_EQ(request.path, "/v1/chat/completions");
        EXPECT_EQ(request.header("content-type"), "application/json");
        EXPECT_EQ(request.body, "{\"a\": true}");
        EXPECT_EQ(parser.state(), State::headers);
    }
}

TEST(RequestParser, StopsAtTheEndOfOneRequestSoTheNextIsPipelined) {
    const std::string first = "GET /health HTTP/1.1\r\n\r\n";
    const std::string second = "GET /metrics HTTP/1.1\nConnection: close\n\n";  // bare LFs are taken too
    RequestParser parser(small_limits());
    EXPECT_EQ(parser.feed(first + second), first.size());
    EXPECT_EQ(parser.take().path, "/health");
    EXPECT_EQ(parser.feed(second), second.size());
    ASSERT_EQ(parser.state(), State::complete);
    EXPECT_FALSE(parser.keep_alive());
    EXPECT_EQ(parser.take().path, "/metrics");
}

TEST(RequestParser, JoinsAChunkedBodyAndDropsTrailers) {
    const std::string text = "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                             "4;ext=1\r\nabcd\r\n3\r\nefg\r\n0\r\nX-Trailer: y\r\n\r\n";
    for (size_t step : {size_t{1}, size_t{5}, text.size()}) {
        RequestParser parser(small_limits());
        EXPECT_EQ(feed_in_pieces(parser, text, step), text.size());
        ASSERT_EQ(parser.state(), State::complete);
        EXPECT_FALSE(parser.declared_length().has_value());
        EXPECT_EQ(parser.take().body, "abcdefg");
    }
}

TEST(RequestParser, HttpOneZeroClosesUnlessKeptAlive) {
    RequestParser parser(small_limits());
    parser.feed("GET / HTTP/1.0\r\n\r\n");
    EXPECT_FALSE(parser.keep_alive());
    parser.take();
    parser.feed("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    EXPECT_TRUE(parser.keep_alive());
}

TEST(RequestParser, DecodesThePathAndReportsExpectContinue) {
    RequestParser parser(small_limits());
    parser.feed("POST /v1/models/a%2Fb HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
    EXPECT_EQ(parser.state(), State::body);
    EXPECT_TRUE(parser.expects_continue());
    EXPECT_EQ(parser.declared_length(), size_t{2});
    parser.feed("{}");
    EXPECT_EQ(parser.take().path, "/v1/models/a/b");
}

struct BadCase {
    const char* name;
    std::string text;
    int status;
};

TEST(RequestParser, BadInputGetsItsStatus) {
    const BadCase cases[] = {
        {"garbage", "\x01\x02\x03 nonsense\r\n\r\n", 400},
        {"no version", "GET /\r\n\r\n", 400},
        {"two spaces", "GET  / HTTP/1.1\r\n\r\n", 400},
        {"not origin form", "GET http://a/ HTTP/1.1\r\n\r\n", 400},
        {"HTTP/2", "GET / HTTP/2.0\r\n\r\n", 505},
        {"bad version", "GET / HTTX/1.1\r\n\r\n", 400},
        {"header without colon", "GET / HTTP/1.1\r\nHost\r\n\r\n", 400},
        {"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
        {"folded header", "GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400},
        {"bad length", "POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
        {"negative length", "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
        {"huge length", "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400},
        {"two lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
        {"length and chunked", "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
        {"gzip coding", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"other expectation", "POST / HTTP/1.1\r\nExpect: magic\r\n\r\n", 417},
        {"bad percent", "GET /a%zz HTTP/1.1\r\n\r\n", 400},
        {"percent NUL", "GET /a%00 HTTP/1.1\r\n\r\n", 400},
        {"body over limit", "POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n", 413},
        {"headers over limit", "GET / HTTP/1.1\r\nA: " + std::string(300, 'a') + "\r\n\r\n", 431},
        {"endless request line", "GET /" + std::string(1000, 'a'), 431},
        {"bad chunk size", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"chunk without CRLF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n", 400},
        {"chunks over limit", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n" + std::string(64, 'a') +
                                  "\r\n1\r\n",
         413},
        {"endless chunk line", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(2000, '0'), 400},
    };
    for (const BadCase& c : cases) {
        for (size_t step : {size_t{1}, c.text.size()}) {
            RequestParser parser(small_limits());
            feed_in_pieces(parser, c.text, step);
            EXPECT_EQ(parser.state(), State::failed) << c.name << " step " << step;
            EXPECT_EQ(parser.error_status(), c.status) << c.name << " step " << step << ": " << parser.error();
            EXPECT_FALSE(parser.error().empty()) << c.name;
        }
    }
}

TEST(RequestParser, NeverHoldsMoreThanTheHeaderLimitWhileWaiting) {
    RequestParser parser(small_limits());
    const std::string endless(10000, 'a');
    const size_t used = parser.feed(endless);
    EXPECT_EQ(parser.state(), State::failed);
    EXPECT_LE(used, small_limits().max_header_bytes + 3);
}

}  // namespace
}  // namespace cellm::server::http
