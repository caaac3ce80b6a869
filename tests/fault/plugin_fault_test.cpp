// The PACT_FAULT matrix for plugin traffic: each data-path fault, on an ordered and on an
// unordered (two lanes, 64 KiB pieces) class, through the NCCL ABI (v12) over real UCX on
// loopback, in three processes.
//
// F carries the fault (PACT_FAULT is set in its environment only). S is the survivor: it has one
// comm with F and one with the clean process C, and drives both at once. Where the fault lives on
// the sending side, F and C send to S; where it lives on the receiving side (reject), S sends to
// F and to C. Each comm carries the same messages (4 KiB to 3 MiB, each with its own pattern).
// Asserted for every case:
// - every message a receiver completed is byte-exact with the right size (no mis-delivery);
// - the faulty comm either completes every message on both sides, or fails on both sides with
//   ncclRemoteError (never one side done and the other failed), the second side within
//   kAgreeBound of the first;
// - the clean comm completes every message byte-exact, also while its neighbour fails;
// - the fault really happened (F's comm counters), registrations deregister, comms close, and
//   no process holds a comm, registration or request afterwards (pact_plugin_resources; see
//   ucxEndsFailedOperations for the one exception);
// - with kill_after, F dies by SIGKILL and S's comm fails within kill_after + kAgreeBound;
// - the class counters (pact_class_*, read from each process's metrics snapshot) say the same:
//   messages, retransmits and faults of the class, and a failed comm's errors by kind on each side.
// Every wait is bounded; nothing sleeps.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pact/nccl_ext.h"
#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"

namespace pact::abi_test {
namespace {

constexpr int kVersion = 12;
constexpr int kMessages = 48;
constexpr int kEndless = 1 << 30;  // F's stream under kill_after: it runs until the kill
constexpr int kWindow = 4;         // requests in flight per comm
constexpr size_t kCapacity = 4 << 20;
constexpr auto kAgreeBound = std::chrono::milliseconds(1000);
constexpr auto kKillAfter = std::chrono::milliseconds(400);

size_t sizeOf(int i) {
  static constexpr size_t kSizes[] = {4096, 200 << 10, (1 << 20) + 7, 3 << 20};
  return kSizes[i % 4];
}

int64_t nowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// pact_class_errors_total's kinds, in telemetry::ErrorKind's order.
constexpr const char* kErrorKinds[] = {"peer_lost", "peer_abort", "transport", "retries", "refused",
                                       "deadline", "out_of_range", "canceled", "other"};

// The plugin's class counters in this process (every "plugin class" set summed), from its metrics
// snapshot (pact_plugin_metrics_write): what the exposition says, not a struct beside it.
struct ClassStats {
  uint64_t messagesSent = 0, messagesReceived = 0, retransmits = 0, faults = 0;
  uint64_t errors[9] = {};  // by kind, telemetry::ErrorKind's order
  uint64_t errorsOf(const char* kind) const {
    for (size_t k = 0; k < 9; ++k)
      if (std::strcmp(kErrorKinds[k], kind) == 0) return errors[k];
    return ~uint64_t{0};
  }
  uint64_t allErrors() const {
    uint64_t n = 0;
    for (uint64_t e : errors) n += e;
    return n;
  }
};

ClassStats readClassStats(NetPlugin& plugin) {
  const MetricsSnapshot m(plugin);
  const std::string plugin_ = "face=\"plugin\"";
  ClassStats c;
  c.messagesSent = m.total("pact_class_messages_sent_total", plugin_);
  c.messagesReceived = m.total("pact_class_messages_received_total", plugin_);
  c.retransmits = m.total("pact_class_retransmits_total", plugin_);
  c.faults = m.total("pact_class_faults_injected_total", plugin_);
  for (size_t k = 0; k < 9; ++k)
    c.errors[k] = m.total("pact_class_errors_total", std::string("kind=\"") + kErrorKinds[k] + "\"");
  return c;
}

// What one side saw on one comm, sent to the gtest parent.
struct Outcome {
  int completed = 0;      // messages completed (receivers: and verified byte-exact)
  int rc = 0;             // first error (0: none)
  int64_t failedAtUs = 0; // steady clock of that error
  int corrupt = 0;        // receivers: completed messages that were not byte-exact
  pact_comm_stats_t stats{};
  ClassStats cls;  // the process's plugin classes when the stream ended
};

// One comm's stream of messages: keeps kWindow requests in flight, tests them oldest first,
// stops at the first error (errors are sticky).
class Stream {
 public:
  Stream(NetPlugin& plugin, void* comm, bool send, int messages, uint64_t seed)
      : plugin_(plugin), comm_(comm), send_(send), messages_(messages), seed_(seed) {
    for (auto& s : slots_) {
      s.buf = std::make_unique<HostBuffer>(kCapacity + 64);
      s.reg = std::make_unique<MemReg>(plugin, comm, s.buf->data(), s.buf->size());
    }
  }
  bool finished() const { return out_.rc != 0 || out_.completed == messages_; }
  // Posts what the window allows and tests the oldest request once.
  void step() {
    if (finished()) return;
    while (posted_ < messages_ && posted_ - out_.completed < kWindow) {
      Slot& s = slots_[static_cast<size_t>(posted_ % kWindow)];
      const size_t size = sizeOf(posted_);
      void* req = nullptr;
      int rc;
      if (send_) {
        fillPattern(s.buf->data(), size, seed_ + static_cast<uint64_t>(posted_));
        rc = plugin_.isend(comm_, s.buf->data(), size, kTag, s.reg->handle(), &req);
      } else {
        std::memset(s.buf->data(), kPoison, s.buf->size());
        void* data = s.buf->data();
        size_t cap = kCapacity;
        int tag = kTag;
        void* mh = s.reg->handle();
        rc = plugin_.irecv(comm_, 1, &data, &cap, &tag, &mh, &req);
      }
      if (rc != loader::kSuccess) return fail(rc);
      if (req == nullptr) break;  // back-pressure: test first
      s.req = req;
      ++posted_;
    }
    if (posted_ == out_.completed) return;
    Slot& s = slots_[static_cast<size_t>(out_.completed % kWindow)];
    int done = 0, sizes[loader::kMaxRecvs] = {-1};
    const int rc = plugin_.test(s.req, &done, sizes);
    if (rc != loader::kSuccess) return fail(rc);
    if (done == 0) return;
    if (!send_) {
      const int i = out_.completed;
      const size_t size = sizeOf(i);
      const bool exact = sizes[0] == static_cast<int>(size) &&
                         matchesPattern(s.buf->data(), size, seed_ + static_cast<uint64_t>(i)) &&
                         isPoison(s.buf->data() + size, 64);
      if (!exact) ++out_.corrupt;
      EXPECT_TRUE(exact) << "message " << i << " completed with size " << sizes[0] << " (sent "
                         << size << ") or wrong bytes";
    }
    s.req = nullptr;
    ++out_.completed;
  }
  Outcome outcome() {
    auto fn = reinterpret_cast<pact_comm_stats_fn>(plugin_.symbol("pact_comm_stats"));
    EXPECT_TRUE(fn != nullptr && fn(comm_, &out_.stats) == 0) << "pact_comm_stats";
    out_.cls = readClassStats(plugin_);
    return out_;
  }

 private:
  void fail(int rc) {
    out_.rc = rc;
    out_.failedAtUs = nowUs();
  }
  struct Slot {
    std::unique_ptr<HostBuffer> buf;
    std::unique_ptr<MemReg> reg;
    void* req = nullptr;
  };
  NetPlugin& plugin_;
  void* comm_;
  bool send_;
  int messages_;
  uint64_t seed_;
  int posted_ = 0;
  Slot slots_[kWindow];
  Outcome out_;
};

// Drives the streams until all are finished or the deadline passes.
void drive(std::vector<Stream*> streams) {
  Deadline deadline(kOpTimeout * 2);
  for (;;) {
    bool all = true;
    for (Stream* s : streams) {
      s->step();
      all = all && s->finished();
    }
    if (all) return;
    ASSERT_FALSE(deadline.expired()) << "streams did not finish (hang)";
  }
}

enum class Where { kSender, kReceiver };
enum class Expect { kComplete, kFail, kKilled };
struct Case {
  const char* name;
  const char* fault;
  Where where;
  Expect expect;
  const char* keys = "";  // class keys beside the matrix's order and retries=3 (the contract)
};

struct Params {
  Case fault;
  bool unordered;
};

std::string caseName(const ::testing::TestParamInfo<Params>& info) {
  return std::string(info.param.fault.name) + (info.param.unordered ? "_unordered" : "_ordered");
}

class PluginFault : public ::testing::TestWithParam<Params> {};

// Opens the plugin in a child: the class profile for every process, the fault for F only, set
// in env (the caller's, kept while the plugin lives).
std::unique_ptr<NetPlugin> open(test::ScopedEnv& env, bool unordered, const char* fault, const char* keys) {
  std::string profile = unordered ? "unordered,lanes=2,chunk=64K,retries=3" : "ordered,retries=3";
  if (*keys != '\0') profile += std::string(",") + keys;
  env.set("PACT_TC_DEFAULT", profile);
  if (fault != nullptr) env.set("PACT_FAULT", fault);
  return openPlugin(kVersion);
}

// One end of a comm: the receiver accepts (sending its handle over ch), the sender connects.
void* join(NetPlugin& plugin, Channel& ch, bool receiver) {
  void* comm = nullptr;
  if (receiver)
    acceptPeer(plugin, ch, &comm);
  else
    connectPeer(plugin, ch, &comm);
  return comm;
}

void closeComm(NetPlugin& plugin, void* comm, bool receiver) {
  EXPECT_EQ(receiver ? plugin.closeRecv(comm) : plugin.closeSend(comm), loader::kSuccess) << "close";
}

// The UCX the plugin loaded (libucp is in the process once the plugin is): major * 100 + minor.
int loadedUcxVersion() {
  void* ucp = dlopen("libucp.so.0", RTLD_LAZY | RTLD_NOLOAD);
  auto get = ucp ? reinterpret_cast<void (*)(unsigned*, unsigned*, unsigned*)>(dlsym(ucp, "ucp_get_version")) : nullptr;
  unsigned major = 0, minor = 0, release = 0;
  if (get) get(&major, &minor, &release);
  if (ucp) dlclose(ucp);
  return static_cast<int>(major * 100 + minor);
}

// Whether UCX can end operations to a failed peer. Its shared-memory transports (1.13) have no
// peer-failure mode, so a failed comm's rendezvous still under way is never completed or
// released by UCX; UCX 1.22's protocols over tcp never end a receive they matched to a
// multi-fragment eager message whose sender died (not with UCX_PROTO_ENABLE=n). The plugin keeps
// those request slots as orphans, counted, to process end.
bool ucxEndsFailedOperations() {
  const char* tls = std::getenv("UCX_TLS");
  return (tls == nullptr || std::string(tls) != "sm") && loadedUcxVersion() < 122;
}

// After every comm closed: nothing of the plugin is left open in this process. Requests UCX
// still holds are allowed only where a comm failed and UCX cannot end them (`failedComm`).
void expectNothingHeld(NetPlugin& plugin, const char* who, bool failedComm) {
  auto fn = reinterpret_cast<pact_plugin_resources_fn>(plugin.symbol("pact_plugin_resources"));
  pact_plugin_resources_t r{-1, -1, -1};
  ASSERT_TRUE(fn != nullptr && fn(&r) == 0) << "pact_plugin_resources";
  EXPECT_EQ(r.comms, 0) << who << ": comms left open";
  EXPECT_EQ(r.registrations, 0) << who << ": registrations left";
  if (!failedComm || ucxEndsFailedOperations()) {
    EXPECT_EQ(r.orphaned_requests, 0) << who << ": requests UCX still holds";
  }
}

TEST_P(PluginFault, CompletesExactlyOrFailsOnBothSides) {
  const Case& c = GetParam().fault;
  const bool unordered = GetParam().unordered;
  const bool faultySends = c.where == Where::kSender;  // F and C send to S
  const int fMessages = c.expect == Expect::kKilled ? kEndless : kMessages;
  auto [fs, sf] = Channel::pair();  // F <-> S
  auto [cs, sc] = Channel::pair();  // C <-> S
  auto [pf, fp] = Channel::pair();  // parent <-> F
  auto [ps, sp] = Channel::pair();  // parent <-> S
  auto [pc, cp] = Channel::pair();  // parent <-> C
  test::ForkOptions fOpt{kChildWatchdog, {&sf, &cs, &sc, &pf, &ps, &sp, &pc, &cp}};
  test::ForkOptions sOpt{kChildWatchdog, {&fs, &cs, &pf, &fp, &ps, &pc, &cp}};
  test::ForkOptions cOpt{kChildWatchdog, {&fs, &sf, &sc, &pf, &fp, &ps, &sp, &pc}};

  // F and C: one comm with S; they receive when the fault is on the receiving side.
  auto edge = [&](const char* fault, Channel& toS, Channel& parent, int messages, uint64_t seed) {
    test::ScopedEnv env;
    auto plugin = open(env, unordered, fault, c.keys);
    ASSERT_TRUE(plugin);
    const int64_t initAt = nowUs();
    ASSERT_TRUE(parent.sendValue(initAt));
    const bool receiver = !faultySends;
    void* comm = join(*plugin, toS, receiver);
    ASSERT_TRUE(comm);
    {
      Stream stream(*plugin, comm, !receiver, messages, seed);
      ASSERT_NO_FATAL_FAILURE(drive({&stream}));
      ASSERT_TRUE(parent.sendValue(stream.outcome()));
      if (receiver)
        notifyDone(toS);
      else
        awaitDone(toS);
    }  // deregisters
    closeComm(*plugin, comm, receiver);
    expectNothingHeld(*plugin, fault ? "F" : "C", fault != nullptr && c.expect != Expect::kComplete);
    // Faults of the whole process, the goodbye that close may have lost included.
    auto total = reinterpret_cast<pact_faults_injected_fn>(plugin->symbol("pact_faults_injected"));
    ASSERT_TRUE(total != nullptr);
    ASSERT_TRUE(parent.sendValue(total()));
  };
  auto f = test::ForkPeer::start("F", [&] { edge(c.fault, fs, fp, fMessages, 1000); }, fOpt);
  auto cc = test::ForkPeer::start("C", [&] { edge(nullptr, cs, cp, kMessages, 2000); }, cOpt);
  auto s = test::ForkPeer::start("S", [&] {
    test::ScopedEnv env;
    auto plugin = open(env, unordered, nullptr, c.keys);
    ASSERT_TRUE(plugin);
    const bool receiver = faultySends;
    void* withF = join(*plugin, sf, receiver);
    void* withC = join(*plugin, sc, receiver);
    ASSERT_TRUE(withF && withC);
    {
      Stream toF(*plugin, withF, !receiver, fMessages, 1000);
      Stream toC(*plugin, withC, !receiver, kMessages, 2000);
      ASSERT_NO_FATAL_FAILURE(drive({&toF, &toC}));
      ASSERT_TRUE(sp.sendValue(toF.outcome()));
      ASSERT_TRUE(sp.sendValue(toC.outcome()));
      for (Channel* ch : {&sf, &sc}) {
        if (ch == &sf && c.expect == Expect::kKilled) continue;  // F is dead
        if (receiver)
          notifyDone(*ch);
        else
          awaitDone(*ch);
      }
    }
    closeComm(*plugin, withF, receiver);
    closeComm(*plugin, withC, receiver);
    expectNothingHeld(*plugin, "S", c.expect != Expect::kComplete);
  }, sOpt);
  for (Channel* ch : {&fs, &sf, &cs, &sc, &fp, &sp, &cp}) ch->close();

  int64_t fInit = 0, cInit = 0;
  ASSERT_TRUE(pf.recvValue(&fInit, kOpTimeout));
  ASSERT_TRUE(pc.recvValue(&cInit, kOpTimeout));
  Outcome atF, atC, sWithF, sWithC;
  uint64_t fFaults = 0, cFaults = 0;
  const bool fReports = c.expect != Expect::kKilled;
  if (fReports) {
    ASSERT_TRUE(pf.recvValue(&atF, kPairTimeout)) << "F's outcome";
    ASSERT_TRUE(pf.recvValue(&fFaults, kPairTimeout)) << "F's fault count";
  }
  ASSERT_TRUE(pc.recvValue(&atC, kPairTimeout)) << "C's outcome";
  ASSERT_TRUE(pc.recvValue(&cFaults, kPairTimeout)) << "C's fault count";
  EXPECT_EQ(cFaults, 0u) << "the clean process injected faults";
  ASSERT_TRUE(ps.recvValue(&sWithF, kPairTimeout)) << "S's outcome with F";
  ASSERT_TRUE(ps.recvValue(&sWithC, kPairTimeout)) << "S's outcome with C";
  test::waitAll({&f, &cc, &s}, kPairTimeout);
  EXPECT_TRUE(s.outcome().ok()) << "S " << s.outcome().describe();
  EXPECT_TRUE(cc.outcome().ok()) << "C " << cc.outcome().describe();

  // Nothing wrong reached a receive buffer, on any comm.
  EXPECT_EQ(atF.corrupt + atC.corrupt + sWithF.corrupt + sWithC.corrupt, 0);
  // The clean comm is unaffected.
  EXPECT_EQ(atC.rc, 0);
  EXPECT_EQ(sWithC.rc, 0);
  EXPECT_EQ(atC.completed, kMessages);
  EXPECT_EQ(sWithC.completed, kMessages);

  switch (c.expect) {
    case Expect::kComplete:
      EXPECT_TRUE(f.outcome().ok()) << "F " << f.outcome().describe();
      EXPECT_EQ(atF.rc, 0);
      EXPECT_EQ(sWithF.rc, 0);
      EXPECT_EQ(atF.completed, kMessages);
      EXPECT_EQ(sWithF.completed, kMessages);
      break;
    case Expect::kFail: {
      EXPECT_TRUE(f.outcome().ok()) << "F " << f.outcome().describe();
      EXPECT_EQ(atF.rc, loader::kRemoteError) << "F's comm";
      EXPECT_EQ(sWithF.rc, loader::kRemoteError) << "S's comm with F";
      const auto apart = std::chrono::microseconds(std::abs(atF.failedAtUs - sWithF.failedAtUs));
      EXPECT_LT(apart, kAgreeBound) << "the two sides failed " << apart.count() << " us apart";
      break;
    }
    case Expect::kKilled: {
      EXPECT_TRUE(f.outcome().killedBy(SIGKILL)) << "F " << f.outcome().describe();
      EXPECT_TRUE(sWithF.rc == loader::kRemoteError || sWithF.rc == loader::kSystemError)
          << "S's comm with the killed F ended with " << sWithF.rc;
      const auto after = std::chrono::microseconds(sWithF.failedAtUs - fInit);
      EXPECT_LT(after, kKillAfter + kAgreeBound) << "S saw the death " << after.count()
                                                 << " us after F's init";
      break;
    }
  }
  // The fault really happened, where it lives.
  if (fReports) {
    EXPECT_GT(fFaults, 0u) << "no fault was injected";
    EXPECT_GE(fFaults, atF.stats.faults_injected);
  }
  const std::string name = c.name;
  if (name == "drop" || name == "corrupt") {
    EXPECT_GT(atF.stats.retransmits, 0u);  // lost attempts, or pieces whose check failed, sent again
  }
  // The class counters: F's one comm is its whole class; C's clean comm counts no error.
  if (fReports) {
    EXPECT_EQ(atF.cls.retransmits, atF.stats.retransmits) << "class retransmits";
    EXPECT_EQ(atF.cls.faults, atF.stats.faults_injected) << "class faults";
    EXPECT_EQ(faultySends ? atF.cls.messagesSent : atF.cls.messagesReceived, static_cast<uint64_t>(atF.completed));
    EXPECT_EQ(atF.cls.allErrors(), atF.rc != 0 ? 1u : 0u) << "F's errors: one failed comm, or none";
  }
  EXPECT_EQ(atC.cls.allErrors(), 0u) << "the clean process counted errors";
  EXPECT_EQ(faultySends ? atC.cls.messagesSent : atC.cls.messagesReceived, static_cast<uint64_t>(kMessages));
  // S has the comm with F and the clean one: the failed comm's error, of the kind each side saw.
  EXPECT_EQ(sWithF.cls.allErrors(), sWithF.rc != 0 ? 1u : 0u) << "S's errors";
  if (name == "drop_exhausted") {
    EXPECT_EQ(atF.cls.errorsOf("retries"), 1u) << "F spent its retries";
    EXPECT_EQ(sWithF.cls.errorsOf("peer_abort"), 1u) << "S: the peer failed the comm";
  }
  if (name == "reject") {
    EXPECT_EQ(atF.cls.errorsOf("refused"), 1u) << "F refused a piece";
    EXPECT_EQ(sWithF.cls.errorsOf("peer_abort"), 1u) << "S: the peer failed the comm";
  }
  if (name == "corrupt_exhausted") {  // the receiver S judged every attempt corrupt
    EXPECT_EQ(sWithF.cls.errorsOf("retries"), 1u) << "S: the checks failed past the retries";
    EXPECT_EQ(atF.cls.errorsOf("peer_abort"), 1u) << "F: the peer failed the comm";
  }
  if (name == "stall") {  // S's receive passed the class's timeout
    EXPECT_EQ(sWithF.cls.errorsOf("deadline"), 1u) << "S: a message stalled past the timeout";
    EXPECT_EQ(atF.cls.errorsOf("peer_abort"), 1u) << "F: the peer failed the comm";
  }
  if (name == "kill_after") {
    // Seen as the session's loss or UCX's error on an operation to the dead process (over shared
    // memory a cma read fails with an I/O error before the kernel closes the dead one's socket).
    EXPECT_EQ(sWithF.cls.errorsOf("peer_lost") + sWithF.cls.errorsOf("transport"), 1u)
        << "S: the peer process died (peer_abort " << sWithF.cls.errorsOf("peer_abort") << ")";
  }
  const long long apartUs = atF.rc != 0 && sWithF.rc != 0 ? std::abs(atF.failedAtUs - sWithF.failedAtUs) : -1;
  std::printf("[ %s %s ] F: %d done rc %d faults %llu retransmits %llu; S with F: %d done rc %d; "
              "failures %lld us apart\n",
              c.name, unordered ? "unordered" : "ordered", atF.completed, atF.rc,
              static_cast<unsigned long long>(fFaults),
              static_cast<unsigned long long>(atF.stats.retransmits), sWithF.completed, sWithF.rc,
              apartUs);
}

// corrupt flips a bit of a copy of a piece on the wire: only the class's verify catches it (the
// contract suite's control shows it landing without); stall holds pieces until the timeout.
constexpr Case kCases[] = {
    {"drop", "drop=0.02,seed=7", Where::kSender, Expect::kComplete},
    {"drop_exhausted", "drop=1", Where::kSender, Expect::kFail},
    {"corrupt", "corrupt=0.02,seed=7", Where::kSender, Expect::kComplete, "verify=crc32c"},
    {"corrupt_exhausted", "corrupt=1", Where::kSender, Expect::kFail, "verify=xxh3"},
    {"stall", "stall=0.05,seed=7", Where::kSender, Expect::kFail, "timeout=300ms"},
    {"dup", "dup=0.3,seed=7", Where::kSender, Expect::kComplete},
    {"reject", "reject=0.1,seed=7", Where::kReceiver, Expect::kFail},
    {"lose_remote_done_sender", "lose_remote_done=1", Where::kSender, Expect::kComplete},
    {"lose_remote_done_receiver", "lose_remote_done=1", Where::kReceiver, Expect::kComplete},
    {"kill_after", "kill_after=400ms", Where::kSender, Expect::kKilled},
};

std::vector<Params> allParams() {
  std::vector<Params> v;
  for (const Case& c : kCases)
    for (bool unordered : {false, true}) v.push_back({c, unordered});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Matrix, PluginFault, ::testing::ValuesIn(allParams()), caseName);

}  // namespace
}  // namespace pact::abi_test
