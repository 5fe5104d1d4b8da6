#include "signal_watcher.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <unistd.h>

namespace cellm::server {

namespace {

constexpr char kSignalled = 's';
constexpr char kRelease = 'r';

// The handler's only state: where to write. Set before the handlers are installed, reset after removal.
volatile std::sig_atomic_t g_notify_fd = -1;

extern "C" void notify(int) {
    const int saved = errno;
    const char byte = kSignalled;
    [[maybe_unused]] const ssize_t written = write(g_notify_fd, &byte, 1);  // nothing to do if it fails
    errno = saved;
}

void install(int signo, void (*handler)(int), int flags, struct sigaction* previous) {
    struct sigaction action {};
    action.sa_handler = handler;
    action.sa_flags = flags;
    sigemptyset(&action.sa_mask);
    sigaction(signo, &action, previous);
}

}  // namespace

SignalWatcher::SignalWatcher(std::function<void()> on_signal) {
    if (pipe2(pipe_, O_CLOEXEC) != 0) {
        throw std::runtime_error(std::string("cannot create the signal pipe: ") + std::strerror(errno));
    }
    thread_ = std::thread([this, on_signal = std::move(on_signal)] {
        char byte = 0;
        ssize_t n = 0;
        do {
            n = read(pipe_[0], &byte, 1);
        } while (n < 0 && errno == EINTR);
        if (n == 1 && byte == kSignalled) on_signal();
    });
    g_notify_fd = pipe_[1];
    install(SIGINT, notify, SA_RESETHAND | SA_RESTART, &previous_int_);
    install(SIGTERM, notify, SA_RESETHAND | SA_RESTART, &previous_term_);
    install(SIGPIPE, SIG_IGN, 0, &previous_pipe_);
}

SignalWatcher::~SignalWatcher() {
    const char byte = kRelease;
    [[maybe_unused]] const ssize_t written = write(pipe_[1], &byte, 1);  // an empty pipe of our own takes it
    thread_.join();
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
    sigaction(SIGPIPE, &previous_pipe_, nullptr);
    g_notify_fd = -1;
    close(pipe_[0]);
    close(pipe_[1]);
}

}  // namespace cellm::server
