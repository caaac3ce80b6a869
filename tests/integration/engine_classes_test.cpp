// Engine classes on the transport core: each class's service picks a context (shared when equal),
// its chunk the piece size, its lanes the endpoints pieces are spread over, its credits what one
// sender may have staged. Two engines in one process over UCX loopback, each built from its own
// configuration (Params passed down, no global registry), driven through the internal API.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "telemetry/counters.h"
#include "pact/pact.hpp"  // the public C++ API beside the internal one: no name collides
#include "tests/integration/engine_pair.h"

namespace pact::engine {
namespace {

using test::fillPattern;
using test::firstMismatch;
using test::released;
using test::succeeded;
using test::take;
using test::makeEngine;
using test::Pair;
using test::paramsOf;

const ClassRouteInfo& routeOf(const std::vector<ClassRouteInfo>& routes, const std::string& name) {
  for (const auto& r : routes)
    if (r.name == name) return r;
  ADD_FAILURE() << "no route " << name;
  return routes.front();
}

// The public C++ wrapper and the internal error model are two sets of names.
static_assert(!std::is_same_v<pact::xfer::Error, pact::Error>);
static_assert(!std::is_same_v<pact::xfer::Result<int>, pact::Result<int>>);

TEST(EngineClasses, EqualServicesShareOneContext) {
  auto e = makeEngine("e", {}, false);
  ASSERT_NE(e, nullptr);
  const auto routes = e->routes();
  ASSERT_EQ(routes.size(), 5u);
  for (const auto& r : routes) EXPECT_EQ(r.context, 0u) << r.name;
}

TEST(EngineClasses, DifferentServicesGetTheirOwnContextsAndPiecesLandThere) {
  const EnvMap env{{"PACT_TC_KV", "service=rc"}, {"PACT_TC_A2A", "service=ud"}};
  Pair p(env, env, 4 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  const auto routes = p.tx->routes();
  const auto& kv = routeOf(routes, "KV");
  const auto& a2a = routeOf(routes, "A2A");
  const auto& def = routeOf(routes, "DEFAULT");
  EXPECT_NE(kv.context, a2a.context);
  EXPECT_NE(kv.context, def.context);
  EXPECT_NE(a2a.context, def.context);
  EXPECT_EQ(routeOf(routes, "CTRL").context, def.context);
  EXPECT_NE(kv.service.find("rc|"), std::string::npos) << kv.service;
  EXPECT_EQ(p.move("KV", 1, 0, 2 << 20), std::make_pair(Status::kOk, Status::kOk));
  EXPECT_EQ(p.move("A2A", 2, 2 << 20, 2 << 20), std::make_pair(Status::kOk, Status::kOk));
  EXPECT_EQ(p.tx->laneStats(p.peer, "KV").size(), 1u);
  EXPECT_EQ(p.tx->laneStats(p.peer, "A2A").size(), 1u);
}

// priority on the engine face: a KV transfer (priority 1) sent while a checkpoint (priority 0,
// unordered 64 KiB pieces) is under way to the same peer makes the checkpoint's lanes stand back;
// both commit byte-exact. Equal priorities: the checkpoint never stands back (the control).
// The checkpoint is a stream of transfers, kept going until KV has finished, so KV always meets
// checkpoint pieces waiting to go, however long its offer's round trip takes (one checkpoint of
// 24 MiB, then of 96 MiB, sometimes ended first on a loaded CI machine).
TEST(EngineClasses, ABulkClassStandsBackForAHigherClassToTheSamePeer) {
  for (const bool prioritized : {true, false}) {
    SCOPED_TRACE(prioritized ? "KV priority=1" : "equal priorities");
    const EnvMap env{{"PACT_TC_CKPT", "unordered,chunk=64K,priority=0"},
                     {"PACT_TC_KV", prioritized ? "priority=1" : "priority=0"}};
    constexpr uint64_t kSlot = 8 << 20, kKv = 1 << 20;
    constexpr int kSlots = 4;  // checkpoint transfers in flight at once, each on a slot of its own
    constexpr uint64_t kBulk = kSlot * kSlots;
    Pair p(env, env, kBulk + kKv);
    ASSERT_TRUE(p.rx && p.tx);
    EXPECT_EQ(routeOf(p.tx->routes(), "KV").context != routeOf(p.tx->routes(), "CKPT").context, prioritized)
        << "classes of different priority have contexts of their own";
    for (int s = 0; s < kSlots; ++s) fillPattern(p.src.data() + kSlot * s, kSlot, 10 + s);
    fillPattern(p.src.data() + kBulk, kKv, 2);
    // One checkpoint transfer on slot s (key n): its receiver's and its sender's ids.
    struct Ckpt {
      int slot;
      uint64_t rx, tx;
    };
    uint64_t nextKey = 100;
    const auto start = [&](int s) {
      Ckpt c{s, 0, 0};
      const TransferKey key{nextKey++, 1, 0, 0};
      const BlockRef to{p.dstMr, kSlot * s, kSlot}, from{p.srcMr, kSlot * s, kSlot};
      EXPECT_TRUE(take(p.rx->expect(key, std::span(&to, 1), 0, "CKPT"), &c.rx));
      EXPECT_TRUE(take(p.tx->send(p.peer, key, std::span(&from, 1), 0, "CKPT"), &c.tx));
      return c;
    };
    // Waits for a transfer's both ends, which must commit, and releases them.
    const auto settle = [&](uint64_t rxId, uint64_t txId, const std::string& what) {
      for (const bool rx : {true, false}) {
        Engine& e = rx ? *p.rx : *p.tx;
        XferInfo info;
        EXPECT_TRUE(succeeded(e.wait(rx ? rxId : txId, 20000, &info))) << what;
        EXPECT_EQ(info.result, Status::kOk) << what;
        e.release(rx ? rxId : txId).ignore();
      }
    };
    const auto finish = [&](const Ckpt& c) { settle(c.rx, c.tx, "checkpoint transfer on slot " + std::to_string(c.slot)); };
    std::vector<Ckpt> ckpts;
    for (int s = 0; s < kSlots; ++s) ckpts.push_back(start(s));
    // KV leaves once the checkpoint's pieces are moving.
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (p.tx->stats()[telemetry::kBytesSent] == 0 && std::chrono::steady_clock::now() < limit) {
    }
    ASSERT_GT(p.tx->stats()[telemetry::kBytesSent], 0u) << "the checkpoint never started";
    const TransferKey kvKey{2, 1, 0, 0};
    const BlockRef kvTo{p.dstMr, kBulk, kKv}, kvFrom{p.srcMr, kBulk, kKv};
    uint64_t kvRx = 0, kvTx = 0;
    ASSERT_TRUE(take(p.rx->expect(kvKey, std::span(&kvTo, 1), 0, "KV"), &kvRx));
    ASSERT_TRUE(take(p.tx->send(p.peer, kvKey, std::span(&kvFrom, 1), 0, "KV"), &kvTx));
    // Until KV is final on both sides, every checkpoint transfer that ends is followed by another.
    const auto final = [&](Engine& e, uint64_t id) {
      auto q = e.query(id);
      return q.ok() && q->final;
    };
    size_t oldest = 0;
    int restarted = 0;
    while (!(final(*p.rx, kvRx) && final(*p.tx, kvTx)) && std::chrono::steady_clock::now() < limit) {
      const Ckpt c = ckpts[oldest];
      if (!final(*p.tx, c.tx) || !final(*p.rx, c.rx)) continue;
      finish(c);
      ckpts[oldest] = start(c.slot);
      oldest = (oldest + 1) % ckpts.size();
      ++restarted;
    }
    settle(kvRx, kvTx, "KV");
    for (size_t i = 0; i < ckpts.size(); ++i) finish(ckpts[(oldest + i) % ckpts.size()]);
    for (int s = 0; s < kSlots; ++s) EXPECT_EQ(firstMismatch(p.dst.data() + kSlot * s, kSlot, 10 + s), -1);
    EXPECT_EQ(firstMismatch(p.dst.data() + kBulk, kKv, 2), -1);
    const auto lanes = p.tx->laneStats(p.peer, "CKPT");
    ASSERT_FALSE(lanes.empty());
    if (prioritized)
      EXPECT_GT(lanes[0].holds, 0u) << "the checkpoint never stood back for KV (" << restarted
                                    << " checkpoint transfers started again while KV was under way)";
    else
      EXPECT_EQ(lanes[0].holds, 0u);
  }
}

TEST(EngineClasses, FallbackFailWithoutRdmaRefusesTheEngineNamingTheClass) {
  EngineConfig c;
  c.name = "strict";
  auto e = Engine::create(c, paramsOf({{"PACT_TC_KV", "rc,fallback=fail"}}));
  ASSERT_EQ(e.status(), Status::kUnsupported);
  const std::string& why = e.error().message;
  EXPECT_NE(why.find("traffic class KV asked for service=rc"), std::string::npos) << why;
  EXPECT_NE(why.find("fallback=fail"), std::string::npos) << why;
}

TEST(EngineClasses, UnorderedClassSpreadsItsPiecesOverItsLanes) {
  const EnvMap env{{"PACT_TC_KV", "unordered,lanes=2,chunk=64K"}};
  Pair p(env, env, 8 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  EXPECT_EQ(routeOf(p.tx->routes(), "KV").lanes, 2);
  EXPECT_EQ(p.move("KV", 1, 0, 8 << 20), std::make_pair(Status::kOk, Status::kOk));
  const auto lanes = p.tx->laneStats(p.peer, "KV");
  ASSERT_EQ(lanes.size(), 2u);
  EXPECT_EQ(lanes[0].pieces + lanes[1].pieces, (8u << 20) / (64u << 10));
  EXPECT_GT(lanes[0].pieces, 0u);
  EXPECT_GT(lanes[1].pieces, 0u);
  EXPECT_EQ(lanes[0].bytes + lanes[1].bytes, 8u << 20);
  // The metrics' lane scope says the same: a set per lane of the class, with its share.
  uint64_t pieces = 0, bytes = 0;
  int sets = 0;
  const telemetry::Scope lane = telemetry::Scope::kLane;
  telemetry::Registry::process().forEach(&lane, [&](const telemetry::CounterSet& s) {
    if (s.object().find(" of class KV of engine tx to ") == std::string::npos) return;
    ++sets;
    pieces += s.get(telemetry::kLanePieces);
    bytes += s.get(telemetry::kLaneBytes);
  });
  EXPECT_EQ(sets, 2);
  EXPECT_EQ(pieces, lanes[0].pieces + lanes[1].pieces);
  EXPECT_EQ(bytes, 8u << 20);
  // DEFAULT stays ordered on the control endpoint: one lane.
  EXPECT_EQ(p.move("DEFAULT", 2, 0, 1 << 20), std::make_pair(Status::kOk, Status::kOk));
  EXPECT_EQ(p.tx->laneStats(p.peer, "DEFAULT").size(), 1u);
}

// chunk is the stripe unit of an unordered class (one lane here, to count its pieces); an ordered
// class sends each block as one piece (up to 4 MiB).
TEST(EngineClasses, ChunkIsThePieceSizeOfAnUnorderedClass) {
  const EnvMap env{{"PACT_TC_KV", "unordered,lanes=1,chunk=128K"}, {"PACT_TC_A2A", "chunk=128K"}};
  Pair p(env, env, 1 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  EXPECT_EQ(p.move("KV", 1, 0, 1 << 20), std::make_pair(Status::kOk, Status::kOk));
  const auto lanes = p.tx->laneStats(p.peer, "KV");
  ASSERT_EQ(lanes.size(), 1u);
  EXPECT_EQ(lanes[0].pieces, 8u);
  // One-lane classes on one context share the control endpoint: count A2A's pieces as the growth.
  EXPECT_EQ(p.move("A2A", 2, 0, 1 << 20), std::make_pair(Status::kOk, Status::kOk));
  const auto ordered = p.tx->laneStats(p.peer, "A2A");
  ASSERT_EQ(ordered.size(), 1u);
  EXPECT_EQ(ordered[0].pieces - lanes[0].pieces, 1u);
}

TEST(EngineClasses, ClassCreditsBoundWhatOneSenderStages) {
  const EnvMap env{{"PACT_TC_KV", "credits=1M"}};
  Pair p(env, env, 4 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  // Four 1 MiB transfers at once: the receiver advertises one at a time.
  std::vector<uint64_t> rxIds(4), txIds(4);
  for (uint64_t i = 0; i < 4; ++i) {
    fillPattern(p.src.data() + (i << 20), 1 << 20, 10 + i);
    const TransferKey key{10 + i, 1, 0, 0};
    const BlockRef to{p.dstMr, i << 20, 1 << 20}, from{p.srcMr, i << 20, 1 << 20};
    ASSERT_TRUE(take(p.rx->expect(key, std::span(&to, 1), 0, "KV"), &rxIds[i]));
    ASSERT_TRUE(take(p.tx->send(p.peer, key, std::span(&from, 1), 0, "KV"), &txIds[i]));
  }
  for (uint64_t i = 0; i < 4; ++i) {
    XferInfo info;
    ASSERT_TRUE(succeeded(p.rx->wait(rxIds[i], 20000, &info)));
    EXPECT_EQ(info.result, Status::kOk);
    EXPECT_EQ(firstMismatch(p.dst.data() + (i << 20), 1 << 20, 10 + i), -1);
    ASSERT_TRUE(succeeded(p.tx->wait(txIds[i], 20000, &info)));
    EXPECT_EQ(info.result, Status::kOk);
  }
  EXPECT_EQ(p.rx->stats()[telemetry::kPeakStagedBytes], 1u << 20);
  for (uint64_t i = 0; i < 4; ++i) {
    p.rx->release(rxIds[i]).ignore();
    p.tx->release(txIds[i]).ignore();
  }
}

TEST(EngineClasses, ASendToAPeerWithoutTheClassContextIsRefusedNamingTheService) {
  Pair p({}, {{"PACT_TC_KV", "service=rc"}}, 1 << 20);
  ASSERT_TRUE(p.rx && p.tx);
  EXPECT_EQ(p.move("KV", 1, 0, 1 << 20).second, Status::kRefused);
  EXPECT_NE(p.sendError.find("has no context for service rc|"), std::string::npos) << p.sendError;
  EXPECT_NE(p.sendError.find("PACT_TC_KV"), std::string::npos) << p.sendError;
  // Other classes to the same peer still work.
  EXPECT_EQ(p.move("A2A", 2, 0, 1 << 20), std::make_pair(Status::kOk, Status::kOk));
}

}  // namespace
}  // namespace pact::engine
