// netns suite: the plugin between two processes in two network namespaces (pactA, pactB) joined
// by veth pairs that ci/netns.sh builds, optionally rate-limited (tbf) or lossy (nftables).
// Unlike the abi suite (loopback), traffic here must cross a real link, so rate limits, loss and
// link failures act on it. Driven through the newest exported ABI version.
//
// Peer A is always in pactA (links pa<i>, 10.77.<i>.1), peer B in pactB (pb<i>, 10.77.<i>.2).
// Every peer uses UCX_TLS=tcp: shared memory works across network namespaces and would bypass
// the veth entirely.
//
// When `ci/netns.sh check` reports namespaces unavailable (not root, no `ip netns`), every test
// is skipped with its message.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"
#include "pact/pact.h"
#include "tests/netns/netns_peer.h"
#include "tests/netns/netns_util.h"

namespace pact::netns_test {
namespace {

using namespace abi_test;  // NOLINT: the harness's NetPlugin, PeerPair, buffers, helpers
using test::ScopedEnv;

// The fixture (Netns), the peers (Side, openIn, findDevice) and the stream (receiveStream,
// sendStream) are in netns_peer.h, shared with failover_test.cpp.

// A receives the stream on pa0, B sends it from pb0. Returns A's report (zeros on failure).
StreamReport runStream(const Side& a, const Side& b) {
  StreamReport report;
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        ScopedEnv env;
        auto plugin = openIn(a, &env);
        ASSERT_TRUE(plugin);
        const int dev = findDevice(*plugin, a.link);
        ASSERT_GE(dev, 0);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm, dev));
        StreamReport r;
        ASSERT_NO_FATAL_FAILURE(receiveStream(*plugin, comm, *io.peer, a.link, &r));
        EXPECT_TRUE(io.parent->sendValue(r));
        notifyDone(*io.peer);
        EXPECT_EQ(plugin->closeRecv(comm), loader::kSuccess) << "closeRecv";
      },
      [&](PeerIo& io) {
        ScopedEnv env;
        auto plugin = openIn(b, &env);
        ASSERT_TRUE(plugin);
        const int dev = findDevice(*plugin, b.link);
        ASSERT_GE(dev, 0);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm, dev));
        ASSERT_NO_FATAL_FAILURE(sendStream(*plugin, comm, *io.peer));
        awaitDone(*io.peer);
        EXPECT_EQ(plugin->closeSend(comm), loader::kSuccess) << "closeSend";
      },
      kStreamWatchdog);
  if (!pair.controlA().recvValue(&report, kStreamPairTimeout)) report = StreamReport{};
  pair.expectSuccess(kStreamPairTimeout);
  return report;
}

double mbps(const StreamReport& r) {
  return r.seconds > 0 ? static_cast<double>(r.bytes) * 8 / r.seconds / 1e6 : 0;
}

// ---- a. rate-limited veth ---------------------------------------------------------------------

// 64 messages of mixed sizes (1 B .. 4 MiB) over one veth pair limited to 200 Mbit/s: all arrive
// byte-exact and in order, the payload crossed pa0 (its rx_bytes grew by at least the payload)
// and the throughput stays under the limit (x1.2 for the bucket and timing slack): over loopback
// or shared memory it would be many times higher.
TEST_F(Netns, RateLimitedVethCarriesOrderedStream) {
  constexpr double kRateMbps = 200;
  ASSERT_NO_FATAL_FAILURE(up({"--rate", "200mbit"}));
  const StreamReport r = runStream(sideA(), sideB());
  ASSERT_EQ(r.bytes, streamBytes()) << "the receiver did not report a complete stream";
  std::printf("[   INFO   ] %" PRIu64 " bytes in %.3f s = %.1f Mbit/s over pa0 (tbf %.0f Mbit/s), "
              "pa0 rx_bytes +%" PRIu64 "\n",
              r.bytes, r.seconds, mbps(r), kRateMbps, r.linkRxBytes);
  RecordProperty("throughput_mbps", std::to_string(mbps(r)));
  EXPECT_GE(r.linkRxBytes, r.bytes) << "the payload did not cross pa0";
  EXPECT_LT(mbps(r), kRateMbps * 1.2) << "faster than the veth's rate limit: not over the veth?";
  // Lower bound only against a collapse (e.g. stalls until a timer); TCP keeps tbf near full.
  EXPECT_GT(mbps(r), kRateMbps * 0.25) << "far below the link's rate";
}

// ---- b. random loss ---------------------------------------------------------------------------

// The same stream with 1% of the packets on pair 0 dropped in both directions (no rate limit):
// TCP retransmits; the plugin completes every message byte-exact and reports no error. The drop
// counters prove that loss happened.
TEST_F(Netns, LossyVethStreamCompletesByteExact) {
  ASSERT_NO_FATAL_FAILURE(up({"--loss", "1"}));
  const StreamReport r = runStream(sideA(), sideB());
  ASSERT_EQ(r.bytes, streamBytes()) << "the receiver did not report a complete stream";
  const long long dropsA = lossDrops("A"), dropsB = lossDrops("B");
  std::printf("[   INFO   ] %" PRIu64 " bytes in %.3f s = %.1f Mbit/s with 1%% loss; dropped "
              "%lld packets into A, %lld into B\n",
              r.bytes, r.seconds, mbps(r), dropsA, dropsB);
  RecordProperty("throughput_mbps", std::to_string(mbps(r)));
  EXPECT_GE(r.linkRxBytes, r.bytes) << "the payload did not cross pa0";
  EXPECT_GT(dropsA + dropsB, 0) << "the loss rule dropped nothing: the test proved nothing";
}

// ---- c. peer failure across the link -----------------------------------------------------------

constexpr auto kDetectBound = std::chrono::milliseconds(10000);
constexpr size_t kFailMessage = 8 << 20;

struct FailureReport {
  int rc = -100;             // the first error test()/isend/irecv returned
  long long msAfterNote = -1; // since the parent announced the disruption
  long long closeMs = -1;     // closeSend/closeRecv after the error
};

enum class Disruption { kKillPeer, kLinkDown };

// The survivor (A) streams 8 MiB messages (sending or receiving) until the plugin reports an
// error, which must come after the parent's note (sent just before the disruption) and within
// kDetectBound of it. The victim (B) streams the other side until it fails or is killed.
void survivorBody(PeerIo& io, bool sends) {
  Side a = sideA();
  a.peerTimeout = "2s";
  ScopedEnv env;
  auto plugin = openIn(a, &env);
  ASSERT_TRUE(plugin);
  const int dev = findDevice(*plugin, "pa0");
  ASSERT_GE(dev, 0);
  void* comm = nullptr;
  if (sends) {
    ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm, dev));
  } else {
    ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm, dev));
  }
  HostBuffer buf(kFailMessage);
  fillPattern(buf.data(), buf.size(), 7);
  auto mr = std::make_unique<MemReg>(*plugin, comm, buf.data(), buf.size());
  ASSERT_TRUE(mr->ok());
  // One complete message first: the path works before the disruption.
  if (sends) {
    ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comm, buf.data(), kFailMessage, mr->handle()));
  } else {
    ASSERT_NO_FATAL_FAILURE(
        recvOne(*plugin, comm, buf.data(), kFailMessage, mr->handle(), kFailMessage));
  }
  const char ready = 'R';
  ASSERT_TRUE(io.parent->sendValue(ready));

  bool noted = false;
  Deadline sinceNote(kDetectBound);
  auto checkNote = [&] {
    if (!noted && io.parent->readable()) {
      char note = 0;
      EXPECT_TRUE(io.parent->recvValue(&note, kOpTimeout));
      noted = true;
      sinceNote = Deadline(kDetectBound);
    }
  };
  Deadline overall(kOpTimeout * 2);
  void* req = nullptr;
  long long completedAfterNote = 0;
  FailureReport report;
  for (;;) {
    int rc = loader::kSuccess;
    if (req == nullptr) {
      if (sends) {
        rc = plugin->isend(comm, buf.data(), kFailMessage, kTag, mr->handle(), &req);
      } else {
        void* data = buf.data();
        size_t cap = kFailMessage;
        int tag = kTag;
        void* mh = mr->handle();
        rc = plugin->irecv(comm, 1, &data, &cap, &tag, &mh, &req);
      }
    } else {
      int done = 0;
      int sizes[loader::kMaxRecvs];
      rc = plugin->test(req, &done, sizes);
      if (rc == loader::kSuccess && done != 0) {
        req = nullptr;
        if (noted) ++completedAfterNote;
      }
    }
    if (rc != loader::kSuccess) {
      checkNote();  // after the error: the note is readable from the disruption on
      ASSERT_TRUE(noted) << "the plugin returned " << rc << " before the disruption";
      report.rc = rc;
      report.msAfterNote = sinceNote.elapsed().count();
      break;
    }
    checkNote();
    ASSERT_FALSE(noted && sinceNote.expired())
        << "no error within " << kDetectBound.count() << " ms of the disruption ("
        << completedAfterNote << " messages completed after it, one request "
        << (req ? "pending" : "not posted") << ")";
    ASSERT_FALSE(overall.expired()) << "the parent never announced the disruption";
  }
  mr.reset();
  Deadline close(kDetectBound);
  EXPECT_GE(sends ? plugin->closeSend(comm) : plugin->closeRecv(comm), 0);
  report.closeMs = close.elapsed().count();
  EXPECT_LT(close.elapsed(), kDetectBound) << "close after the failure";
  EXPECT_TRUE(io.parent->sendValue(report));
}

void victimBody(PeerIo& io, bool sends) {
  ScopedEnv env;
  Side b = sideB();
  b.peerTimeout = "2s";
  auto plugin = openIn(b, &env);
  ASSERT_TRUE(plugin);
  const int dev = findDevice(*plugin, "pb0");
  ASSERT_GE(dev, 0);
  void* comm = nullptr;
  if (sends) {
    ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm, dev));
  } else {
    ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm, dev));
  }
  HostBuffer buf(kFailMessage);
  MemReg mr(*plugin, comm, buf.data(), buf.size());
  ASSERT_TRUE(mr.ok());
  if (sends) {
    ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comm, buf.data(), kFailMessage, mr.handle()));
  } else {
    ASSERT_NO_FATAL_FAILURE(
        recvOne(*plugin, comm, buf.data(), kFailMessage, mr.handle(), kFailMessage));
  }
  const char ready = 'R';
  ASSERT_TRUE(io.parent->sendValue(ready));
  // Stream until an error (then exit: the outcome is not judged) or until SIGKILLed.
  Deadline deadline(kStreamWatchdog);
  while (!deadline.expired()) {
    void* req = nullptr;
    int rc = loader::kSuccess;
    while (req == nullptr && rc == loader::kSuccess && !deadline.expired()) {
      if (sends) {
        rc = plugin->isend(comm, buf.data(), kFailMessage, kTag, mr.handle(), &req);
      } else {
        void* data = buf.data();
        size_t cap = kFailMessage;
        int tag = kTag;
        void* mh = mr.handle();
        rc = plugin->irecv(comm, 1, &data, &cap, &tag, &mh, &req);
      }
    }
    if (rc != loader::kSuccess || req == nullptr) return;
    Completion c = waitRequest(*plugin, req, deadline);
    if (c.rc != loader::kSuccess) return;
  }
}

using FailureParam = std::tuple<Disruption, bool>;  // what happens, survivor sends

class NetnsFailure : public Netns, public ::testing::WithParamInterface<FailureParam> {};

void runFailure(Disruption what, bool survivorSends) {
  PeerPair pair(
      kVersion, [&](PeerIo& io) { survivorBody(io, survivorSends); },
      [&](PeerIo& io) { victimBody(io, !survivorSends); }, kStreamWatchdog);
  char note = 0;
  ASSERT_TRUE(pair.controlA().recvValue(&note, kOpTimeout * 2)) << "survivor did not get ready";
  ASSERT_TRUE(pair.controlB().recvValue(&note, kOpTimeout * 2)) << "victim did not get ready";
  const char disrupting = 'K';
  ASSERT_TRUE(pair.controlA().sendValue(disrupting)) << "survivor already gone";
  if (what == Disruption::kKillPeer) {
    pair.b().kill(SIGKILL);
    EXPECT_TRUE(pair.b().wait(kOpTimeout).killedBy(SIGKILL))
        << "victim " << pair.b().outcome().describe();
  } else {
    ScriptResult r = runScript({"run", "B", "ip", "link", "set", "pb0", "down"});
    ASSERT_EQ(r.exitCode, 0) << "ip link set pb0 down: " << r.output;
  }
  FailureReport report;
  const bool reported = pair.controlA().recvValue(&report, kDetectBound + kOpTimeout);
  pair.a().wait(kOpTimeout);
  if (!pair.b().finished()) {  // link down: the victim may still be waiting on its dead link
    pair.b().kill(SIGKILL);
    pair.b().wait(kOpTimeout);
  }
  EXPECT_TRUE(pair.a().outcome().ok()) << "survivor " << pair.a().outcome().describe();
  ASSERT_TRUE(reported) << "the survivor reported no error";
  std::printf("[   INFO   ] survivor (%s) got rc %d %lld ms after the %s; close took %lld ms\n",
              survivorSends ? "sender" : "receiver", report.rc, report.msAfterNote,
              what == Disruption::kKillPeer ? "SIGKILL" : "link down", report.closeMs);
  EXPECT_TRUE(report.rc == loader::kRemoteError || report.rc == loader::kSystemError)
      << "error " << report.rc << ", expected ncclRemoteError(6) or ncclSystemError(2)";
  EXPECT_LT(report.msAfterNote, kDetectBound.count()) << "error reported too late";
}

// While 8 MiB messages stream over pa0/pb0, the peer in pactB is SIGKILLed (its kernel closes its
// sockets: FIN/RST over the veth) or pb0 is set down (nothing is closed, packets just vanish);
// the survivor's test() must fail within kDetectBound (10 s; PACT_PEER_TIMEOUT=2s on both sides),
// never hang, and close must return promptly after that.
TEST_P(NetnsFailure, SurvivorSeesErrorWithinBound) {
  ASSERT_NO_FATAL_FAILURE(up({}));
  runFailure(std::get<0>(GetParam()), std::get<1>(GetParam()));
}

std::string failureName(const ::testing::TestParamInfo<FailureParam>& info) {
  return std::string(std::get<0>(info.param) == Disruption::kKillPeer ? "PeerKilled"
                                                                      : "LinkDown") +
         (std::get<1>(info.param) ? "_SurvivorSends" : "_SurvivorReceives");
}

INSTANTIATE_TEST_SUITE_P(Kill, NetnsFailure,
                         ::testing::Combine(::testing::Values(Disruption::kKillPeer),
                                            ::testing::Bool()),
                         failureName);
// A dead link: pb0 set down (no process dies, no socket closes, no FIN/RST ever arrives) with
// PACT_PEER_TIMEOUT=2s. Before the control socket had TCP keepalive the survivor waited 150 s+
// (measured); now it fails in about 3 s, in both directions.
INSTANTIATE_TEST_SUITE_P(Link, NetnsFailure,
                         ::testing::Combine(::testing::Values(Disruption::kLinkDown),
                                            ::testing::Bool()),
                         failureName);

// ---- d. two devices -----------------------------------------------------------------------------

// Two pairs; PACT_NET_DEVICES names both links on each side (UCX_NET_DEVICES unset, so the plugin
// pins each device's UCX context itself). devices() is 2 with distinct names and GUIDs, and a
// transfer over each device crosses that device's link and not the other one.
constexpr size_t kPerDevice = 8 << 20;

void checkTwoDevices(NetPlugin& plugin, const std::string& prefix) {
  int n = 0;
  ASSERT_EQ(plugin.devices(&n), loader::kSuccess);
  ASSERT_EQ(n, 2) << "devices() with PACT_NET_DEVICES=" << prefix << "0," << prefix << "1";
  loader::Properties p[2];
  for (int d = 0; d < 2; ++d) ASSERT_EQ(plugin.getProperties(d, &p[d]), loader::kSuccess);
  EXPECT_EQ((std::set<std::string>{p[0].name, p[1].name}),
            (std::set<std::string>{prefix + "0", prefix + "1"}));
  EXPECT_NE(p[0].guid, p[1].guid) << "both devices report GUID " << p[0].guid;
  EXPECT_NE(p[0].guid, 0u);
  EXPECT_NE(p[1].guid, 0u);
}

// The plugin of side A (pa0, pa1) or B (pb0, pb1) on both pairs' devices, UCX left to choose;
// userUcx: also the user's UCX_NET_DEVICES naming pair 0 only (a launch script's setting).
std::unique_ptr<NetPlugin> openOnBothDevices(bool isA, ScopedEnv* env, bool userUcx = false) {
  Side side = isA ? sideA("pa0,pa1") : sideB("pb0,pb1");
  side.pinUcx = false;
  if (userUcx) side.userUcx = isA ? "pa0" : "pb0";
  return openIn(side, env);
}

// A comm over each of the two pairs' devices: A (pa0, pa1) accepts, B (pb0, pb1) connects.
void commsOnBothDevices(NetPlugin& plugin, PeerIo& io, bool accept, void* comms[2]) {
  for (int i = 0; i < 2; ++i) {
    const int dev = findDevice(plugin, (accept ? "pa" : "pb") + std::to_string(i));
    ASSERT_GE(dev, 0);
    if (accept) {
      ASSERT_NO_FATAL_FAILURE(acceptPeer(plugin, *io.peer, &comms[i], dev));
    } else {
      ASSERT_NO_FATAL_FAILURE(connectPeer(plugin, *io.peer, &comms[i], dev));
    }
  }
}

// Without and with the user's UCX_NET_DEVICES naming pair 0 only: each device's traffic still
// crosses its own link (its UCX context is pinned to it; before, the user's variable won and
// device 1's transfer went over pair 0, two NICs reported for one port).
class NetnsTwoDevices : public Netns, public ::testing::WithParamInterface<bool> {};

TEST_P(NetnsTwoDevices, EachDevicesTrafficCrossesItsOwnLink) {
  const bool userUcx = GetParam();
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2"}));
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        ScopedEnv env;
        auto plugin = openOnBothDevices(true, &env, userUcx);
        ASSERT_TRUE(plugin);
        ASSERT_NO_FATAL_FAILURE(checkTwoDevices(*plugin, "pa"));
        // Both comms first, then one transfer on each, then both closes: the peer keeps both
        // devices progressed until the end (see DISABLED_CloseWhilePeerDeviceIdle for why).
        void* comms[2] = {};
        ASSERT_NO_FATAL_FAILURE(commsOnBothDevices(*plugin, io, true, comms));
        HostBuffer buf(kPerDevice);
        for (int i = 0; i < 2; ++i) {
          const std::string link = "pa" + std::to_string(i), other = "pa" + std::to_string(1 - i);
          const uint64_t rx0 = linkCounter(link, "rx_bytes");
          const uint64_t otherRx0 = linkCounter(other, "rx_bytes");
          {
            MemReg mr(*plugin, comms[i], buf.data(), buf.size());
            ASSERT_TRUE(mr.ok());
            std::memset(buf.data(), kPoison, buf.size());
            ASSERT_NO_FATAL_FAILURE(
                recvOne(*plugin, comms[i], buf.data(), kPerDevice, mr.handle(), kPerDevice));
            EXPECT_TRUE(matchesPattern(buf.data(), kPerDevice, 100 + static_cast<uint64_t>(i)))
                << "transfer over " << link;
          }
          const uint64_t rx = linkCounter(link, "rx_bytes") - rx0;
          const uint64_t otherRx = linkCounter(other, "rx_bytes") - otherRx0;
          std::printf("[   INFO   ] device %s: %" PRIu64 " bytes in on %s, %" PRIu64 " on %s\n",
                      link.c_str(), rx, link.c_str(), otherRx, other.c_str());
          EXPECT_GE(rx, kPerDevice) << "the transfer over device " << link << " did not cross it";
          EXPECT_LT(otherRx, kPerDevice / 8) << "the transfer over " << link << " used " << other;
        }
        notifyDone(*io.peer);
        for (void* c : comms) EXPECT_EQ(plugin->closeRecv(c), loader::kSuccess) << "closeRecv";
      },
      [&](PeerIo& io) {
        ScopedEnv env;
        auto plugin = openOnBothDevices(false, &env, userUcx);
        ASSERT_TRUE(plugin);
        ASSERT_NO_FATAL_FAILURE(checkTwoDevices(*plugin, "pb"));
        void* comms[2] = {};
        ASSERT_NO_FATAL_FAILURE(commsOnBothDevices(*plugin, io, false, comms));
        HostBuffer buf(kPerDevice);
        for (int i = 0; i < 2; ++i) {
          MemReg mr(*plugin, comms[i], buf.data(), buf.size());
          ASSERT_TRUE(mr.ok());
          fillPattern(buf.data(), kPerDevice, 100 + static_cast<uint64_t>(i));
          ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comms[i], buf.data(), kPerDevice, mr.handle()));
        }
        awaitDone(*io.peer);
        for (void* c : comms) EXPECT_EQ(plugin->closeSend(c), loader::kSuccess) << "closeSend";
      });
  pair.expectSuccess();
}

INSTANTIATE_TEST_SUITE_P(UserUcxNetDevices, NetnsTwoDevices, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "NamesPair0Only" : "Unset");
                         });

// A symbol of the plugin the harness opened: the loader does not expose its dlopen handle, so
// look the already-loaded library up again (RTLD_NOLOAD: no second copy).
void* pluginSymbol(const char* name) {
  void* h = ::dlopen(pluginPath().c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) {
    ADD_FAILURE() << "dlopen(" << pluginPath() << ", RTLD_NOLOAD): " << ::dlerror();
    return nullptr;
  }
  void* fn = ::dlsym(h, name);
  ::dlclose(h);  // drops only the reference taken here
  if (fn == nullptr) ADD_FAILURE() << "the plugin exports no " << name;
  return fn;
}

// TCP_INFO in the metrics (telemetry/tcp_info.h): with 3% of the packets into each namespace on
// pair 0 dropped and pair 1 clean, the sender streams 24 MiB over each device; its metrics file
// (rewritten every 50 ms, once by pact_plugin_metrics_write while the connections are still open,
// and once more when the plugin finalizes) counts TCP retransmits on pb0, where the loss is, and
// (next to) none on pb1. The explicit write is what the test relies on: on a loaded machine the
// exporter's thread may not run between the stream's start and the close, and a connection never
// read has no retransmits to keep.
TEST_F(Netns, TcpRetransmitsShowOnTheLossyDevice) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--loss", "3"}));
  constexpr int kMessages = 3;
  char dir[] = "/tmp/pact-netns-metrics-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/b.prom";
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        ScopedEnv env;
        auto plugin = openOnBothDevices(true, &env);
        ASSERT_TRUE(plugin);
        void* comms[2] = {};
        ASSERT_NO_FATAL_FAILURE(commsOnBothDevices(*plugin, io, true, comms));
        HostBuffer buf(kPerDevice);
        for (int i = 0; i < 2; ++i) {
          MemReg mr(*plugin, comms[i], buf.data(), buf.size());
          ASSERT_TRUE(mr.ok());
          for (int m = 0; m < kMessages; ++m)
            ASSERT_NO_FATAL_FAILURE(recvOne(*plugin, comms[i], buf.data(), kPerDevice, mr.handle(), kPerDevice));
        }
        notifyDone(*io.peer);
        for (void* c : comms) EXPECT_EQ(plugin->closeRecv(c), loader::kSuccess) << "closeRecv";
      },
      [&](PeerIo& io) {
        ScopedEnv env;
        env.set("PACT_METRICS_FILE", file);
        env.set("PACT_METRICS_INTERVAL", "50ms");
        auto plugin = openOnBothDevices(false, &env);
        ASSERT_TRUE(plugin);
        void* comms[2] = {};
        ASSERT_NO_FATAL_FAILURE(commsOnBothDevices(*plugin, io, false, comms));
        HostBuffer buf(kPerDevice);
        fillPattern(buf.data(), kPerDevice, 5);
        for (int i = 0; i < 2; ++i) {
          MemReg mr(*plugin, comms[i], buf.data(), buf.size());
          ASSERT_TRUE(mr.ok());
          for (int m = 0; m < kMessages; ++m)
            ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comms[i], buf.data(), kPerDevice, mr.handle()));
        }
        awaitDone(*io.peer);
        auto write = reinterpret_cast<int (*)(const char*)>(pluginSymbol("pact_plugin_metrics_write"));
        ASSERT_NE(write, nullptr);
        EXPECT_EQ(write(nullptr), 0) << "pact_plugin_metrics_write";  // connections open: read now
        for (void* c : comms) EXPECT_EQ(plugin->closeSend(c), loader::kSuccess) << "closeSend";
        plugin.reset();  // finalize: the last write of the file
        std::map<std::string, long long> retrans;
        std::ifstream in(file);
        for (std::string line; std::getline(in, line);)
          for (const char* dev : {"pb0", "pb1"})
            if (line.starts_with(std::string("pact_tcp_retransmits_total{device=\"") + dev + "\"} "))
              retrans[dev] = std::atoll(line.substr(line.rfind(' ') + 1).c_str());
        std::printf("[   INFO   ] TCP retransmits of the sender: pb0 (3%% loss) %lld, pb1 (none) %lld\n",
                    retrans.count("pb0") ? retrans["pb0"] : -1, retrans.count("pb1") ? retrans["pb1"] : -1);
        if (!(retrans.count("pb0") && retrans.count("pb1"))) {
          std::ifstream again(file);
          std::stringstream text;
          text << again.rdbuf();
          FAIL() << "no pact_tcp_retransmits_total for both devices in " << file << ":\n" << text.str();
        }
        EXPECT_GT(retrans["pb0"], 0) << "the loss on pair 0 shows no retransmit on pb0";
        EXPECT_GT(retrans["pb0"], 4 * retrans["pb1"]) << "retransmits not on the lossy device";
      });
  pair.expectSuccess(kStreamPairTimeout);
  std::filesystem::remove_all(dir);
}

// ---- e. traffic class: unordered, two lanes ---------------------------------------------------

#ifdef PACT_NETNS_TC_VAR
pact_comm_stats_fn statsFunction() {
  return reinterpret_cast<pact_comm_stats_fn>(pluginSymbol("pact_comm_stats"));
}

struct TcReport {
  StreamReport stream;
  pact_comm_stats_t stats{};
  int statsRc = -100;
  uint64_t rx[2] = {};  // rx_bytes growth of pa0 / pa1 (A)
};

constexpr const char* kTcValue = "unordered,lanes=2,chunk=64K";

// The 64-message stream on an unordered traffic class with two lanes over a virtual device that
// fuses pa0 and pa1; pa0 is slowed to 100 Mbit/s, pa1 runs at 1 Gbit/s (tbf on both).
void runTwoLaneStream(TcReport* recv, TcReport* send) {
  auto body = [](PeerIo& io, bool isA) {
    Side side = isA ? sideA("pa0,pa1") : sideB("pb0,pb1");
    side.pinUcx = false;
    side.tc = kTcValue;
    ScopedEnv env;
    auto plugin = openIn(side, &env);
    ASSERT_TRUE(plugin);
    auto stats = statsFunction();
    ASSERT_NE(stats, nullptr);
    ASSERT_TRUE(plugin->hasMakeVDevice());
    const std::string p = isA ? "pa" : "pb";
    const int members[2] = {findDevice(*plugin, p + "0"), findDevice(*plugin, p + "1")};
    ASSERT_TRUE(members[0] >= 0 && members[1] >= 0);
    int vdev = -1;
    ASSERT_EQ(plugin->makeVDevice(&vdev, 2, members), loader::kSuccess);
    void* comm = nullptr;
    TcReport report;
    if (isA) {
      ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm, vdev));
      const uint64_t rx0[2] = {linkCounter("pa0", "rx_bytes"), linkCounter("pa1", "rx_bytes")};
      ASSERT_NO_FATAL_FAILURE(receiveStream(*plugin, comm, *io.peer, "", &report.stream));
      for (int i = 0; i < 2; ++i) {
        report.rx[i] = linkCounter("pa" + std::to_string(i), "rx_bytes") - rx0[i];
      }
    } else {
      ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm, vdev));
      ASSERT_NO_FATAL_FAILURE(sendStream(*plugin, comm, *io.peer));
    }
    report.statsRc = stats(comm, &report.stats);
    EXPECT_TRUE(io.parent->sendValue(report));
    if (isA) {
      notifyDone(*io.peer);
      EXPECT_EQ(plugin->closeRecv(comm), loader::kSuccess) << "closeRecv";
    } else {
      awaitDone(*io.peer);
      EXPECT_EQ(plugin->closeSend(comm), loader::kSuccess) << "closeSend";
    }
  };
  PeerPair pair(
      kVersion, [&](PeerIo& io) { body(io, true); }, [&](PeerIo& io) { body(io, false); },
      kStreamWatchdog);
  const bool gotRecv = pair.controlA().recvValue(recv, kStreamPairTimeout);
  const bool gotSend = pair.controlB().recvValue(send, kStreamPairTimeout);
  pair.expectSuccess(kStreamPairTimeout);
  ASSERT_TRUE(gotRecv && gotSend) << "a peer did not report";
  ASSERT_EQ(recv->stream.bytes, streamBytes());
  ASSERT_EQ(recv->statsRc, 0) << "pact_comm_stats(recv comm)";
  ASSERT_EQ(send->statsRc, 0) << "pact_comm_stats(send comm)";
  const auto& ss = send->stats;
  std::printf("[   INFO   ] %s: %.1f Mbit/s; pa0 (100 Mbit/s) +%" PRIu64 " B, pa1 (1 Gbit/s) +%"
              PRIu64 " B; lane bytes %" PRIu64 " / %" PRIu64 ", lane pieces %" PRIu64 " / %"
              PRIu64 "; recv: %" PRIu64 " messages, %" PRIu64 " pieces out of order\n",
              kTcValue, mbps(recv->stream), recv->rx[0], recv->rx[1], ss.lane_bytes[0],
              ss.lane_bytes[1], ss.lane_pieces[0], ss.lane_pieces[1], recv->stats.messages,
              recv->stats.pieces_out_of_order);
}

constexpr const char* kTwoLaneSetup[] = {"--pairs", "2", "--rate", "1gbit", "--slow-rate",
                                         "100mbit"};

// Every message arrives byte-exact in its own receive (receiveStream), pact_comm_stats reports
// the class (unordered, 2 lanes, 64K chunks, 64 messages) on both comms, and both lanes and both
// links carried data.
TEST_F(Netns, UnorderedTwoLanesOverSlowedVDevice) {
  ASSERT_NO_FATAL_FAILURE(up({std::begin(kTwoLaneSetup), std::end(kTwoLaneSetup)}));
  TcReport recv, send;
  ASSERT_NO_FATAL_FAILURE(runTwoLaneStream(&recv, &send));
  for (const auto* st : {&send.stats, &recv.stats}) {
    const char* who = st == &send.stats ? "send comm" : "recv comm";
    EXPECT_EQ(st->unordered, 1) << who;
    EXPECT_EQ(st->lanes, 2) << who;
    EXPECT_EQ(st->messages, static_cast<uint64_t>(kMessages)) << who;
  }
  const auto& ss = send.stats;
  EXPECT_EQ(ss.chunk, 64u << 10);
  EXPECT_GT(ss.lane_bytes[0], 0u);
  EXPECT_GT(ss.lane_bytes[1], 0u);
  EXPECT_EQ(ss.lane_bytes[0] + ss.lane_bytes[1], streamBytes()) << "bytes given to the lanes";
  EXPECT_EQ(ss.lane_pieces[0] + ss.lane_pieces[1], recv.stats.pieces) << "pieces sent vs received";
  EXPECT_GT(recv.rx[0], 0u) << "nothing crossed pa0";
  EXPECT_GT(recv.rx[1], 0u) << "nothing crossed pa1";
  EXPECT_GE(recv.rx[0] + recv.rx[1], streamBytes()) << "the payload did not cross the veths";
}

// Adaptive steering (the default `steer`) over a 100 Mbit/s + 1 Gbit/s pair of rails: the fast
// rail must carry at least twice the bytes of the slow one. With a per-piece throughput estimate
// the split was 51/49 (184-219 Mbit/s, twice the slow rail); with the windowed estimate it is
// about 1/5 (560-680 Mbit/s).
//
// The estimate measures what the rails deliver, so a CPU starved by other work (two cores shared
// with a build) flattens it: a CI run once saw 37/24 MB. Hence expectFastRailFavoured's retries.
TEST_F(Netns, AdaptiveSteeringFavoursFastRail) {
  ASSERT_NO_FATAL_FAILURE(up({std::begin(kTwoLaneSetup), std::end(kTwoLaneSetup)}));
  // Behaviour, not speed (speed is perf/'s job): the fast rail carries most of the bytes.
  expectFastRailFavoured([] {
    TcReport recv, send;
    runTwoLaneStream(&recv, &send);
    return std::array<uint64_t, 2>{recv.rx[0], recv.rx[1]};
  });
}
#endif  // PACT_NETNS_TC_VAR

// ---- found by this suite ------------------------------------------------------------------------

// Found by this suite and fixed (the abandoned close request is now released; the graceful
// close is bounded at 500 ms and skipped once the peer has said goodbye).
//
// B closes its send comm after the transfer while A, having closed its receive comm, keeps its
// plugin (and the device) open without progressing that device any more, as an NCCL rank does
// between finishing with a peer and finalizing. Observed: B's closeSend blocks 5 s ("ucx request
// ... still in progress after 5000 ms; abandoned", src/ucx/worker.cpp waitRequest on the
// endpoint close), and later, when B's plugin is finalized, UCX aborts the process in
// ucp_worker_destroy -> ucp_ep_destroy_base: "Assertion `req->flags & UCP_REQUEST_FLAG_RELEASED'
// failed": the abandoned request was never handed back with ucp_request_free (adding that call
// to waitRequest's abandon branch removes the abort; the 5 s close remains).
// Not specific to namespaces: the same happens over lo.
// Expected: closeSend returns within 1 s, and B finalizes and exits cleanly.
TEST_F(Netns, CloseWhilePeerDeviceIdle) {
  constexpr size_t kSize = 1 << 20;
  constexpr auto kCloseBound = std::chrono::milliseconds(1000);
  ASSERT_NO_FATAL_FAILURE(up({}));
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        ScopedEnv env;
        auto plugin = openIn(sideA(), &env);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm, findDevice(*plugin, "pa0")));
        HostBuffer buf(kSize);
        {
          MemReg mr(*plugin, comm, buf.data(), buf.size());
          ASSERT_NO_FATAL_FAILURE(recvOne(*plugin, comm, buf.data(), kSize, mr.handle(), kSize));
        }
        notifyDone(*io.peer);
        EXPECT_EQ(plugin->closeRecv(comm), loader::kSuccess);
        // Plugin still open, device not progressed, until B is through (EOF when B exits).
        char note = 0;
        EXPECT_TRUE(io.peer->recvValue(&note, kStreamBudget)) << "B did not finish";
      },
      [&](PeerIo& io) {
        ScopedEnv env;
        auto plugin = openIn(sideB(), &env);
        ASSERT_TRUE(plugin);
        void* comm = nullptr;
        ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm, findDevice(*plugin, "pb0")));
        HostBuffer buf(kSize);
        {
          MemReg mr(*plugin, comm, buf.data(), buf.size());
          ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comm, buf.data(), kSize, mr.handle()));
        }
        awaitDone(*io.peer);
        Deadline close(kStreamBudget);
        EXPECT_EQ(plugin->closeSend(comm), loader::kSuccess);
        std::printf("[   INFO   ] closeSend took %lld ms\n",
                    static_cast<long long>(close.elapsed().count()));
        EXPECT_LT(close.elapsed(), kCloseBound) << "closeSend while the peer's device is idle";
        plugin.reset();  // finalize: the worker is destroyed here
        const char note = 'F';
        EXPECT_TRUE(io.peer->sendValue(note));
      },
      kStreamWatchdog);
  pair.expectSuccess(kStreamPairTimeout);
}

}  // namespace
}  // namespace pact::netns_test

// ---- the transfer engine across the namespaces ------------------------------------------------

namespace pact::netns_test {
namespace {

// Engine KV transfers between an engine in pactA (receiver, listening on 10.77.0.1) and one in
// pactB (sender).
struct EngineKvRun {
  const char* kvClass;     // PACT_TC_KV
  std::string devicesA;    // PACT_NET_DEVICES of each side (several: fused into rails)
  std::string devicesB;
  bool pinUcx = true;      // UCX_NET_DEVICES = the devices (off for rails: each rail pins itself)
  int transfers = 16;
  uint64_t size = 1u << 20;
};
struct EngineKvReport {
  int committed = 0;
  int bad = 0;
  uint64_t rxBytes[2] = {};  // rx_bytes growth of pa0 / pa1 (A)
};

EngineKvReport runEngineKv(const EngineKvRun& run) {
  const auto enter = [&](const Side& side, const std::string& devices, ScopedEnv* env) {
    EXPECT_EQ(::prctl(PR_SET_PDEATHSIG, SIGKILL), 0);
    enterNamespace(side.ns, side.link);
    env->set("UCX_TLS", "tcp");
    env->set("PACT_NET_DEVICES", devices);
    env->set("UCX_NET_DEVICES", run.pinUcx ? std::optional<std::string>(devices) : std::nullopt);
    env->set("PACT_TC_KV", run.kvClass);
  };
  const int n = run.transfers;
  const uint64_t size = run.size;
  PeerPair pair(
      kVersion,
      [&](PeerIo& io) {
        ScopedEnv env;
        enter(sideA(), run.devicesA, &env);
        pact_engine_t e = makeEngine("netns-rx", "10.77.0.1");
        ASSERT_NE(e, nullptr);
        char addr[128];
        ASSERT_EQ(pact_engine_address(e, addr, sizeof addr), PACT_OK);
        ASSERT_TRUE(io.peer->send(addr, sizeof addr));
        std::vector<uint8_t> mem(static_cast<size_t>(n) * size);
        pact_mr_t mr = nullptr;
        ASSERT_EQ(pact_mem_register(e, mem.data(), mem.size(), &mr), PACT_OK);
        const bool twoRails = run.devicesA.find(',') != std::string::npos;
        const uint64_t rx0[2] = {linkCounter("pa0", "rx_bytes"),
                                 twoRails ? linkCounter("pa1", "rx_bytes") : 0};
        const std::vector<pact_xfer_t> xs = expectKv(e, mr, n, size);
        ASSERT_EQ(xs.size(), static_cast<size_t>(n));
        EngineKvReport r;
        for (int i = 0; i < n; ++i) {
          pact_xfer_info_t info{};
          EXPECT_EQ(pact_xfer_wait(e, xs[static_cast<size_t>(i)], 40000, &info), PACT_OK);
          r.committed += info.result == PACT_OK;
          r.bad += matchesPattern(mem.data() + static_cast<size_t>(i) * size, size,
                                  static_cast<uint64_t>(i) + 1) ? 0 : 1;
          EXPECT_EQ(pact_xfer_release(e, xs[static_cast<size_t>(i)]), PACT_OK);
        }
        r.rxBytes[0] = linkCounter("pa0", "rx_bytes") - rx0[0];
        if (twoRails) r.rxBytes[1] = linkCounter("pa1", "rx_bytes") - rx0[1];
        EXPECT_TRUE(io.parent->sendValue(r));
        notifyDone(*io.peer);
        EXPECT_EQ(pact_mem_deregister(e, mr), PACT_OK);
        pact_engine_destroy(e);
      },
      [&](PeerIo& io) {
        ScopedEnv env;
        enter(sideB(), run.devicesB, &env);
        pact_engine_t e = makeEngine("netns-tx", nullptr);
        ASSERT_NE(e, nullptr);
        char addr[128];
        ASSERT_TRUE(io.peer->recv(addr, sizeof addr, kOpTimeout));
        pact_peer_t peer = 0;
        ASSERT_EQ(pact_connect(e, addr, 20000, &peer), PACT_OK) << pact_last_error();
        std::vector<uint8_t> mem(static_cast<size_t>(n) * size);
        pact_mr_t mr = nullptr;
        ASSERT_EQ(pact_mem_register(e, mem.data(), mem.size(), &mr), PACT_OK);
        std::vector<pact_xfer_t> xs;
        for (int i = 0; i < n; ++i) {
          fillPattern(mem.data() + static_cast<size_t>(i) * size, size, static_cast<uint64_t>(i) + 1);
          pact_key_t k{static_cast<uint64_t>(i) + 1, 0, 0, 0};
          pact_block_t b{mr, static_cast<uint64_t>(i) * size, size};
          pact_xfer_t x = 0;
          ASSERT_EQ(pact_send(e, peer, &k, &b, 1, 0, "KV", &x), PACT_OK) << pact_last_error();
          xs.push_back(x);
        }
        for (pact_xfer_t x : xs) {
          pact_xfer_info_t info{};
          EXPECT_EQ(pact_xfer_wait(e, x, 40000, &info), PACT_OK);
          EXPECT_EQ(info.result, PACT_OK);
          EXPECT_EQ(pact_xfer_release(e, x), PACT_OK);
        }
        awaitDone(*io.peer);
        EXPECT_EQ(pact_mem_deregister(e, mr), PACT_OK);
        pact_engine_destroy(e);
      },
      kStreamWatchdog);
  EngineKvReport r;
  EXPECT_TRUE(pair.controlA().recvValue(&r, kStreamPairTimeout));
  pair.expectSuccess(kStreamPairTimeout);
  return r;
}

// Over pair 0 with 1% loss and a 200 Mbit/s limit: every transfer commits byte-exact (crc32c
// checked), the bytes really cross pa0 and the loss rule really dropped packets.
TEST_F(Netns, EngineTransfersCommitAcrossALossyRateLimitedVeth) {
  ASSERT_NO_FATAL_FAILURE(up({"--loss", "1", "--rate", "200mbit"}));
  constexpr int kTransfers = 16;
  constexpr uint64_t kSize = 1u << 20;
  const EngineKvReport r = runEngineKv({"verify=crc32c,retries=3", "pa0", "pb0", true, kTransfers, kSize});
  const long long drops = lossDrops("A") + lossDrops("B");
  std::printf("[   INFO   ] engine: %d/%d transfers of 1 MiB committed across pa0 (rx +%" PRIu64
              " bytes), %lld packets dropped by the loss rule\n",
              r.committed, kTransfers, r.rxBytes[0], drops);
  EXPECT_EQ(r.committed, kTransfers);
  EXPECT_EQ(r.bad, 0);
  EXPECT_GE(r.rxBytes[0], kTransfers * kSize) << "the payload did not cross pa0";
  EXPECT_GT(drops, 0) << "the loss rule dropped nothing: the test proved nothing";
}

// An engine KV class `unordered,lanes=2` over a device of two rails (PACT_NET_DEVICES=pa0,pa1:
// the engine fuses them, a lane per rail), pa0 at 100 Mbit/s and pa1 at 1 Gbit/s: every transfer
// commits byte-exact, both rails carry pieces, and the adaptive steering gives the fast rail
// most of the bytes (behaviour, not speed: the figures are perf/netns-rails.sh's).
TEST_F(Netns, EngineKvUnorderedTwoLanesOverTwoRailsFavoursTheFastRail) {
  ASSERT_NO_FATAL_FAILURE(up({"--pairs", "2", "--rate", "1gbit", "--slow-rate", "100mbit"}));
  constexpr int kTransfers = 16;
  constexpr uint64_t kSize = 1u << 20;
  // Every run must commit byte-exact over both rails (a CI run once split 11.1/5.7 MB where this
  // machine sees 13-14/2.6-3.9: hence the retries of expectFastRailFavoured).
  expectFastRailFavoured([&] {
    const EngineKvReport r =
        runEngineKv({"unordered,lanes=2,chunk=64K", "pa0,pa1", "pb0,pb1", false, kTransfers, kSize});
    std::printf("[   INFO   ] engine KV over two rails: pa0 (100 Mbit/s) +%" PRIu64
                " B, pa1 (1 Gbit/s) +%" PRIu64 " B\n", r.rxBytes[0], r.rxBytes[1]);
    EXPECT_EQ(r.committed, kTransfers);
    EXPECT_EQ(r.bad, 0);
    EXPECT_GT(r.rxBytes[0], 0u) << "nothing crossed pa0";
    EXPECT_GT(r.rxBytes[1], 0u) << "nothing crossed pa1";
    EXPECT_GE(r.rxBytes[0] + r.rxBytes[1], kTransfers * kSize) << "the payload did not cross the veths";
    return std::array<uint64_t, 2>{r.rxBytes[0], r.rxBytes[1]};
  });
}

}  // namespace
}  // namespace pact::netns_test
