// How often a warm engine calls operator new per transfer: the data path is meant to run out of
// slabs and recycled nodes, so a steady stream of KV transfers between two engines allocates
// nothing once warm. The count is process-wide (both engines and their progress threads); UCX
// allocates with malloc and is not counted. Its own binary: it replaces the global operator new.
//
// PACT_ALLOC_TRACE=1 prints a backtrace of each allocation counted (for finding them).
// The replacements below pair malloc with free; GCC sees through them when it inlines.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "tests/integration/engine_pair.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<uint64_t> allocations{0};
bool tracing = false;

void* counted(size_t n, size_t align) {
  if (counting.load(std::memory_order_relaxed)) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (tracing) {
      void* frames[24];
      const int depth = ::backtrace(frames, 24);
      ::backtrace_symbols_fd(frames, depth, STDERR_FILENO);
      ::write(STDERR_FILENO, "--\n", 3);
    }
  }
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                              : std::malloc(n == 0 ? 1 : n);
  return p;
}
}  // namespace

void* operator new(size_t n) {
  if (void* p = counted(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = counted(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, std::align_val_t a) {
  if (void* p = counted(n, static_cast<size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) {
  if (void* p = counted(n, static_cast<size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted(n, 0); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted(n, 0); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace pact::engine::test {
namespace {

// Transfers of one class after a warm-up: the operator new calls of the measured ones.
uint64_t allocationsOver(const EnvMap& env, int warm, int measured, size_t bytes, size_t window) {
  Pair p(env, env, bytes, window);
  if (!p.rx || !p.tx) return ~uint64_t{0};
  uint64_t request = 1;
  for (int i = 0; i < warm; ++i) {
    auto [rx, tx] = p.move("KV", request++, 0, bytes);
    EXPECT_EQ(rx, Status::kOk);
    EXPECT_EQ(tx, Status::kOk);
  }
  tracing = std::getenv("PACT_ALLOC_TRACE") != nullptr;
  allocations = 0;
  counting = true;
  for (int i = 0; i < measured; ++i) {
    auto [rx, tx] = p.move("KV", request++, 0, bytes);
    if (rx != Status::kOk || tx != Status::kOk) {
      counting = false;
      ADD_FAILURE() << "transfer " << i << ": " << statusName(rx) << " / " << statusName(tx);
      break;
    }
  }
  counting = false;
  return allocations.load();
}

constexpr int kWarm = 64;
constexpr int kMeasured = 200;

// Steady state: the exactly-once tables (committed keys, generations) are full (a window of 32,
// smaller than the warm-up), so each new transfer's entry takes the node of the one forgotten.
void expectNonePerTransfer(const char* what, const EnvMap& env, size_t bytes) {
  const uint64_t n = allocationsOver(env, kWarm, kMeasured, bytes, 32);
  std::printf("[ allocations ] %s: %llu operator new calls over %d warm transfers\n", what,
              static_cast<unsigned long long>(n), kMeasured);
  EXPECT_EQ(n, 0u) << what << ": operator new calls over " << kMeasured << " warm transfers";
}

TEST(EngineAllocations, AWarmOrderedKvTransferAllocatesNothing) {
  expectNonePerTransfer("KV ordered, 64 KiB, eager offer", {}, 64 << 10);
  expectNonePerTransfer("KV ordered, 64 KiB, offer-advertise-pieces", {{"PACT_TC_KV", "eager=0"}},
                        64 << 10);
}

TEST(EngineAllocations, AWarmUnorderedKvTransferOverTwoLanesAllocatesNothing) {
  expectNonePerTransfer("KV unordered lanes=2 chunk=64K, 1 MiB",
                        {{"PACT_TC_KV", "unordered,lanes=2,chunk=64K"}}, 1 << 20);
}

// While the tables still grow (the default window of 65,536), they are the only thing that
// allocates: in the node pool's growing chunks and by doubling, so far less than once per transfer.
TEST(EngineAllocations, GrowingExactlyOnceTablesAllocateFarLessThanOncePerTransfer) {
  const uint64_t n = allocationsOver({}, kWarm, kMeasured, 64 << 10, EngineConfig{}.exactlyOnceWindow);
  std::printf("[ allocations ] KV ordered, 64 KiB, tables growing: %llu over %d transfers\n",
              static_cast<unsigned long long>(n), kMeasured);
  EXPECT_LE(n, static_cast<uint64_t>(kMeasured / 10));
}

}  // namespace
}  // namespace pact::engine::test
