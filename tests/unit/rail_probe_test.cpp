// transport::RailProber over loopback UDP: a rail whose probes are answered stays up, a silent one
// is taken out within its timeout (not before), data heard over it keeps it up, it is taken back
// once it answers again after its hold-down, and a rail that flaps is held out twice as long the
// second time. The silent peer is a socket of the test that answers only when told to (echoing a
// probe as the prober's peer would: the same datagram with its kind byte set to "echo"). Waits are
// bounded polls of the watch's state; the only fixed waits are the spans a rail must stay up.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <chrono>
#include <thread>

#include "common/scoped_fd.h"
#include "transport/rail_probe.h"

namespace pact::transport {
namespace {

using namespace std::chrono_literals;
constexpr auto kTimeout = 40ms;
using Clock = std::chrono::steady_clock;

// A UDP socket on 127.0.0.1 that swallows probes, or echoes them while `answering`.
class Peer {
 public:
  Peer() : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len), 0);
    address_.family = 4;
    std::memcpy(address_.ip.data(), &a.sin_addr, 4);
    address_.port = ntohs(a.sin_port);
    timeval tv{0, 2000};
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    thread_ = std::thread([this] {
      while (!stop_) {
        uint8_t buf[64];
        sockaddr_storage from{};
        socklen_t len = sizeof from;
        const ssize_t n = ::recvfrom(fd_.get(), buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len);
        if (n < 5 || !answering) continue;
        buf[4] = 1;  // the kind byte: an echo
        ::sendto(fd_.get(), buf, static_cast<size_t>(n), 0, reinterpret_cast<sockaddr*>(&from), len);
      }
    });
  }
  ~Peer() {
    stop_ = true;
    thread_.join();
  }
  const wire::ProbeAddress& address() const { return address_; }
  std::atomic<bool> answering{false};

 private:
  ScopedFd fd_;
  wire::ProbeAddress address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Polls until the watch is `up` (true) or out (false); the time it took, or nullopt past `bound`.
std::optional<std::chrono::milliseconds> waitFor(const RailWatch& w, bool up, std::chrono::milliseconds bound) {
  const auto start = Clock::now();
  while (w.up() != up) {
    if (Clock::now() - start > bound) return std::nullopt;
    std::this_thread::yield();
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

std::shared_ptr<RailWatch> watchOf(RailProber& prober, const wire::ProbeAddress& to,
                                   std::chrono::milliseconds timeout = kTimeout) {
  auto w = prober.watch("127.0.0.1", to, timeout);
  EXPECT_TRUE(w.ok()) << (w.ok() ? "" : w.error().message);
  return w.ok() ? *w : nullptr;
}

TEST(RailProbe, ARailWhoseProbesAreAnsweredStaysUp) {
  auto prober = RailProber::acquire();
  auto self = prober->listen("127.0.0.1");  // the prober answers its own probes
  ASSERT_TRUE(self.ok()) << self.error().message;
  EXPECT_NE(self->port, 0);
  auto w = watchOf(*prober, *self);
  ASSERT_TRUE(w);
  std::this_thread::sleep_for(kTimeout * 8);  // the span it must stay up
  EXPECT_TRUE(w->up());
  EXPECT_EQ(w->downs(), 0u);
}

TEST(RailProbe, ASilentRailIsTakenOutWithinItsTimeoutAndNotBefore) {
  auto prober = RailProber::acquire();
  Peer peer;
  const auto start = Clock::now();
  auto w = watchOf(*prober, peer.address());
  ASSERT_TRUE(w);
  auto took = waitFor(*w, false, 2s);
  ASSERT_TRUE(took) << "a silent rail was never taken out";
  EXPECT_GE(Clock::now() - start, kTimeout);
  std::printf("[   INFO   ] silent rail out after %lld ms (timeout %lld ms)\n", static_cast<long long>(took->count()),
              static_cast<long long>(kTimeout.count()));
  EXPECT_EQ(w->downs(), 1u);
  EXPECT_GT(w->downTime().count(), 0);
}

TEST(RailProbe, DataHeardOverASilentRailKeepsItUp) {
  auto prober = RailProber::acquire();
  Peer peer;  // never answers: a congested link whose queue holds the probes back
  constexpr auto kLong = 250ms;  // this test's own thread must not be starved for that long
  auto w = watchOf(*prober, peer.address(), kLong);
  ASSERT_TRUE(w);
  for (const auto end = Clock::now() + kLong * 3; Clock::now() < end;) {
    w->heard();
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(w->up());
  EXPECT_EQ(w->downs(), 0u);
  EXPECT_TRUE(waitFor(*w, false, 2s)) << "silent again, it is taken out";
}

TEST(RailProbe, AnOutRailIsTakenBackAfterItsHoldDownAndAFlapDoublesIt) {
  auto prober = RailProber::acquire();
  Peer peer;
  auto w = watchOf(*prober, peer.address());
  ASSERT_TRUE(w);
  ASSERT_TRUE(waitFor(*w, false, 2s));
  const auto out1 = Clock::now();
  peer.answering = true;
  ASSERT_TRUE(waitFor(*w, true, 3s)) << "answering again, it is taken back";
  EXPECT_GE(Clock::now() - out1, kTimeout) << "taken back before its hold-down";
  EXPECT_EQ(w->ups(), 1u);
  // Down again at once: a flap. Its hold-down is twice the first.
  peer.answering = false;
  ASSERT_TRUE(waitFor(*w, false, 2s));
  const auto out2 = Clock::now();
  peer.answering = true;
  ASSERT_TRUE(waitFor(*w, true, 3s));
  EXPECT_GE(Clock::now() - out2, kTimeout * 2) << "a flapping rail was taken back as fast as the first time";
  EXPECT_EQ(w->downs(), 2u);
  EXPECT_EQ(w->ups(), 2u);
}

TEST(RailProbe, WatchesOfTheSamePathAreSharedAndBadInputIsRefused) {
  auto prober = RailProber::acquire();
  Peer peer;
  auto a = watchOf(*prober, peer.address()), b = watchOf(*prober, peer.address());
  EXPECT_EQ(a, b);
  EXPECT_EQ(RailProber::describe(peer.address()), "127.0.0.1:" + std::to_string(peer.address().port));
  auto bad = prober->listen("not-an-address");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("rail probe socket on not-an-address"), std::string::npos) << bad.error().message;
  wire::ProbeAddress none;  // family 0
  auto w = prober->watch("127.0.0.1", none, kTimeout);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("family 0"), std::string::npos) << w.error().message;
}

// Acknowledgements over loopback: one sent at once reaches the sender's sink as soon as its ack
// socket is read; lazy ones leave with the receiver's flush once kLazyBatch are due (or when it
// closes: flush(true)), so a stream of small messages costs a datagram per batch, not per message.
TEST(RailProbe, AcknowledgementsReachTheSinkAndLazyOnesLeaveByTheBatch) {
  auto prober = RailProber::acquire();
  auto self = prober->listen("127.0.0.1");
  ASSERT_TRUE(self.ok()) << self.error().message;
  auto w = watchOf(*prober, *self);
  ASSERT_TRUE(w);
  ASSERT_TRUE(waitFor(*w, true, 2000ms));
  auto sink = prober->ackSink();
  auto at = prober->ackAddress("127.0.0.1");
  ASSERT_TRUE(at.ok()) << at.error().message;
  auto source = prober->ackSource(sink->id(), {w}, {*at});
  ASSERT_TRUE(source);
  // Polls the sink (reading the ack socket, as a sender's test() does) until message `seq` of tag 7
  // is acknowledged, for at most `bound`.
  auto ackedWithin = [&](uint32_t seq, std::chrono::milliseconds bound) {
    const auto start = Clock::now();
    for (;;) {
      prober->drainAcks();
      if (sink->acked(7, seq)) return true;
      if (Clock::now() - start > bound) return false;
      std::this_thread::yield();
    }
  };
  source->delivered(7, 0, true);
  EXPECT_TRUE(ackedWithin(0, 2000ms));
  EXPECT_FALSE(sink->acked(7, 1));
  for (uint32_t seq = 1; seq <= kLazyBatch; ++seq) source->delivered(7, seq, false);
  source->flush();  // a batch is due: sent by this call (else by the prober thread within ms)
  EXPECT_TRUE(ackedWithin(kLazyBatch, 2000ms));
  source->delivered(7, kLazyBatch + 1, false);
  source->flush(true);  // a closing comm sends what is due
  EXPECT_TRUE(ackedWithin(kLazyBatch + 1, 2000ms));
  EXPECT_FALSE(sink->acked(7, kLazyBatch + 2));
}

}  // namespace
}  // namespace pact::transport
