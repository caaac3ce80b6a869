// transport::Sessions over real loopback sockets, two instances in one process (a listener and a
// connector, as two processes would have): the handshake once per pair and many channels over
// it, refusals that both sides see, goodbyes and aborts per channel, a process that leaves, and
// listen ids that are refused once closed. Every wait is a bounded loop of step() calls.
#include <gtest/gtest.h>

#include <functional>

#include "common/clock.h"
#include "telemetry/counters.h"
#include "tests/common/temp_file.h"
#include "transport/session.h"

namespace pact::transport {
namespace {

Sessions::Config config(uint64_t epoch = 0, const std::string& keyFile = "") {
  Sessions::Config c;
  c.epoch = epoch;
  if (!keyFile.empty()) c.key = *auth::KeyParser::parse(keyFile);
  c.peerTimeout = std::chrono::seconds(5);
  c.face = "test";
  return c;
}

// Steps both until done() holds; false after 5 s.
bool stepUntil(Sessions& a, Sessions& b, const std::function<bool()>& done) {
  const auto deadline = now() + std::chrono::seconds(5);
  while (!done()) {
    if (now() > deadline) return false;
    a.step();
    b.step();
  }
  return true;
}

struct Pair {
  Sessions listener, connector;
  wire::ListenHandle handle;
  explicit Pair(Sessions::Config l = config(), Sessions::Config c = config())
      : listener(std::move(l)), connector(std::move(c)), handle(*listener.listen("127.0.0.1")) {}

  // Opens a channel: the connector's id and the listener's.
  std::pair<uint64_t, uint64_t> open(const std::vector<uint8_t>& ask = {1},
                                     const std::vector<uint8_t>& answer = {2}) {
    auto ch = connector.open(handle, ask);
    EXPECT_TRUE(ch.ok()) << ch.error().message;
    std::optional<Sessions::Incoming> in;
    EXPECT_TRUE(stepUntil(listener, connector, [&] {
      auto n = listener.nextOpen(handle.listenId);
      if (n.ok() && *n) in = **n;
      return in.has_value();
    }));
    if (!in) return {0, 0};
    EXPECT_EQ(in->open.payload, ask);
    auto local = listener.acceptOpen(*in, answer);
    EXPECT_TRUE(local.ok());
    std::optional<wire::Opened> opened;
    EXPECT_TRUE(stepUntil(listener, connector, [&] {
      auto o = connector.opened(*ch);
      EXPECT_TRUE(o.ok()) << o.error().message;
      if (o.ok() && *o) opened = **o;
      return opened.has_value() || !o.ok();
    }));
    EXPECT_TRUE(opened.has_value());
    if (opened) {
      EXPECT_EQ(opened->payload, answer);
    }
    return {*ch, *local};
  }
};

// Opens a channel that the listener side refuses; the error the connector gets.
Error refusedOpen(Sessions& listener, Sessions& connector, const wire::ListenHandle& h) {
  auto ch = connector.open(h, {1});
  EXPECT_TRUE(ch.ok());
  Result<std::optional<wire::Opened>> opened = std::optional<wire::Opened>();
  EXPECT_TRUE(stepUntil(listener, connector, [&] {
    opened = connector.opened(*ch);
    return !opened.ok();
  }));
  return opened.ok() ? Error{Status::kOk, "opened"} : opened.error();
}

uint64_t sessionsNow() { return telemetry::processCounters().get(telemetry::kSessions); }

TEST(Sessions, OneHandshakeCarriesManyChannels) {
  const uint64_t before = sessionsNow();
  Pair p;
  for (int i = 0; i < 20; ++i) {
    auto [c, l] = p.open({static_cast<uint8_t>(i)}, {static_cast<uint8_t>(i + 1)});
    ASSERT_NE(c, 0u);
    ASSERT_NE(l, 0u);
  }
  // One session on each side, whatever the number of channels.
  EXPECT_EQ(sessionsNow() - before, 2u);
}

TEST(Sessions, EitherSideOpensOverTheSameSession) {
  const uint64_t before = sessionsNow();
  Pair p;
  ASSERT_NE(p.open().first, 0u);
  // The listener's process connects back to the connector's: it joins the session that exists.
  auto back = p.connector.listen("127.0.0.1");
  ASSERT_TRUE(back.ok());
  auto ch = p.listener.open(*back, {7});
  ASSERT_TRUE(ch.ok());
  std::optional<Sessions::Incoming> in;
  ASSERT_TRUE(stepUntil(p.listener, p.connector, [&] {
    auto n = p.connector.nextOpen(back->listenId);
    if (n.ok() && *n) in = **n;
    return in.has_value();
  }));
  EXPECT_EQ(sessionsNow() - before, 2u) << "a second session was opened";
}

TEST(Sessions, GoodbyeAbortAndTheCallbackOnceBothClosed) {
  Pair p;
  auto [c, l] = p.open();
  bool done = false;
  p.listener.close(l, false, [&] { done = true; });
  EXPECT_FALSE(done) << "the peer has not closed yet";
  EXPECT_EQ(p.listener.closing(), 1u);
  ASSERT_TRUE(stepUntil(p.listener, p.connector, [&] { return p.connector.view(c).peerClosed; }));
  p.connector.close(c, false, nullptr);
  ASSERT_TRUE(stepUntil(p.listener, p.connector, [&] { return done; }));
  EXPECT_EQ(p.listener.closing(), 0u);

  auto [c2, l2] = p.open();
  p.connector.abort(c2, "the message is larger than the receive buffer");
  ASSERT_TRUE(stepUntil(p.listener, p.connector, [&] { return !p.listener.view(l2).abortReason.empty(); }));
  EXPECT_EQ(p.listener.view(l2).abortReason, "the message is larger than the receive buffer");
  EXPECT_TRUE(p.connector.view(c2).abortReason.empty()) << "the aborting side is not told its own abort";
}

TEST(Sessions, ALostGoodbyeArrivesLate) {
  Pair p;
  auto [c, l] = p.open();
  const auto t0 = now();
  p.connector.close(c, true, nullptr);
  ASSERT_TRUE(stepUntil(p.listener, p.connector, [&] { return p.listener.view(l).peerClosed; }));
  EXPECT_GE(now() - t0, Sessions::kLostByeDelay);
}

TEST(Sessions, AProcessThatLeavesClosesItsChannels) {
  Sessions listener(config());
  auto h = listener.listen("127.0.0.1");
  ASSERT_TRUE(h.ok());
  uint64_t local = 0;
  {
    Sessions connector(config());
    auto ch = connector.open(*h, {1});
    ASSERT_TRUE(ch.ok());
    std::optional<Sessions::Incoming> in;
    ASSERT_TRUE(stepUntil(listener, connector, [&] {
      auto n = listener.nextOpen(h->listenId);
      if (n.ok() && *n) in = **n;
      return in.has_value();
    }));
    local = *listener.acceptOpen(*in, {2});
    ASSERT_TRUE(stepUntil(listener, connector, [&] { return connector.opened(*ch).value().has_value(); }));
  }  // the connector's process leaves: its goodbye closes every channel
  const auto deadline = now() + std::chrono::seconds(5);
  while (!listener.view(local).peerClosed && now() < deadline) listener.step();
  const ChannelView v = listener.view(local);
  EXPECT_TRUE(v.peerClosed);
  EXPECT_TRUE(v.lostReason.empty()) << "a process that left on purpose is not a lost peer: " << v.lostReason;
}

TEST(Sessions, RefusalsAreSeenOnBothSides) {
  {  // another epoch: the connector's open fails refused, the listener's next accept too
    Pair p(config(1), config(2));
    const Error e = refusedOpen(p.listener, p.connector, p.handle);
    EXPECT_EQ(e.status, Status::kRefused);
    EXPECT_NE(e.message.find("epoch"), std::string::npos) << e.message;
    auto acc = p.listener.nextOpen(p.handle.listenId);
    EXPECT_EQ(acc.status(), Status::kRefused);
  }
  {  // a key on one side only
    const test::TempFile key{"a test key of sixteen bytes or more"};
    Pair p(config(0, key.path()), config());
    const Error e = refusedOpen(p.listener, p.connector, p.handle);
    EXPECT_EQ(e.status, Status::kRefused);
    EXPECT_NE(e.message.find("authentication"), std::string::npos) << e.message;
  }
  {  // the same key: opens
    const test::TempFile key{"a test key of sixteen bytes or more"};
    Pair p(config(0, key.path()), config(0, key.path()));
    EXPECT_NE(p.open().first, 0u);
  }
}

TEST(Sessions, AClosedListenIdIsRefusedAndItsSlotComesBackWithAnotherGeneration) {
  Pair p;
  const wire::ListenHandle old = p.handle;
  p.listener.unlisten(old.listenId);
  auto again = p.listener.listen("127.0.0.1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->listenId & 0xffffffffu, old.listenId & 0xffffffffu) << "the slot is reused";
  EXPECT_NE(again->listenId, old.listenId) << "with another generation";
  EXPECT_EQ(again->port, old.port) << "one listening socket for every listen id";
  const Error e = refusedOpen(p.listener, p.connector, old);
  EXPECT_EQ(e.status, Status::kRefused);
  EXPECT_NE(e.message.find("is not listening"), std::string::npos) << e.message;
  auto none = p.listener.nextOpen(again->listenId);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value()) << "the old id's open reached the new listen comm";
}

TEST(Sessions, NothingListeningIsRefusedAtOnce) {
  Sessions connector(config());
  wire::ListenHandle h;
  h.family = AF_INET;
  h.port = 1;  // nothing listens on port 1
  h.addr[0] = 127;
  h.addr[3] = 1;
  auto ch = connector.open(h, {1});
  ASSERT_TRUE(ch.ok());
  Result<std::optional<wire::Opened>> opened = std::optional<wire::Opened>();
  const auto deadline = now() + std::chrono::seconds(5);
  while (opened.ok() && now() < deadline) opened = connector.opened(*ch);
  EXPECT_EQ(opened.status(), Status::kRefused);
  EXPECT_NE(opened.error().message.find("connection refused"), std::string::npos) << opened.error().message;
}

}  // namespace
}  // namespace pact::transport
