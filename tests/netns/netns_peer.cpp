// Fixture, peers and message stream of the netns suite (see netns_peer.h).
#include "tests/netns/netns_peer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace pact::netns_test {

using namespace abi_test;  // NOLINT: the harness's NetPlugin, buffers, helpers
using test::ScopedEnv;

// ---- the suite's lock and fixture -----------------------------------------------------------

// The namespace names are fixed, so two runs of this suite at once (two build dirs) would tear
// down each other's links. Each test holds an exclusive flock on this file from `up` to `down`.
constexpr const char* kLockPath = "/run/lock/pact-netns.lock";
constexpr auto kLockWait = std::chrono::milliseconds(150000);

void Netns::SetUp() {
  if (!checkFailure().empty()) FAIL() << checkFailure();
  if (const auto& why = unavailableReason()) GTEST_SKIP() << *why;
}

void Netns::TearDown() {
  if (built_) {
    ScriptResult r = runScript({"down"});
    EXPECT_EQ(r.exitCode, 0) << "ci/netns.sh down: " << r.output;
  }
  if (lockFd_ >= 0) ::close(lockFd_);  // releases the flock
}

void Netns::up(const std::vector<std::string>& options) {
  ASSERT_NO_FATAL_FAILURE(lock());
  std::vector<std::string> args{"up"};
  args.insert(args.end(), options.begin(), options.end());
  built_ = true;  // also when up fails half-way: down is idempotent
  ScriptResult r = runScript(args);
  std::string cmd = "ci/netns.sh";
  for (const auto& a : args) cmd += " " + a;
  ASSERT_FALSE(r.timedOut) << cmd << " timed out: " << r.output;
  ASSERT_EQ(r.exitCode, 0) << cmd << ": " << r.output;
}

void Netns::lock() {
  lockFd_ = ::open(kLockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(lockFd_, 0) << "open " << kLockPath << ": " << std::strerror(errno);
  // Waiting for ANOTHER process's test (not a synchronisation inside this test): try, then
  // retry every 100 ms within the bound.
  test::Deadline deadline(kLockWait);
  while (::flock(lockFd_, LOCK_EX | LOCK_NB) != 0) {
    ASSERT_EQ(errno, EWOULDBLOCK) << "flock " << kLockPath << ": " << std::strerror(errno);
    ASSERT_FALSE(deadline.expired())
        << kLockPath << " held by another run of the netns suite for " << kLockWait.count()
        << " ms";
    ::poll(nullptr, 0, 100);
  }
}

bool script(const std::vector<std::string>& args) {
  ScriptResult r = runScript(args);
  std::string cmd = "ci/netns.sh";
  for (const auto& a : args) cmd += " " + a;
  EXPECT_FALSE(r.timedOut) << cmd << " timed out: " << r.output;
  EXPECT_EQ(r.exitCode, 0) << cmd << ": " << r.output;
  return !r.timedOut && r.exitCode == 0;
}

// ---- peers ----------------------------------------------------------------------------------

// The abi harness's (read once, then removed from the environment: the plugin warns about every
// PACT_* name it does not know, in each peer).
const std::string& pluginPath() { return abi_test::pluginPath(); }
// Taken when the binary loads, before any peer (a plugin's or an engine's) is forked.
[[maybe_unused]] const bool kPluginPathTaken = !pluginPath().empty();

std::unique_ptr<NetPlugin> openIn(const Side& side, ScopedEnv* env) {
  pluginPath();
  // A peer must not outlive a gtest process that was killed: it would keep its namespace alive.
  EXPECT_EQ(::prctl(PR_SET_PDEATHSIG, SIGKILL), 0);
  if (::getppid() == 1) return nullptr;  // the parent is already gone
  enterNamespace(side.ns, side.link);
  if (::testing::Test::HasFatalFailure()) return nullptr;
  env->set("UCX_TLS", "tcp");
  env->set("PACT_NET_DEVICES", side.devices);
  env->set("UCX_NET_DEVICES", !side.userUcx.empty() ? std::optional<std::string>(side.userUcx)
                              : side.pinUcx        ? std::optional<std::string>(side.devices)
                                                   : std::nullopt);
  if (!side.peerTimeout.empty()) env->set("PACT_PEER_TIMEOUT", side.peerTimeout);
#ifdef PACT_NETNS_TC_VAR
  if (!side.tc.empty()) env->set(PACT_NETNS_TC_VAR, side.tc);
#endif
  return openPlugin(kVersion);
}

int findDevice(NetPlugin& plugin, const std::string& name) {
  int n = 0;
  EXPECT_EQ(plugin.devices(&n), loader::kSuccess);
  std::string seen;
  for (int d = 0; d < n; ++d) {
    loader::Properties p;
    EXPECT_EQ(plugin.getProperties(d, &p), loader::kSuccess) << "getProperties(" << d << ")";
    if (p.name == name) return d;
    seen += (seen.empty() ? "" : ", ") + p.name;
  }
  ADD_FAILURE() << "no device named " << name << " among " << n << " devices: " << seen;
  return -1;
}

// ---- the message stream ---------------------------------------------------------------------

size_t messageSize(int i) {
  static constexpr size_t kSizes[] = {kMaxMessage, 1,         4096,          65536,
                                      (1 << 20) + 3, 256 << 10, (2 << 20) - 1, 8191};
  return kSizes[static_cast<size_t>(i) % std::size(kSizes)];
}
uint64_t messageSeed(int i) { return 0x6E65746E73ull + static_cast<uint64_t>(i); }

uint64_t streamBytes(const StreamSpec& spec) {
  uint64_t total = 0;
  for (int i = 0; i < spec.messages; ++i) total += spec.size(i);
  return total;
}

Slots::Slots(NetPlugin& plugin, void* comm, size_t size) {
  for (int i = 0; i < kWindow; ++i) {
    bufs.push_back(std::make_unique<HostBuffer>(size));
    regs.push_back(std::make_unique<MemReg>(plugin, comm, bufs.back()->data(), size));
  }
}

bool Slots::ok() const {
  return std::all_of(regs.begin(), regs.end(), [](const auto& r) { return r->ok(); });
}

void receiveStream(NetPlugin& plugin, void* comm, Channel& peer, const std::string& link,
                   StreamReport* report, const StreamSpec& spec,
                   const std::function<void(int)>& received) {
  Slots slots(plugin, comm, kMaxMessage + kGuard);
  ASSERT_TRUE(slots.ok());
  Deadline deadline(spec.budget);
  const int w = std::clamp(spec.window, 1, kWindow);
  void* reqs[kWindow] = {};
  auto post = [&](int i) {
    HostBuffer& b = *slots.bufs[static_cast<size_t>(i % w)];
    std::memset(b.data(), kPoison, b.size());
    void* data = b.data();
    size_t cap = kMaxMessage;
    int tag = kTag;
    void* mh = slots.regs[static_cast<size_t>(i % w)]->handle();
    postRecv(plugin, comm, 1, &data, &cap, &tag, &mh, deadline, &reqs[i % w]);
  };
  for (int i = 0; i < std::min(w, spec.messages); ++i) ASSERT_NO_FATAL_FAILURE(post(i));
  const uint64_t rx0 = link.empty() ? 0 : linkCounter(link, "rx_bytes");
  ASSERT_NO_FATAL_FAILURE(barrier(peer));  // the sender starts now
  Deadline clock(spec.budget);
  long long last = 0;
  for (int i = 0; i < spec.messages; ++i) {
    const size_t size = spec.size(i);
    Completion c = waitRequest(plugin, reqs[i % w], deadline);
    ASSERT_NE(c.rc, kTimedOut) << "message " << i << " (" << size << " bytes) not received after "
                               << clock.elapsed().count() << " ms";
    ASSERT_EQ(c.rc, loader::kSuccess) << "test() of the receive of message " << i;
    ASSERT_TRUE(c.done);
    const long long now = clock.elapsed().count();
    report->maxGapMs = std::max(report->maxGapMs, now - last);
    last = now;
    const char* got = slots.bufs[static_cast<size_t>(i % w)]->data();
    ASSERT_EQ(c.sizes[0], static_cast<int>(size))
        << "receive " << i << " got the size of another message (out of order?)";
    ASSERT_TRUE(matchesPattern(got, size, messageSeed(i))) << "message " << i;
    ASSERT_TRUE(isPoison(got + size, kGuard)) << "bytes after message " << i;
    report->bytes += size;
    if (received) received(i + 1);
    if (i + w < spec.messages) {
      ASSERT_NO_FATAL_FAILURE(post(i + w));
    }
  }
  report->seconds = static_cast<double>(clock.elapsed().count()) / 1000.0;
  if (!link.empty()) report->linkRxBytes = linkCounter(link, "rx_bytes") - rx0;
}

void sendStream(NetPlugin& plugin, void* comm, Channel& peer, const StreamSpec& spec,
                const std::function<void()>& poll) {
  Slots slots(plugin, comm, kMaxMessage);
  ASSERT_TRUE(slots.ok());
  ASSERT_NO_FATAL_FAILURE(barrier(peer));
  Deadline deadline(spec.budget);
  const int w = std::clamp(spec.window, 1, kWindow);
  void* reqs[kWindow] = {};
  auto post = [&](int i) {
    HostBuffer& b = *slots.bufs[static_cast<size_t>(i % w)];
    fillPattern(b.data(), spec.size(i), messageSeed(i));
    postSend(plugin, comm, b.data(), spec.size(i), kTag,
             slots.regs[static_cast<size_t>(i % w)]->handle(), deadline,
             &reqs[i % w]);
  };
  for (int i = 0; i < std::min(w, spec.messages); ++i) ASSERT_NO_FATAL_FAILURE(post(i));
  for (int i = 0; i < spec.messages; ++i) {
    // waitRequest's loop, with the caller's poll between the test() calls.
    int rc = loader::kSuccess;
    int done = 0;
    int sizes[loader::kMaxRecvs];
    for (;;) {
      rc = plugin.test(reqs[i % w], &done, sizes);
      if (rc != loader::kSuccess || done != 0 || deadline.expired()) break;
      if (poll) poll();
    }
    ASSERT_EQ(rc, loader::kSuccess) << "test() of the isend of message " << i;
    ASSERT_NE(done, 0) << "isend of message " << i << ": test() did not report done within "
                       << deadline.elapsed().count() << " ms";
    if (i + w < spec.messages) {
      ASSERT_NO_FATAL_FAILURE(post(i + w));
    }
  }
}

pact_engine_t makeEngine(const char* name, const char* listenIp) {
  pact_engine_config_t c;
  pact_engine_config_init(&c);
  c.name = name;
  c.listen_ip = listenIp;
  c.progress_thread = 1;
  pact_engine_t e = nullptr;
  EXPECT_EQ(pact_engine_create(&c, &e), PACT_OK) << pact_last_error();
  return e;
}

std::vector<pact_xfer_t> expectKv(pact_engine_t e, pact_mr_t mr, int n, uint64_t size) {
  std::vector<pact_xfer_t> xs;
  for (int i = 0; i < n; ++i) {
    pact_key_t k{static_cast<uint64_t>(i) + 1, 0, 0, 0};
    pact_block_t b{mr, static_cast<uint64_t>(i) * size, size};
    pact_xfer_t x = 0;
    const pact_status_t rc = pact_expect(e, &k, &b, 1, 0, "KV", &x);
    EXPECT_EQ(rc, PACT_OK) << pact_last_error();
    if (rc != PACT_OK) break;
    xs.push_back(x);
  }
  return xs;
}

// ---- faults ------------------------------------------------------------------------------------

bool ReceiverNotes::await(int n) {
  int got = 0;
  if (!ch_.recvValue(&got, kStreamBudget)) {
    ADD_FAILURE() << "the receiver did not report " << n << " messages (it died?)";
    return false;
  }
  ended_ = got == kEnd;
  EXPECT_EQ(got, n) << (ended_ ? "the stream ended before the fault point" : "bad note");
  return got == n;
}

bool fault(PeerPair& pair, const std::vector<std::string>& args) {
  const char note = args.back() == "down" || args.back() == "on" ? kNoteDown : kNoteUp;
  pair.controlB().sendValue(note);
  return script(args);
}

std::function<void(PeerPair&, ReceiverNotes&)> linkOutage(int at, const char* rail, std::chrono::milliseconds down,
                                                          bool* outlasted) {
  return [=](PeerPair& pair, ReceiverNotes& notes) {
    if (!notes.await(at) || !fault(pair, {"link", rail, "down"})) return;
    *outlasted = holdFault(pair, down);
    fault(pair, {"link", rail, "up"});
  };
}

}  // namespace pact::netns_test
