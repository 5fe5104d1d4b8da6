#include "transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cellm::server::http {

namespace {

using Clock = std::chrono::steady_clock;

// How long a connection we are closing may keep sending before it is cut: closing a socket with unread input
// resets it, and a reset can destroy the answer before the client read it.
constexpr auto kLinger = std::chrono::milliseconds(1000);
// How often deadlines are looked at: the precision of every timeout.
constexpr int kTickMs = 50;
// Descriptors kept free of connections (listening socket, epoll, the engine's files, logs).
constexpr rlim_t kSpareDescriptors = 64;

enum class Phase {
    reading,    // a request is expected or partly read; the header or body deadline runs
    idle,       // kept alive between requests; the idle deadline runs
    lingering,  // answered for the last time and half-closed; input is dropped until the client closes
};

struct Connection {
    Connection(int descriptor, std::string address, ParserLimits limits)
        : fd(descriptor), peer(std::move(address)), parser(limits) {}
    int fd;
    std::string peer;
    RequestParser parser;
    Phase phase = Phase::reading;
    Clock::time_point deadline;
    bool in_body = false;  // the body deadline replaced the header one
    bool counted = false;  // in connections_open and its client's count (a refused one never is)
    bool close_after_write = false;
    bool keep_alive = true;  // set by the worker: whether the connection may serve another request
    bool eof = false;        // the client closed its end after sending: its last request is still answered
    std::string in;   // bytes read and not parsed yet (the rest of a request, or pipelined ones)
    std::string out;  // the part of a loop-made answer not written yet
    Clock::time_point write_deadline;  // while `out` is not empty
};

void set_blocking(int fd, bool blocking) {
    const int flags = fcntl(fd, F_GETFL, 0);
    if (flags >= 0) fcntl(fd, F_SETFL, blocking ? flags & ~O_NONBLOCK : flags | O_NONBLOCK);
}

// Writes all of `data` on a blocking socket; false when the client is gone or took nothing for the send timeout.
bool send_all(int fd, std::string_view data) {
    while (!data.empty()) {
        const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
}

// The status line and headers. `length` is the body's, or nothing for a chunked one.
std::string head_of(const Response& response, std::optional<size_t> length, bool keep_alive) {
    std::string head = "HTTP/1.1 " + std::to_string(response.status) + " " + reason_phrase(response.status) + "\r\n";
    for (const auto& [name, value] : response.headers) head.append(name).append(": ").append(value).append("\r\n");
    if (!response.content_type.empty()) head.append("Content-Type: ").append(response.content_type).append("\r\n");
    if (length) {
        head.append("Content-Length: ").append(std::to_string(*length)).append("\r\n");
    } else {
        head.append("Transfer-Encoding: chunked\r\n");
    }
    head.append(keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n");
    return head;
}

std::string peer_address(const sockaddr_storage& address) {
    char text[INET6_ADDRSTRLEN] = {};
    if (address.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
    } else if (address.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
    }
    return text;
}

// A streamed body on a blocking socket, in chunked transfer encoding.
class ChunkedSink final : public BodySink {
public:
    explicit ChunkedSink(int fd) : fd_(fd) {}
    bool write(std::string_view data) override {
        if (data.empty()) return true;  // an empty chunk would end the body
        char size[24];
        const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
        std::string chunk(size, static_cast<size_t>(n));
        chunk.append(data).append("\r\n");
        return send_all(fd_, chunk);
    }
    bool connected() override {
        pollfd p{fd_, POLLIN | POLLRDHUP, 0};
        if (::poll(&p, 1, 0) < 0) return errno == EINTR;
        if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return false;
        if (p.revents & POLLIN) {
            // Readable: either the client's next request (pipelined) or its end of the connection.
            char byte;
            return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
        }
        return true;
    }

private:
    int fd_;
};

}  // namespace

struct Transport::Loop {
    Loop(TransportLimits l, Hooks h) : limits(l), hooks(std::move(h)) {}

    TransportLimits limits;
    Hooks hooks;
    TransportCounters counters;

    int listen_fd = -1;
    int epoll_fd = -1;
    int wake_fd = -1;
    int reserve_fd = -1;  // closed to accept (and drop) one connection when descriptors run out
    size_t max_connections = 0;
    std::atomic<bool> stopping{false};

    // Loop thread only.
    std::unordered_map<int, std::unique_ptr<Connection>> connections;  // those the loop holds now
    std::unordered_map<std::string, size_t> per_client;                  // counted connections per address
    size_t open = 0;                                                      // counted connections, workers' too
    bool listening = true;

    // Requests read whole waiting for a worker, and the connections workers are done with.
    struct Job {
        std::unique_ptr<Connection> connection;
        Request request;
        bool keep_alive;
    };
    std::mutex mutex;
    std::condition_variable work;
    std::deque<Job> jobs;
    std::deque<Job> probes;  // the probe worker's
    size_t busy = 0;    // workers running a job, the probe worker included
    bool quit = false;  // workers end once the queue is empty
    std::vector<std::unique_ptr<Connection>> returned;
    std::vector<std::thread> workers;

    ~Loop() {
        for (const int fd : {listen_fd, epoll_fd, wake_fd, reserve_fd}) {
            if (fd >= 0) ::close(fd);
        }
        for (const auto& entry : connections) ::close(entry.first);
    }

    void wake() const {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
    }

    Connection* find(int fd) {
        const auto it = connections.find(fd);
        return it == connections.end() ? nullptr : it->second.get();
    }

    // While an answer is going out, the connection's input waits in the socket: a client that sends requests
    // and reads no answers is held by the socket's buffers, not ours.
    void watch(const Connection& c, int op) const {
        epoll_event event{};
        event.events = c.eof                ? 0u
                       : c.out.empty() ? static_cast<uint32_t>(EPOLLIN | EPOLLRDHUP)
                                       : static_cast<uint32_t>(EPOLLOUT | EPOLLRDHUP);
        if (c.eof && !c.out.empty()) event.events = EPOLLOUT;
        event.data.fd = c.fd;
        epoll_ctl(epoll_fd, op, c.fd, &event);
    }

    void uncount(Connection& c) {
        if (!c.counted) return;
        c.counted = false;
        --open;
        if (--per_client[c.peer] == 0) per_client.erase(c.peer);
        counters.connections_open = static_cast<int64_t>(open);
    }

    void close_connection(Connection& c) {
        uncount(c);
        const int fd = c.fd;
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
        ::close(fd);
        connections.erase(fd);
    }

    // Answered for the last time: half-closes once the answer is out, then drops what the client still sends.
    void linger(Connection& c) {
        ::shutdown(c.fd, SHUT_WR);
        c.phase = Phase::lingering;
        c.deadline = Clock::now() + kLinger;
        uncount(c);
        watch(c, EPOLL_CTL_MOD);
    }

    // Writes what the socket takes of a loop-made answer; the rest goes as it drains. False once closed.
    bool flush(Connection& c) {
        while (!c.out.empty()) {
            const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (n <= 0) {
                close_connection(c);
                return false;
            }
            c.out.erase(0, static_cast<size_t>(n));
        }
        if (c.out.empty() && c.close_after_write && c.phase != Phase::lingering) linger(c);
        else watch(c, EPOLL_CTL_MOD);
        return true;
    }

    bool send(Connection& c, const std::string& data) {
        if (c.out.empty()) c.write_deadline = Clock::now() + limits.write_timeout;
        c.out += data;
        return flush(c);
    }

    std::string refusal(int status, const std::string& message, const std::string& code, bool keep_alive) const {
        Response response;
        response.status = status;
        hooks.refuse(response, status, message, code);
        if (status == 429 || status == 503) response.set_header("Retry-After", "1");
        return head_of(response, response.body.size(), keep_alive) + response.body;
    }

    // Answers on the loop and closes: a request that cannot be read, a deadline missed, a limit reached.
    void refuse_and_close(Connection& c, int status, const std::string& message, const std::string& code) {
        c.close_after_write = true;
        send(c, refusal(status, message, code, false));
    }

    // After an answer: the connection waits for the next request, which may have come already.
    void ready_for_next(Connection& c) {
        c.in_body = false;
        c.phase = c.in.empty() ? Phase::idle : Phase::reading;
        c.deadline = Clock::now() + (c.in.empty() ? limits.idle_timeout : limits.header_timeout);
    }

    void accept_all() {
        for (;;) {
            sockaddr_storage address{};
            socklen_t size = sizeof address;
            const int fd =
                ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&address), &size, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED) continue;
                if ((errno == EMFILE || errno == ENFILE) && reserve_fd >= 0) {
                    // Out of descriptors: take the connection with the reserve one and close it, so that it does
                    // not sit in the backlog and the loop does not spin on it.
                    ::close(reserve_fd);
                    const int dropped = ::accept(listen_fd, nullptr, nullptr);
                    if (dropped >= 0) ::close(dropped);
                    reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
                    ++counters.rejected_no_descriptor;
                    if (dropped >= 0) continue;
                }
                return;
            }
            const int yes = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);  // each event-stream chunk leaves at once
            auto owned = std::make_unique<Connection>(fd, peer_address(address), limits.parser);
            Connection& c = *owned;
            c.deadline = Clock::now() + limits.header_timeout;
            connections.emplace(fd, std::move(owned));
            watch(c, EPOLL_CTL_ADD);
            const auto client = per_client.find(c.peer);
            const size_t of_client = client == per_client.end() ? 0 : client->second;
            if (open >= max_connections) {
                ++counters.rejected_connections;
                refuse_and_close(c, 503, "the server has too many open connections; retry later",
                                 "too_many_connections");
            } else if (limits.max_connections_per_client > 0 && of_client >= limits.max_connections_per_client) {
                ++counters.rejected_client_connections;
                refuse_and_close(c, 503, "this client address has too many open connections; retry later",
                                 "too_many_connections");
            } else {
                c.counted = true;
                ++open;
                ++per_client[c.peer];
                counters.connections_open = static_cast<int64_t>(open);
            }
        }
    }

    // Takes what the socket has (at most a few reads, so that one client cannot hold the loop). False once
    // closed: the client closed its end, or the connection failed.
    bool read_input(Connection& c) {
        char buffer[16384];
        for (int reads = 0; reads < 4; ++reads) {
            const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, MSG_DONTWAIT);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
            if (n == 0 && !c.in.empty() && c.phase != Phase::lingering) {
                // Closed after sending (a half-close): answer what was sent, then close.
                c.eof = true;
                watch(c, EPOLL_CTL_MOD);
                return true;
            }
            if (n <= 0) {
                close_connection(c);
                return false;
            }
            if (c.phase != Phase::lingering) c.in.append(buffer, static_cast<size_t>(n));
        }
        return true;
    }

    // Reads requests out of the input while no answer is being written, answering each or handing it to a
    // worker (after which `c` belongs to the worker).
    void process(Connection& c) {
        while (c.out.empty() && c.phase != Phase::lingering && !c.in.empty()) {
            if (c.phase == Phase::idle) {
                c.phase = Phase::reading;
                c.deadline = Clock::now() + limits.header_timeout;
            }
            c.in.erase(0, c.parser.feed(c.in));
            switch (c.parser.state()) {
                case RequestParser::State::headers:
                    return;
                case RequestParser::State::body:
                    if (!c.in_body) start_body(c);
                    return;
                case RequestParser::State::failed:
                    return refuse_and_close(c, c.parser.error_status(), c.parser.error(),
                                            c.parser.error_status() == 413   ? "request_too_large"
                                            : c.parser.error_status() == 431 ? "request_header_fields_too_large"
                                                                             : "bad_request");
                case RequestParser::State::complete:
                    if (!dispatch(c)) return;
                    break;
            }
        }
    }

    void start_body(Connection& c) {
        c.in_body = true;
        const size_t length = c.parser.declared_length().value_or(limits.parser.max_body_bytes);
        // In floating point: a huge configured body limit must not overflow into a short deadline.
        const double seconds = static_cast<double>(length) / static_cast<double>(std::max<size_t>(limits.min_body_rate, 1));
        c.deadline = Clock::now() + limits.body_timeout +
                     std::chrono::milliseconds(static_cast<int64_t>(std::min(seconds, 7.0 * 86400.0) * 1000.0));
        // The client waits for this before it sends the body; 25 bytes always fit a socket's empty buffer.
        if (c.parser.expects_continue() && c.in.empty()) {
            constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
            [[maybe_unused]] const ssize_t n = ::send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        }
    }

    // A request read whole: answered here (true, `c` still the loop's) or handed to a worker (false).
    bool dispatch(Connection& c) {
        const bool keep_alive = c.parser.keep_alive() && !stopping && !c.eof;
        Request request = c.parser.take();
        request.peer = c.peer;
        const Lane lane = hooks.lane(request);
        if (lane == Lane::loop) {
            Response response;
            run_route(request, response);
            std::string answer = head_of(response, response.body.size(), keep_alive) + response.body;
            hooks.answered(request, response.status);
            return answer_here(c, answer, keep_alive);
        }
        {
            std::lock_guard lock(mutex);
            std::deque<Job>& queue = lane == Lane::probe ? probes : jobs;
            // Jobs that idle workers are about to take do not wait.
            const size_t idle = lane == Lane::probe ? 0 : limits.workers - static_cast<size_t>(counters.busy.load());
            if (queue.size() < limits.max_waiting + idle) {
                epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
                auto it = connections.find(c.fd);
                queue.push_back({std::move(it->second), std::move(request), keep_alive});
                connections.erase(it);
                counters.waiting = static_cast<int64_t>(jobs.size());
                work.notify_all();
                return false;
            }
        }
        ++counters.rejected_busy;
        std::string answer = refusal(429, "the server is busy: " + std::to_string(limits.max_waiting) +
                                              " requests are waiting already; retry later",
                                     "rate_limit_exceeded", keep_alive);
        hooks.answered(request, 429);
        return answer_here(c, answer, keep_alive);
    }

    bool answer_here(Connection& c, const std::string& answer, bool keep_alive) {
        c.close_after_write = !keep_alive;
        if (!send(c, answer) || c.phase == Phase::lingering || c.close_after_write) return false;
        ready_for_next(c);
        return true;
    }

    void run_route(const Request& request, Response& response) const {
        try {
            hooks.handle(request, response);
        } catch (const std::exception& error) {
            response = Response{};
            response.status = 500;
            hooks.refuse(response, 500, error.what(), "internal_error");
        } catch (...) {
            response = Response{};
            response.status = 500;
            hooks.refuse(response, 500, "internal error", "internal_error");
        }
    }

    // ---- workers ----------------------------------------------------------------------------------------------

    void work_loop(bool probe) {
        std::deque<Job>& queue = probe ? probes : jobs;
        for (;;) {
            Job job;
            {
                std::unique_lock lock(mutex);
                work.wait(lock, [&] { return quit || !queue.empty(); });
                if (queue.empty()) return;
                job = std::move(queue.front());
                queue.pop_front();
                ++busy;
                counters.waiting = static_cast<int64_t>(jobs.size());
                if (!probe) ++counters.busy;
            }
            Connection& c = *job.connection;
            set_blocking(c.fd, true);
            const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(limits.write_timeout).count();
            const timeval tv{static_cast<time_t>(timeout / 1000000), static_cast<suseconds_t>(timeout % 1000000)};
            setsockopt(c.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            Response response;
            run_route(job.request, response);
            bool keep_alive = job.keep_alive && !stopping;
            bool written;
            if (response.stream) {
                written = send_all(c.fd, head_of(response, std::nullopt, keep_alive));
                ChunkedSink sink(c.fd);
                written = written && response.stream(sink) && send_all(c.fd, "0\r\n\r\n");
            } else {
                written = send_all(c.fd, head_of(response, response.body.size(), keep_alive) + response.body);
            }
            hooks.answered(job.request, response.status);
            set_blocking(c.fd, false);
            c.keep_alive = written && keep_alive;
            {
                std::lock_guard lock(mutex);
                returned.push_back(std::move(job.connection));
                --busy;
                if (!probe) --counters.busy;
            }
            wake();
        }
    }

    // A connection back from a worker: the next request, or closed.
    void take_back(std::unique_ptr<Connection> owned) {
        Connection& c = *owned;
        connections.emplace(c.fd, std::move(owned));
        watch(c, EPOLL_CTL_ADD);
        if (!c.keep_alive || stopping) {
            close_connection(c);
            return;
        }
        ready_for_next(c);
        process(c);
    }

    // ---- the loop -------------------------------------------------------------------------------------------

    void on_event(int fd, uint32_t events) {
        Connection* c = find(fd);
        // Hung up with nothing left to send or read: done.
        if (c && (events & (EPOLLHUP | EPOLLERR)) && c->out.empty() && (c->eof || c->phase == Phase::lingering)) {
            return close_connection(*c);
        }
        if (c && (events & EPOLLOUT) && !c->out.empty()) {
            if (!flush(*c)) return;
            if (c->out.empty() && c->phase != Phase::lingering) process(*c);
        }
        c = find(fd);
        if (c && !c->eof && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
            if (!read_input(*c)) return;
            process(*c);
            // A half-closed client whose input ended before a whole request: nothing more will come.
            c = find(fd);
            if (c && c->eof && c->out.empty() && c->phase != Phase::lingering) close_connection(*c);
        }
    }

    void check_deadlines() {
        const auto now = Clock::now();
        std::vector<int> due;
        for (const auto& [fd, c] : connections) {
            if (!c->out.empty() ? now >= c->write_deadline : now >= c->deadline) due.push_back(fd);
        }
        for (const int fd : due) {
            Connection& c = *connections.at(fd);
            if (!c.out.empty() || c.phase == Phase::lingering) {
                close_connection(c);
            } else if (c.phase == Phase::idle) {
                ++counters.closed_idle;
                close_connection(c);
            } else {
                ++(c.in_body ? counters.timed_out_body : counters.timed_out_header);
                refuse_and_close(c, 408, c.in_body ? "the request body was not sent in time"
                                                   : "the request headers were not sent in time",
                                 "request_timeout");
            }
        }
    }

    void begin_stop() {
        if (listening) {
            epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
            ::close(listen_fd);
            listen_fd = -1;
            listening = false;
        }
        // Connections between requests, or in one not read whole yet, are closed; those with a worker come back
        // and are closed then.
        std::vector<int> all;
        for (const auto& entry : connections) all.push_back(entry.first);
        for (const int fd : all) close_connection(*connections.at(fd));
    }

    void serve() {
        for (size_t i = 0; i < limits.workers; ++i) workers.emplace_back([this] { work_loop(false); });
        workers.emplace_back([this] { work_loop(true); });
        epoll_event events[256];
        auto next_check = Clock::now();
        for (;;) {
            if (stopping) {
                begin_stop();
                std::lock_guard lock(mutex);
                if (jobs.empty() && probes.empty() && busy == 0 && returned.empty()) break;
            }
            const int n = epoll_wait(epoll_fd, events, 256, kTickMs);
            for (int i = 0; i < n; ++i) {
                const int fd = events[i].data.fd;
                if (fd == listen_fd) {
                    accept_all();
                } else if (fd == wake_fd) {
                    uint64_t count;
                    [[maybe_unused]] const ssize_t r = ::read(wake_fd, &count, sizeof count);
                    std::vector<std::unique_ptr<Connection>> back;
                    {
                        std::lock_guard lock(mutex);
                        back.swap(returned);
                    }
                    for (auto& c : back) take_back(std::move(c));
                } else {
                    on_event(fd, events[i].events);
                }
            }
            if (Clock::now() >= next_check) {
                check_deadlines();
                next_check = Clock::now() + std::chrono::milliseconds(kTickMs);
            }
        }
        {
            std::lock_guard lock(mutex);
            quit = true;
        }
        work.notify_all();
        for (std::thread& t : workers) t.join();
        workers.clear();
    }
};

Transport::Transport(TransportLimits limits, Hooks hooks) : loop_(std::make_unique<Loop>(limits, std::move(hooks))) {}

Transport::~Transport() = default;

const TransportCounters& Transport::counters() const { return loop_->counters; }

int Transport::bind(const std::string& host, int port) {
    Loop& l = *loop_;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    const std::string service = std::to_string(port);
    const int error = getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
    if (error != 0) throw std::runtime_error("cannot listen on " + host + ":" + service + ": " + gai_strerror(error));
    std::string why = "no address";
    for (addrinfo* a = found; a && l.listen_fd < 0; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        // SO_REUSEADDR only: SO_REUSEPORT would let a second server share a busy port silently.
        const int yes = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) {
            l.listen_fd = fd;
        } else {
            why = std::strerror(errno);
            ::close(fd);
        }
    }
    freeaddrinfo(found);
    if (l.listen_fd < 0) throw std::runtime_error("cannot listen on " + host + ":" + service + ": " + why);

    // Each connection is a descriptor: raise the soft limit toward the hard one, and cap connections to fit.
    rlimit files{};
    getrlimit(RLIMIT_NOFILE, &files);
    const rlim_t wanted = static_cast<rlim_t>(l.limits.max_connections) + 2 * kSpareDescriptors;
    if (files.rlim_cur < wanted) {
        files.rlim_cur = std::min(wanted, files.rlim_max);
        setrlimit(RLIMIT_NOFILE, &files);
        getrlimit(RLIMIT_NOFILE, &files);
    }
    l.max_connections = std::min<size_t>(l.limits.max_connections,
                                         files.rlim_cur > kSpareDescriptors ? files.rlim_cur - kSpareDescriptors : 1);

    l.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    l.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l.reserve_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (l.epoll_fd < 0 || l.wake_fd < 0) throw std::runtime_error(std::string("cannot start: ") + std::strerror(errno));
    for (const int fd : {l.listen_fd, l.wake_fd}) {
        epoll_event event{};
        event.events = EPOLLIN;
        event.data.fd = fd;
        epoll_ctl(l.epoll_fd, EPOLL_CTL_ADD, fd, &event);
    }
    sockaddr_storage address{};
    socklen_t size = sizeof address;
    getsockname(l.listen_fd, reinterpret_cast<sockaddr*>(&address), &size);
    return ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(address).sin6_port
                                               : reinterpret_cast<const sockaddr_in&>(address).sin_port);
}

void Transport::run() {
    if (loop_->listen_fd < 0) throw std::runtime_error("Transport::run before bind");
    loop_->serve();
}

void Transport::stop() {
    loop_->stopping = true;
    if (loop_->wake_fd >= 0) loop_->wake();
}

}  // namespace cellm::server::http
