#include "thread_pool.hpp"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CELLM_CPU_RELAX() _mm_pause()
#else
#define CELLM_CPU_RELAX() std::this_thread::yield()
#endif

namespace cellm::openblas {

namespace {

// One poll of a busy-wait. Every so often it yields, so that a waiter never starves the thread it waits for
// when the machine has fewer free cores than the pool has threads.
void relax(int& polls) {
    if (++polls % 64 == 0) std::this_thread::yield();
    else CELLM_CPU_RELAX();
}

// How long an idle worker keeps polling before it sleeps: long enough to span the gap between two ops of a
// step (and most of the host's sampling between decode steps), short enough not to burn a core when idle.
constexpr auto spin_time = std::chrono::microseconds(2000);
}  // namespace

ThreadPool::ThreadPool(int threads) {
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_.store(true, std::memory_order_relaxed);  // the generation's release publishes it
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& w : workers_) w.join();
}

void ThreadPool::work(int thread) {
    for (;;) {
        const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (task >= n_tasks_ || failed_.load(std::memory_order_relaxed)) return;
        try {
            fn_(ctx_, task, thread);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!failed_.exchange(true)) error_ = std::current_exception();
        }
    }
}

void ThreadPool::dispatch(int64_t n_tasks, TaskFn fn, void* ctx) {
    n_tasks_ = n_tasks;
    fn_ = fn;
    ctx_ = ctx;
    failed_.store(false, std::memory_order_relaxed);
    error_ = nullptr;
    next_task_.store(0, std::memory_order_relaxed);
    busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    {
        // Under the lock so a worker about to sleep cannot miss the new generation.
        std::lock_guard<std::mutex> lock(mutex_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(0);
    int polls = 0;
    while (busy_.load(std::memory_order_acquire) != 0) relax(polls);
    if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop(int thread) {
    uint64_t seen = 0;
    for (;;) {
        // Spin, then sleep, until a new job (or shutdown) is published.
        const auto deadline = std::chrono::steady_clock::now() + spin_time;
        int polls = 0;
        while (generation_.load(std::memory_order_acquire) == seen) {
            relax(polls);
            if (polls % 256 == 0 && std::chrono::steady_clock::now() > deadline) {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            }
        }
        seen = generation_.load(std::memory_order_acquire);
        // Not under the mutex: dispatch holds it while it publishes a job, and a worker that saw the job at once
        // slept in the kernel until dispatch let go (two thirds of the futex calls of an 8-session bench).
        if (stopping_.load(std::memory_order_relaxed)) return;
        work(thread);
        busy_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace cellm::openblas
