// The server's HTTP/1.1 transport. One event-loop thread owns every connection while it is being read, so a
// slow, stalled or idle client costs a buffer, never a thread; a request goes to a worker only once it has been
// read whole. Reading has deadlines that a trickling client cannot extend; connections are capped in total and
// per client address; requests waiting for a worker are capped too. Requests the server marks as probes (health,
// metrics) never wait behind generations: they run on the loop or on a thread of their own.
#pragma once

#include "message.h"
#include "request_parser.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace cellm::server::http {

struct TransportLimits {
    // From a connection's first byte (or its opening) to the end of the request's headers.
    std::chrono::milliseconds header_timeout{10000};
    // For the body: this long plus its length at the minimum rate (a chunked body: the largest one's).
    std::chrono::milliseconds body_timeout{10000};
    size_t min_body_rate = 4096;  // bytes per second
    // Between two requests of a kept-alive connection.
    std::chrono::milliseconds idle_timeout{5000};
    // A client that takes nothing of its answer for this long is dropped (a stream's too).
    std::chrono::milliseconds write_timeout{30000};
    size_t max_connections = 1024;            // beyond: 503 at once (also capped by the open-file limit)
    size_t max_connections_per_client = 256;  // per client address; 0: no cap
    size_t workers = 64;                      // requests run at once (each stream holds one for its length)
    size_t max_waiting = 64;                  // read requests waiting for a worker; beyond: 429 at once
    ParserLimits parser;
};

// Read by /metrics from any thread.
struct TransportCounters {
    std::atomic<int64_t> connections_open{0};
    std::atomic<int64_t> rejected_connections{0};         // over max_connections
    std::atomic<int64_t> rejected_client_connections{0};  // over max_connections_per_client
    std::atomic<int64_t> rejected_no_descriptor{0};       // the process is out of file descriptors
    std::atomic<int64_t> rejected_busy{0};                // 429: max_waiting requests waited already
    std::atomic<int64_t> timed_out_header{0};             // 408: headers not read within their deadline
    std::atomic<int64_t> timed_out_body{0};               // 408: body not read within its deadline
    std::atomic<int64_t> closed_idle{0};                  // kept-alive connections closed when idle too long
    std::atomic<int64_t> waiting{0};                      // read requests waiting for a worker now
    std::atomic<int64_t> busy{0};                         // workers running a request now
};

enum class Lane { loop, probe, worker };

class Transport {
public:
    struct Hooks {
        // Runs a route and fills the answer; on a worker, or on the event loop when answer_inline says so.
        // An exception becomes a 500 through `refuse`.
        std::function<void(const Request&, Response&)> handle;
        // Where a request runs: on the event loop itself (it must be quick, never block and never stream), on
        // the probe worker (its own thread, for what may wait a little but must not queue behind generations),
        // or on the workers.
        std::function<Lane(const Request&)> lane;
        // Fills a refusal the transport makes itself (malformed request, timeout, limits) in the server's error
        // shape; `code` is a short machine-readable reason.
        std::function<void(Response&, int status, const std::string& message, const std::string& code)> refuse;
        // After an answer to a request went out (or failed to), with its status; any thread.
        std::function<void(const Request&, int status)> answered;
    };

    Transport(TransportLimits limits, Hooks hooks);
    ~Transport();
    Transport(const Transport&) = delete;
    Transport& operator=(const Transport&) = delete;

    // Opens the listening socket; returns its port (the one the system picked for port 0). Raises the process's
    // open-file limit to what max_connections needs where the hard limit allows. Throws std::runtime_error.
    int bind(const std::string& host, int port);
    // Serves on this thread until stop(), then until every request being answered has ended.
    void run();
    // Any thread, any time (before run too): stops accepting, closes connections not in a request, and makes
    // run() return once the requests being answered end.
    void stop();

    const TransportCounters& counters() const;

private:
    struct Loop;
    std::unique_ptr<Loop> loop_;
};

}  // namespace cellm::server::http
