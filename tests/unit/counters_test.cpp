// The counter registry: a set is in the process registry exactly while it lives, its counters
// count, and readers see every live set of a scope (what pact_stats, pact_comm_stats,
// pact_plugin_resources and pact-info read).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "telemetry/counters.h"

namespace pact::telemetry {
namespace {

size_t liveSets(Scope scope) {
  size_t n = 0;
  Registry::process().forEach(&scope, [&](const CounterSet&) { ++n; });
  return n;
}

TEST(Counters, ASetIsRegisteredWhileItLives) {
  const size_t before = liveSets(Scope::kEngine);
  {
    CounterSet a(kEngineCatalog, "engine a");
    CounterSet b(kEngineCatalog, "engine b");
    EXPECT_EQ(liveSets(Scope::kEngine), before + 2);
    a.add(kCommitted);
    a.add(kBytesSent, 4096);
    b.add(kCommitted, 2);
    EXPECT_EQ(a.get(kCommitted), 1u);
    EXPECT_EQ(Registry::process().total(Scope::kEngine, kCommitted), 3u);
    a.set(kOpenTransfers, 5);
    a.sub(kOpenTransfers);
    EXPECT_EQ(a.get(kOpenTransfers), 4u);
    a.raise(kPeakStagedBytes, 10);
    a.raise(kPeakStagedBytes, 7);  // a peak never falls
    EXPECT_EQ(a.get(kPeakStagedBytes), 10u);
    b.addShared(kFaultsInjected, 3);
    b.subShared(kFaultsInjected);
    EXPECT_EQ(b.get(kFaultsInjected), 2u);
    const auto v = a.values();
    ASSERT_EQ(v.size(), static_cast<size_t>(kEngineCounters));
    EXPECT_EQ(v[kBytesSent], 4096u);
  }
  EXPECT_EQ(liveSets(Scope::kEngine), before);
}

TEST(Counters, EveryCatalogNamesAndDocumentsEachCounterOnce) {
  for (const Catalog* c : Registry::catalogs()) {
    std::set<std::string> names;
    for (const CounterInfo& i : c->counters) {
      const std::string key = std::string(i.name) + (i.kind != nullptr ? std::string("/") + i.kind : "");
      EXPECT_TRUE(names.insert(key).second) << scopeName(c->scope) << ": " << key << " twice";
      EXPECT_GT(std::string(i.doc).size(), 5u) << i.name;
    }
  }
  EXPECT_EQ(kEngineCatalog.counters.size(), static_cast<size_t>(kEngineCounters));
  EXPECT_STREQ(kEngineCatalog.counters[kCreditStallNs].name, "credit_stall_ns");
  EXPECT_STREQ(kCommCatalog.counters[kRetransmits].name, "retransmits");
  for (size_t k = 0; k < kErrorKinds; ++k) {  // errors by kind: one family, one series per kind
    const CounterInfo& i = kClassCatalog.counters[classError(static_cast<ErrorKind>(k))];
    EXPECT_STREQ(i.name, "errors");
    EXPECT_STREQ(i.kind, errorKindName(static_cast<ErrorKind>(k)));
  }
  EXPECT_STREQ(errorKindName(ErrorKind::kPeerLost), "peer_lost");
  EXPECT_STREQ(errorKindName(ErrorKind::kOther), "other");
}

}  // namespace
}  // namespace pact::telemetry
