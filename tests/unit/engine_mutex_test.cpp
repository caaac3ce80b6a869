// EngineMutex: a lock that polls before it sleeps, and tells whether a thread sleeps on it (the
// engine's progress thread stands aside then). Real threads; every wait is bounded.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "engine/engine_mutex.h"

namespace pact::engine {
namespace {

using namespace std::chrono_literals;

// Polls pred until it holds or 10 s passed.
template <typename Pred>
bool eventually(Pred pred) {
  const auto limit = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > limit) return false;
    std::this_thread::yield();
  }
  return true;
}

TEST(EngineMutex, ExcludesWithAndWithoutTheSpin) {
  for (auto spin : {0us, 50us}) {
    EngineMutex mu;
    mu.setSpin(spin);
    uint64_t count = 0;  // unsynchronised but for the lock
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 20000; ++i) {
          std::lock_guard lock(mu);
          ++count;
        }
      });
    for (auto& t : threads) t.join();
    EXPECT_EQ(count, 80000u) << "spin " << spin.count() << " us";
    EXPECT_FALSE(mu.contended());
  }
}

TEST(EngineMutex, ASleepingWaiterShowsAsContendedUntilItHasTheLock) {
  EngineMutex mu;  // no spin: a waiter sleeps at once
  mu.lock();
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    std::lock_guard lock(mu);
    got = true;
  });
  ASSERT_TRUE(eventually([&] { return mu.contended(); })) << "the waiter never showed";
  EXPECT_FALSE(got);
  mu.unlock();
  ASSERT_TRUE(eventually([&] { return got.load(); }));
  waiter.join();
  EXPECT_FALSE(mu.contended());
}

TEST(EngineMutex, APollingWaiterIsNotContendedAndTakesTheLockWhenFreed) {
  EngineMutex mu;
  mu.setSpin(std::chrono::duration_cast<std::chrono::microseconds>(60s));  // polls throughout
  mu.lock();
  std::atomic<bool> started{false}, got{false};
  std::thread waiter([&] {
    started = true;
    std::lock_guard lock(mu);
    got = true;
  });
  ASSERT_TRUE(eventually([&] { return started.load(); }));
  for (int i = 0; i < 1000; ++i) {
    ASSERT_FALSE(mu.contended()) << "a polling waiter does not sleep";
    std::this_thread::yield();
  }
  EXPECT_FALSE(got);
  mu.unlock();
  ASSERT_TRUE(eventually([&] { return got.load(); })) << "the poller took the freed lock";
  waiter.join();
}

}  // namespace
}  // namespace pact::engine
