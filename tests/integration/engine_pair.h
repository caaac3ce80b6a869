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
  const Status code = Engine::create(c, paramsOf(env), &e);
  EXPECT_EQ(code, Status::kOk) << lastError();
  return e;
}

// A receiver and a sender connected to it, each with its own configuration.
struct Pair {
  std::unique_ptr<Engine> rx, tx;
  uint64_t peer = 0;  // the receiver, as the sender knows it
  std::vector<uint8_t> src, dst;
  Registration* srcMr = nullptr;
  Registration* dstMr = nullptr;
  std::string sendError;  // lastError() of a send that failed

  Pair(const EnvMap& rxEnv, const EnvMap& txEnv, size_t bytes,
       size_t exactlyOnceWindow = EngineConfig{}.exactlyOnceWindow)
      : src(bytes), dst(bytes) {
    rx = makeEngine("rx", rxEnv, true, exactlyOnceWindow);
    tx = makeEngine("tx", txEnv, false, exactlyOnceWindow);
    if (!rx || !tx) return;
    std::string address;
    EXPECT_EQ(rx->address(&address), Status::kOk);
    EXPECT_EQ(tx->connect(address, 10000, &peer), Status::kOk) << lastError();
    EXPECT_EQ(tx->registerMemory({src.data(), src.size()}, &srcMr), Status::kOk);
    EXPECT_EQ(rx->registerMemory({dst.data(), dst.size()}, &dstMr), Status::kOk);
  }
  ~Pair() {
    if (rx) pact::ignore(rx->deregister(dstMr));
    if (tx) pact::ignore(tx->deregister(srcMr));
  }

  // Moves [offset, offset + length) of the buffers as one transfer of class cls; both results.
  std::pair<Status, Status> move(const char* cls, uint64_t request, uint64_t offset, uint64_t length) {
    fillPattern(src.data() + offset, length, request);
    std::memset(dst.data() + offset, 0, length);
    const TransferKey key{request, 1, 0, 0};
    const BlockRef to{dstMr, offset, length};
    const BlockRef from{srcMr, offset, length};
    uint64_t rxId = 0, txId = 0;
    EXPECT_EQ(rx->expect(key, std::span(&to, 1), 0, cls, &rxId), Status::kOk) << lastError();
    const Status sent = tx->send(peer, key, std::span(&from, 1), 0, cls, &txId);
    if (sent != Status::kOk) {
      sendError = lastError();
      pact::ignore(rx->release(rxId));
      return {sent, sent};
    }
    XferInfo a, b;
    EXPECT_EQ(rx->wait(rxId, 20000, &a), Status::kOk);
    EXPECT_EQ(tx->wait(txId, 20000, &b), Status::kOk);
    pact::ignore(rx->release(rxId));
    pact::ignore(tx->release(txId));
    if (a.result == Status::kOk) {
      EXPECT_EQ(firstMismatch(dst.data() + offset, length, request), -1);
    }
    return {a.result, b.result};
  }
};

}  // namespace pact::engine::test
