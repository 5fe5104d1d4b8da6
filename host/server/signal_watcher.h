// SIGINT and SIGTERM for a server: the handler only writes a byte to a pipe (async-signal-safe); a thread of
// this object reads it and runs the shutdown, where locks and blocking are fine. The handlers are one-shot,
// so a second signal ends the process at once, for a shutdown that hangs. SIGPIPE is ignored meanwhile: a
// client that went away must be a failed write, not a dead server. One instance at a time.
#pragma once

#include <csignal>
#include <functional>
#include <thread>

namespace cellm::server {

class SignalWatcher {
public:
    // Installs the handlers and starts the thread, which calls `on_signal` once if a signal comes.
    explicit SignalWatcher(std::function<void()> on_signal);
    // Stops the thread (after on_signal has returned, if it runs) and restores the previous handlers.
    ~SignalWatcher();
    SignalWatcher(const SignalWatcher&) = delete;
    SignalWatcher& operator=(const SignalWatcher&) = delete;

private:
    int pipe_[2] = {-1, -1};
    struct sigaction previous_int_ {}, previous_term_ {}, previous_pipe_ {};
    std::thread thread_;
};

}  // namespace cellm::server
