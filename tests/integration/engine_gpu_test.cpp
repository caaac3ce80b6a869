// The engine's GPU blocks on the CUDA driver TEST DOUBLE (tests/cuda_double): blocks registered as
// CUDA memory commit byte-exact, eager pieces land through the driver's copy (never a CPU store
// into device memory), checksums read GPU blocks through the bounded staging buffer and still
// catch corruption, and registrations the host cannot honour are refused with the reason.
// Two engines in one process over UCX loopback, each from its own Params (PACT_CUDA_DRIVER names
// the double). The double's device memory is host memory: UCX moves it as host memory here; only
// a GPU machine shows UCX writing real device memory (ci/gpu-check.sh).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "cuda/driver.h"
#include "tests/integration/engine_pair.h"

namespace pact::engine {
namespace {

using test::released;
using test::succeeded;
using test::take;
using test::makeEngine;

const char* kDouble = PACT_CUDA_DOUBLE_PATH;

long doubleCopies() {
  static auto fn = reinterpret_cast<long (*)()>(dlsym(dlopen(kDouble, RTLD_NOW | RTLD_LOCAL), "pact_cuda_double_copies"));
  return fn();
}

const cuda::Driver& driver() { return cuda::Driver::instance(kDouble); }

// A receiver and a sender whose buffers are "device memory" of the double (or host memory).
struct GpuPair {
  std::unique_ptr<Engine> rx, tx;
  uint64_t peer = 0;
  uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  std::vector<uint8_t> hostSrc;
  Registration* srcMr = nullptr;
  Registration* dstMr = nullptr;
  size_t bytes;

  GpuPair(EnvMap env, size_t n, bool gpuSource = true) : bytes(n) {
    env.emplace("PACT_CUDA_DRIVER", kDouble);
    rx = makeEngine("rx", env, true);
    tx = makeEngine("tx", env, false);
    if (!rx || !tx) return;
    std::string address;
    EXPECT_TRUE(take(rx->address(), &address));
    EXPECT_TRUE(take(tx->connect(address, 10000), &peer));
    auto d = driver().allocate(0, n);
    EXPECT_TRUE(d.ok());
    dst = static_cast<uint8_t*>(*d);
    if (gpuSource) {
      auto s = driver().allocate(0, n);
      EXPECT_TRUE(s.ok());
      src = static_cast<uint8_t*>(*s);
    } else {
      hostSrc.resize(n);
      src = hostSrc.data();
    }
    MemorySpec from{src, n, gpuSource ? ucx::MemoryType::kCuda : ucx::MemoryType::kHost};
    MemorySpec to{dst, n, ucx::MemoryType::kCuda, 0};
    EXPECT_TRUE(take(tx->registerMemory(from), &srcMr));
    EXPECT_TRUE(take(rx->registerMemory(to), &dstMr));
  }
  ~GpuPair() {
    if (rx) rx->deregister(dstMr).ignore();
    if (tx) tx->deregister(srcMr).ignore();
    rx.reset();
    tx.reset();
    if (dst) ignore(driver().release(dst));
    if (src && hostSrc.empty()) ignore(driver().release(src));
  }

  std::pair<Status, Status> move(const char* cls, uint64_t request, uint64_t length) {
    // The double's device memory is host-addressable: filled and checked as host memory.
    std::string sendError;
    return test::moveOnce(*rx, *tx, peer, {srcMr, src}, {dstMr, dst}, cls, request, 0, length, &sendError);
  }
};

TEST(EngineGpu, GpuBlocksCommitByteExact) {
  GpuPair p({}, 8 << 20);
  ASSERT_TRUE(p.rx && p.tx && p.srcMr && p.dstMr);
  // An eager piece arrives in UCX's host buffer: it reaches the block through the driver's copy.
  const long before = doubleCopies();
  EXPECT_EQ(p.move("KV", 1, 4096), std::make_pair(Status::kOk, Status::kOk));
  EXPECT_GE(doubleCopies() - before, 1) << "the eager piece went through cuMemcpyHtoD";
  // Large transfers: 16 pieces of 512 KiB, each a rendezvous straight into the block (UCX writes
  // it; no driver copy, no CPU store).
  const long large = doubleCopies();
  for (uint64_t r = 2; r < 5; ++r) EXPECT_EQ(p.move("KV", r, 8 << 20), std::make_pair(Status::kOk, Status::kOk));
  EXPECT_EQ(doubleCopies() - large, 0) << "rendezvous pieces were copied by the driver";
}

TEST(EngineGpu, HostSourceIntoGpuBlocks) {
  GpuPair p({}, 2 << 20, false);
  ASSERT_TRUE(p.rx && p.tx && p.srcMr && p.dstMr);
  EXPECT_EQ(p.move("KV", 1, 2 << 20), std::make_pair(Status::kOk, Status::kOk));
  EXPECT_EQ(p.move("KV", 2, 100), std::make_pair(Status::kOk, Status::kOk));
}

TEST(EngineGpu, VerifyReadsGpuBlocksThroughStaging) {
  GpuPair p({{"PACT_TC_KV", "verify=crc32c"}}, 3 << 20);
  ASSERT_TRUE(p.rx && p.tx && p.srcMr && p.dstMr);
  const long before = doubleCopies();
  EXPECT_EQ(p.move("KV", 1, 3 << 20), std::make_pair(Status::kOk, Status::kOk));
  // Each side reads 3 MiB through 1 MiB of staging: at least 3 driver copies each.
  EXPECT_GE(doubleCopies() - before, 6);
}

TEST(EngineGpu, CorruptionOfAGpuBlockIsCaught) {
  GpuPair p({{"PACT_TC_KV", "verify=xxh3,retries=0"}, {"PACT_FAULT", "corrupt=1,seed=3"}}, 1 << 20);
  ASSERT_TRUE(p.rx && p.tx && p.srcMr && p.dstMr);
  const auto r = p.move("KV", 1, 1 << 20);
  EXPECT_EQ(r.first, Status::kChecksum);
  EXPECT_EQ(p.rx->stats()[telemetry::kChecksumFailures], 1u);
}

TEST(EngineGpu, RegistrationsTheHostCannotHonourAreRefused) {
  auto none = makeEngine("none", {{"PACT_CUDA_DRIVER", "libpact-no-such-cuda-driver.so.1"}}, false);
  ASSERT_NE(none, nullptr);
  auto mem = driver().allocate(0, 1 << 16);
  ASSERT_TRUE(mem.ok());
  // The status of r and, when it failed, whether its message names `text`.
  const auto refused = [](const Result<Registration*>& r, Status s, const std::string& text) {
    if (r.status() != s) return ::testing::AssertionFailure() << "status " << statusName(r.status());
    if (!r.ok() && r.error().message.find(text) == std::string::npos)
      return ::testing::AssertionFailure() << "message: " << r.error().message;
    return ::testing::AssertionSuccess();
  };
  EXPECT_TRUE(refused(none->registerMemory({*mem, 1 << 16, ucx::MemoryType::kCuda}), Status::kUnsupported, "CUDA"));

  auto e = makeEngine("e", {{"PACT_CUDA_DRIVER", kDouble}}, false);
  ASSERT_NE(e, nullptr);
  std::vector<uint8_t> host(1 << 16);
  EXPECT_TRUE(refused(e->registerMemory({host.data(), host.size(), ucx::MemoryType::kCuda}),
                      Status::kInvalidArgument, "device memory"));
  EXPECT_TRUE(refused(e->registerMemory({*mem, 1 << 16, ucx::MemoryType::kCuda, 3}), Status::kInvalidArgument,
                      "not device 3"));
  EXPECT_TRUE(refused(e->registerMemory({*mem, 1 << 17, ucx::MemoryType::kCuda}), Status::kOutOfRange, ""));
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  EXPECT_TRUE(refused(e->registerMemory({*mem, 4096, ucx::MemoryType::kCuda, 0, pipeFds[0], 0}),
                      Status::kInvalidArgument, "neither a dmabuf nor a mappable file"));
  close(pipeFds[0]);
  close(pipeFds[1]);
  auto fd = driver().exportDmabuf(*mem, 1 << 16);
  ASSERT_TRUE(fd.ok());
  Registration* mr = nullptr;
  ASSERT_TRUE(take(e->registerMemory({*mem, 1 << 16, ucx::MemoryType::kCuda, 0, *fd, 0}), &mr));
  close(*fd);  // nothing keeps it
  EXPECT_TRUE(succeeded(e->deregister(mr)));
  e.reset();
  EXPECT_EQ(driver().release(*mem), Status::kOk);
}

}  // namespace
}  // namespace pact::engine
