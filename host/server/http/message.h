// One HTTP/1.1 exchange as the transport (transport.h) hands it to the server's routes: the request, read whole
// before any route runs, and the answer the route fills, whole or streamed.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cellm::server::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct Request {
    std::string method;
    std::string target;  // as sent: path and query
    std::string path;    // percent-decoded, without the query
    Headers headers;     // names in lower case, in the order sent
    std::string body;    // a chunked body already joined
    std::string peer;    // the client's address

    // The first header called `name` (lower case), empty when there is none.
    std::string header(std::string_view name) const;
};

// Where a streamed answer writes its body. Used only on the thread that runs the stream, only during it.
class BodySink {
public:
    virtual ~BodySink() = default;
    // Sends `data` as one chunk. False when the client is gone or has not read for the write timeout.
    virtual bool write(std::string_view data) = 0;
    // Whether the client is still connected, without writing (a client that closed its end is gone).
    virtual bool connected() = 0;
};

struct Response {
    int status = 200;
    Headers headers;
    std::string content_type;
    std::string body;
    // A streamed answer: runs once on the worker after the status line and headers went out (chunked transfer
    // encoding); returns false when it could not finish, and the connection is closed then.
    std::function<bool(BodySink&)> stream;

    void set_header(std::string name, std::string value) { headers.emplace_back(std::move(name), std::move(value)); }
    void set_content(std::string content, std::string type) {
        body = std::move(content);
        content_type = std::move(type);
    }
};

// "Not Found" for 404 and so on; "Unknown" for a status without a phrase here.
const char* reason_phrase(int status);

}  // namespace cellm::server::http
