// pact-gpu-verify: what verify=crc32c|xxh3 costs on GPU blocks, whose bytes the digest reads through
// the engine's 1 MiB host staging buffer (docs/gpu.md), against host blocks.
//   1. digest only: GB/s of the digest over S bytes of host memory, and over S bytes of device
//      memory through staging (driver copy per MiB, then the digest), interleaved, --rounds times;
//   2. end to end: goodput of --count transfers of S bytes between two engines in this process
//      over UCX loopback, host blocks vs GPU blocks, with verify, interleaved, --rounds times.
// The driver is PACT_CUDA_DRIVER's (the real one on a GPU machine; on this machine the TEST DOUBLE,
// whose "device memory" is host memory, so its driver copy is a memcpy: the figure then is the
// cost of the staging pass itself, and a GPU adds its PCIe device-to-host time to it).
// Prints one line per figure and a RESULT line with medians and ratios (staged/host).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "cuda/driver.h"
#include "engine/engine.h"
#include "transport/memory.h"
#include "transport/memory_copy.h"

namespace {

using namespace pact;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::unique_ptr<engine::Engine> makeEngine(const char* name, const Params& p, bool listen) {
  engine::EngineConfig c;
  c.name = name;
  if (listen) c.listenIp = "127.0.0.1";
  c.progressThread = true;
  auto e = engine::Engine::create(c, p);
  if (!e) {
    std::fprintf(stderr, "pact-gpu-verify: engine: %s\n", e.error().message.c_str());
    return nullptr;
  }
  return std::move(e).value();
}

// GB/s of `count` verified transfers of `size` bytes from src into dst (both registered).
double endToEnd(engine::Engine& rx, engine::Engine& tx, uint64_t peer, engine::Registration* src,
                engine::Registration* dst, size_t size, int count, uint64_t* request) {
  const auto t0 = Clock::now();
  for (int i = 0; i < count; ++i) {
    const TransferKey key{++*request, 1, 0, 0};
    const engine::BlockRef to{dst, 0, size}, from{src, 0, size};
    engine::XferInfo a, b;
    auto r = rx.expect(key, std::span(&to, 1), 0, "KV");
    auto t = r ? tx.send(peer, key, std::span(&from, 1), 0, "KV") : Result<uint64_t>(r.error());
    Result<void> done = t ? rx.wait(*r, 30000, &a) : Result<void>(t.error());
    if (done) done = tx.wait(*t, 30000, &b);
    if (done && a.result != Status::kOk) done = Error{a.result, "the receiver's result"};
    if (!done) {
      std::fprintf(stderr, "pact-gpu-verify: transfer failed: %s (%s)\n", done.error().message.c_str(),
                   statusName(done.status()));
      return 0;
    }
    rx.release(*r).ignore();
    tx.release(*t).ignore();
  }
  return static_cast<double>(size) * count / seconds(t0, Clock::now()) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pact-gpu-verify: the cost of verify on GPU blocks (staging) against host blocks"};
  size_t size = 8 << 20;
  int count = 16, rounds = 5;
  std::string verify = "crc32c";
  app.add_option("--size", size, "bytes per transfer / digest");
  app.add_option("--count", count, "transfers per end-to-end measurement");
  app.add_option("--rounds", rounds, "interleaved rounds (medians reported)");
  app.add_option("--verify", verify, "crc32c or xxh3")->check(CLI::IsMember({"crc32c", "xxh3"}));
  CLI11_PARSE(app, argc, argv);
  auto params = Params::fromProcessEnv();
  if (!params.ok()) {
    std::fprintf(stderr, "pact-gpu-verify: %s\n", params.error().message.c_str());
    return 2;
  }
  const cuda::Driver& d = cuda::Driver::instance(params->cuda_driver);
  if (!d.available()) {
    std::printf("pact-gpu-verify: skipped: %s\n", d.why().c_str());
    return 77;
  }
  std::printf("driver %s%s; size %zu, count %d, rounds %d, verify %s\n", d.path().c_str(),
              d.hostBacked() ? " (TEST DOUBLE: its driver copy is a memcpy)" : "", size, count, rounds,
              verify.c_str());
  const Verify kind = verify == "xxh3" ? Verify::kXxh3 : Verify::kCrc32c;
  std::vector<uint8_t> hostA(size), hostB(size), staging(engine::kVerifyStagingBytes);
  auto gpuA = d.allocate(0, size);
  auto gpuB = d.allocate(0, size);
  if (!gpuA.ok() || !gpuB.ok()) return 1;
  for (size_t i = 0; i < size; ++i) hostA[i] = static_cast<uint8_t>(i * 7);
  ignore(transport::copyIn(&d, *gpuA, hostA.data(), size, ucx::MemoryType::kCuda));

  // 1. digest only.
  std::vector<double> hostDigest, stagedDigest;
  for (int r = 0; r < rounds; ++r) {
    for (int which = 0; which < 2; ++which) {
      Digest g(kind);
      const auto t0 = Clock::now();
      if (which == 0) {
        g.update(hostA.data(), size);
      } else {
        ignore(transport::readStaged(&d, *gpuA, size, ucx::MemoryType::kCuda, staging,
                                     [&](const uint8_t* p, size_t n) { g.update(p, n); }));
      }
      const double gbs = static_cast<double>(size) / seconds(t0, Clock::now()) / 1e9;
      (which == 0 ? hostDigest : stagedDigest).push_back(gbs);
      volatile uint64_t sink = g.value();
      (void)sink;
    }
  }
  std::printf("digest: host %.2f GB/s, GPU through staging %.2f GB/s (medians)\n", median(hostDigest),
              median(stagedDigest));

  // 2. end to end, verify on: host blocks vs GPU blocks.
  EnvMap env = processPactEnv();
  env["PACT_TC_KV"] = "verify=" + verify;
  if (env.find("PACT_NET_DEVICES") == env.end()) env["PACT_NET_DEVICES"] = "lo";
  auto p2 = Params::load(env);
  if (!p2.ok()) return 2;
  auto rx = makeEngine("rx", *p2, true);
  auto tx = makeEngine("tx", *p2, false);
  if (!rx || !tx) return 1;
  auto address = rx->address();
  auto connected = address ? tx->connect(*address, 10000) : Result<uint64_t>(address.error());
  if (!connected) {
    std::fprintf(stderr, "pact-gpu-verify: connect: %s\n", connected.error().message.c_str());
    return 1;
  }
  const uint64_t peer = *connected;
  auto hsr = tx->registerMemory({hostA.data(), size});
  auto hdr = rx->registerMemory({hostB.data(), size});
  auto gsr = tx->registerMemory({*gpuA, size, ucx::MemoryType::kCuda});
  auto gdr = rx->registerMemory({*gpuB, size, ucx::MemoryType::kCuda});
  for (const auto* r : {&hsr, &hdr, &gsr, &gdr}) {
    if (!*r) {
      std::fprintf(stderr, "pact-gpu-verify: register: %s\n", r->error().message.c_str());
      return 1;
    }
  }
  engine::Registration *hs = *hsr, *hd = *hdr, *gs = *gsr, *gd = *gdr;
  uint64_t request = 0;
  (void)endToEnd(*rx, *tx, peer, hs, hd, size, 2, &request);  // warm-up: wireup, first rendezvous
  std::vector<double> hostE2e, gpuE2e;
  for (int r = 0; r < rounds; ++r) {
    hostE2e.push_back(endToEnd(*rx, *tx, peer, hs, hd, size, count, &request));
    gpuE2e.push_back(endToEnd(*rx, *tx, peer, gs, gd, size, count, &request));
  }
  std::printf("end to end (verify=%s): host blocks %.2f GB/s, GPU blocks %.2f GB/s (medians)\n",
              verify.c_str(), median(hostE2e), median(gpuE2e));
  std::printf("RESULT digest_host_gbs=%.2f digest_staged_gbs=%.2f digest_ratio=%.2f e2e_host_gbs=%.2f "
              "e2e_gpu_gbs=%.2f e2e_ratio=%.2f\n",
              median(hostDigest), median(stagedDigest), median(stagedDigest) / median(hostDigest),
              median(hostE2e), median(gpuE2e), median(gpuE2e) / median(hostE2e));
  rx->deregister(hd).ignore();
  rx->deregister(gd).ignore();
  tx->deregister(hs).ignore();
  tx->deregister(gs).ignore();
  rx.reset();
  tx.reset();
  ignore(d.release(*gpuA));
  ignore(d.release(*gpuB));
  return 0;
}
