// The engine's one lock: a mutex that polls briefly before it sleeps, and knows whether a thread
// sleeps waiting for it.
//
// A busy engine's progress thread holds the lock for most of its spin (PACT_PROGRESS_SPIN): it
// polls UCX with the lock held and lets go only between rounds, for a sched_yield. With a plain
// std::mutex every application call that met it there (pact_expect, pact_send, pact_xfer_wait,
// pact_xfer_release) slept in the kernel and needed a futex wake-up to get out, and the spinning
// thread often took the lock back before the woken caller ran: about 10 futex calls per 16 KiB
// transfer in pact-kv-c-bench, half of its send-to-commit time (docs/performance.md, "KV
// transfer beside Mooncake and NIXL"). Now lock() polls with try_lock for up to the spin set by
// setSpin() (the holder lets go within microseconds), and only then sleeps; the progress thread asks
// contended() between rounds and stands aside while a thread sleeps on the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>

namespace pact::engine {

class EngineMutex {
 public:
  // How long lock() polls before it sleeps (0: it sleeps at once). Set before the threads that
  // take the lock start.
  void setSpin(std::chrono::microseconds spin) { spin_ = spin; }

  void lock() {
    if (mu_.try_lock()) return;
    if (spin_.count() > 0) {
      const auto until = std::chrono::steady_clock::now() + spin_;
      do {
        for (int i = 0; i < 32; ++i) {
          relax();
          if (mu_.try_lock()) return;
        }
      } while (std::chrono::steady_clock::now() < until);
    }
    sleepers_.fetch_add(1, std::memory_order_relaxed);
    mu_.lock();
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  void unlock() { mu_.unlock(); }
  // A thread sleeps in lock().
  bool contended() const { return sleepers_.load(std::memory_order_relaxed) > 0; }

 private:
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::mutex mu_;
  std::atomic<int> sleepers_{0};
  std::chrono::microseconds spin_{0};
};

using EngineLock = std::unique_lock<EngineMutex>;

}  // namespace pact::engine
