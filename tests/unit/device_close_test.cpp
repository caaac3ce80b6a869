// A shared endpoint's background close, on real UCX over tcp on loopback, two device contexts in
// one process (DeviceCtx::endpoint, retire, reapClosing): while a close runs the device counts it
// in closing_endpoints; a close UCX cannot finish (the peer worker is never progressed, so the
// endpoint's wire-up is never answered) is given up after the bound and counted in
// closes_abandoned; a close whose peer answers ends and counts nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "telemetry/counters.h"
#include "tests/common/scoped_env.h"
#include "transport/device_ctx.h"
#include "transport/fabric.h"
#include "transport/params.h"
#include "transport/profile.h"

namespace pact::transport {
namespace {

using Clock = std::chrono::steady_clock;

struct Two {
  test::ScopedEnv env{"UCX_TLS", "tcp"};  // shared memory would need no wire-up answer
  std::unique_ptr<Fabric> fa, fb;
  std::shared_ptr<DeviceCtx> a, b;
  Two() {
    auto params = Params::load({{"PACT_NET_DEVICES", "lo"}});
    EXPECT_TRUE(params.ok());
    auto x = Fabric::create(*params, UCP_FEATURE_TAG, "close test a");
    auto y = Fabric::create(*params, UCP_FEATURE_TAG, "close test b");
    EXPECT_TRUE(x.ok() && y.ok());
    fa = std::move(x.value());
    fb = std::move(y.value());
    auto ca = fa->open(0, Profile{}, "DEFAULT");
    auto cb = fb->open(0, Profile{}, "DEFAULT");
    EXPECT_TRUE(ca.ok() && cb.ok());
    a = *ca;
    b = *cb;
  }
  uint64_t closing() { return a->counters().get(telemetry::kClosingEndpoints); }
  // An endpoint from a to b, released at once: its background close starts. Whether one runs.
  bool openAndRelease() {
    std::lock_guard lock(a->mutex());
    auto ep = a->endpoint(0, 0, b->addresses()[0]);
    EXPECT_TRUE(ep.ok()) << ep.error().message;
    if (!ep.ok()) return false;
    ep.value().reset();  // the last reference
    return a->closing() == 1;
  }
  uint64_t abandoned() { return a->counters().get(telemetry::kClosesAbandoned); }
};

// Progresses a (and b when asked) until done() or the limit; whether done() came.
template <typename Done>
bool progressUntil(Two& t, bool peerToo, std::chrono::milliseconds limit, Done done) {
  const auto until = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > until) return false;
    std::lock_guard lock(t.a->mutex());
    t.a->progress();
    if (peerToo) t.b->progress();
  }
  return true;
}

TEST(DeviceClose, ACloseThePeerNeverAnswersIsGivenUpAfterTheBoundAndCounted) {
  Two t;
  ASSERT_TRUE(t.a && t.b);
  const uint64_t abandonedBefore = t.abandoned();
  ASSERT_TRUE(t.openAndRelease()) << "closed at once: the test needs a close that waits";
  EXPECT_EQ(t.closing(), 1u);
  const auto t0 = Clock::now();
  ASSERT_TRUE(progressUntil(t, false, std::chrono::seconds(10), [&] { return t.abandoned() > abandonedBefore; }))
      << "the close was not given up within 10 s";
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
  EXPECT_GE(took.count(), 1900) << "given up before the 2 s bound";
  EXPECT_EQ(t.abandoned(), abandonedBefore + 1);
  EXPECT_EQ(t.closing(), 0u);
  std::lock_guard lock(t.a->mutex());
  EXPECT_EQ(t.a->closing(), 0u);
}

TEST(DeviceClose, AClosePeerAnsweringEndsWithNothingAbandoned) {
  Two t;
  ASSERT_TRUE(t.a && t.b);
  const uint64_t abandonedBefore = t.abandoned();
  t.openAndRelease();
  ASSERT_TRUE(progressUntil(t, true, std::chrono::seconds(10), [&] { return t.closing() == 0; }));
  EXPECT_EQ(t.abandoned(), abandonedBefore);
}

}  // namespace
}  // namespace pact::transport
