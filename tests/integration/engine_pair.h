// Two engines in one process over UCX loopback, each built from its own configuration (Params
// passed down, no global registry), driven through the internal engine API: a receiver and a
// sender connected to it, with one registered buffer each.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "tests/integration/engine_util.h"

namespace pact::engine::test {

using pact::test::fillPattern;
using pact::test::firstMismatch;

// r's value into *out, or a failure naming r's status and message.
template <typename T, typename U>
::testing::AssertionResult take(Result<T>&& r, U* out) {
  if (!r) return ::testing::AssertionFailure() << statusName(r.status()) << ": " << r.error().message;
  *out = std::move(r).value();
  return ::testing::AssertionSuccess();
}
inline ::testing::AssertionResult succeeded(const Result<void>& r) {
  if (!r) return ::testing::AssertionFailure() << statusName(r.status()) << ": " << r.error().message;
  return ::testing::AssertionSuccess();
}
// A release's answer as a status: kOk (gone), kInProgress (final later) or its error.
inline Status released(const Result<bool>& r) {
  return !r ? r.status() : *r ? Status::kOk : Status::kInProgress;
}

inline Params paramsOf(const EnvMap& env) {
  EnvMap e = env;
  e.emplace("PACT_NET_DEVICES", "lo");
  auto p = Params::load(e);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return p.ok() ? *p : Params{};
}

inline std::unique_ptr<Engine> makeEngine(const std::string& name, const EnvMap& env, bool listen,
                                          size_t exactlyOnceWindow = EngineConfig{}.exactlyOnceWindow) {
  EngineConfig c;
  c.exactlyOnceWindow = exactlyOnceWindow;
  c.name = name;
  if (listen) c.listenIp = "127.0.0.1";
  c.progressThread = true;
  std::unique_ptr<Engine> e;
  EXPECT_TRUE(take(Engine::create(c, paramsOf(env)), &e));
  return e;
}

// A registered buffer: its registration and where it starts.
struct Buffer {
  Registration* mr;
  uint8_t* base;
};

// One transfer of class cls from tx to rx (peer: rx as tx knows it): [offset, offset + length) of
// from into the same range of to, filled with request's pattern first and checked after; both
// results. A send refused at once ends both with its status, its message in *sendError.
inline std::pair<Status, Status> moveOnce(Engine& rx, Engine& tx, uint64_t peer, Buffer from, Buffer to,
                                          const char* cls, uint64_t request, uint64_t offset,
                                          uint64_t length, std::string* sendError) {
  fillPattern(from.base + offset, length, request);
  std::memset(to.base + offset, 0, length);
  const TransferKey key{request, 1, 0, 0};
  const BlockRef dst{to.mr, offset, length};
  const BlockRef src{from.mr, offset, length};
  uint64_t rxId = 0;
  EXPECT_TRUE(take(rx.expect(key, std::span(&dst, 1), 0, cls), &rxId));
  auto sent = tx.send(peer, key, std::span(&src, 1), 0, cls);
  if (!sent) {
    *sendError = sent.error().message;
    rx.release(rxId).ignore();
    return {sent.status(), sent.status()};
  }
  const uint64_t txId = *sent;
  XferInfo a, b;
  EXPECT_TRUE(succeeded(rx.wait(rxId, 20000, &a)));
  EXPECT_TRUE(succeeded(tx.wait(txId, 20000, &b)));
  rx.release(rxId).ignore();
  tx.release(txId).ignore();
  if (a.result == Status::kOk) {
    EXPECT_EQ(firstMismatch(to.base + offset, length, request), -1);
  }
  return {a.result, b.result};
}

// A receiver and a sender connected to it, each with its own configuration.
struct Pair {
  std::unique_ptr<Engine> rx, tx;
  uint64_t peer = 0;  // the receiver, as the sender knows it
  std::vector<uint8_t> src, dst;
  Registration* srcMr = nullptr;
  Registration* dstMr = nullptr;
  std::string sendError;  // the message of a send that failed

  Pair(const EnvMap& rxEnv, const EnvMap& txEnv, size_t bytes,
       size_t exactlyOnceWindow = EngineConfig{}.exactlyOnceWindow)
      : src(bytes), dst(bytes) {
    rx = makeEngine("rx", rxEnv, true, exactlyOnceWindow);
    tx = makeEngine("tx", txEnv, false, exactlyOnceWindow);
    if (!rx || !tx) return;
    std::string address;
    EXPECT_TRUE(take(rx->address(), &address));
    EXPECT_TRUE(take(tx->connect(address, 10000), &peer));
    EXPECT_TRUE(take(tx->registerMemory({src.data(), src.size()}), &srcMr));
    EXPECT_TRUE(take(rx->registerMemory({dst.data(), dst.size()}), &dstMr));
  }
  ~Pair() {
    if (rx) rx->deregister(dstMr).ignore();
    if (tx) tx->deregister(srcMr).ignore();
  }

  // Moves [offset, offset + length) of the buffers as one transfer of class cls; both results.
  std::pair<Status, Status> move(const char* cls, uint64_t request, uint64_t offset, uint64_t length) {
    return moveOnce(*rx, *tx, peer, {srcMr, src.data()}, {dstMr, dst.data()}, cls, request, offset, length,
                    &sendError);
  }
};

}  // namespace pact::engine::test
