// A fixed set of worker threads, started with the backend instance and reused by every op of every step.
// Work arrives as a task count; threads (the caller included) take tasks from a shared counter, so uneven
// tasks still keep every core busy. Idle workers spin briefly (ops of one step follow each other within
// microseconds) and then sleep until the next op.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace cellm::openblas {

class ThreadPool {
public:
    explicit ThreadPool(int threads);  // threads >= 1; the caller of run counts as one
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return static_cast<int>(workers_.size()) + 1; }

    // Calls body(task, thread) for every task in [0, n_tasks) and returns when all have finished; `thread` is
    // in [0, size()) and no two concurrent calls share one, so it can index per-thread scratch. The first
    // exception a task throws is rethrown here (the remaining tasks are skipped).
    template <class Body>
    void run(int64_t n_tasks, Body&& body) {
        if (n_tasks <= 0) return;
        if (n_tasks == 1 || workers_.empty()) {
            for (int64_t t = 0; t < n_tasks; ++t) body(t, 0);
            return;
        }
        dispatch(n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<Body*>(ctx))(task, thread); }, &body);
    }

private:
    using TaskFn = void (*)(void* ctx, int64_t task, int thread);
    void dispatch(int64_t n_tasks, TaskFn fn, void* ctx);
    void work(int thread);        // takes tasks of the current job until none are left
    void worker_loop(int thread);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<bool> stopping_{false};
    std::atomic<uint64_t> generation_{0};  // bumped once per job; workers watch it
    std::atomic<int64_t> next_task_{0};
    std::atomic<int> busy_{0};             // workers still inside the current job
    int64_t n_tasks_ = 0;
    TaskFn fn_ = nullptr;
    void* ctx_ = nullptr;
    std::atomic<bool> failed_{false};
    std::exception_ptr error_;
};

}  // namespace cellm::openblas
