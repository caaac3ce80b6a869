// Case 10: the peer process is SIGKILLed (by the gtest parent) while the survivor has requests in
// flight. The survivor's test() must return an error (ncclRemoteError or ncclSystemError) within
// 10 s of the kill and never hang; later posts on the failed comm must fail too (sticky error);
// close must return promptly.
//
// A is the survivor, B the victim. Direction: the victim is the sender or the receiver. Mode:
// "idle" (the victim posted its side of some large transfers, then stopped calling the plugin)
// or "streaming" (both sides are moving 8 MiB messages continuously when the kill lands).
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <ostream>
#include <tuple>

#include "tests/abi/harness.h"

namespace pact::abi_test {
namespace {

constexpr size_t kLarge = 32 << 20;
constexpr size_t kStreamSize = 8 << 20;

enum class Mode { kIdle, kStreaming };
void PrintTo(Mode m, std::ostream* os) { *os << (m == Mode::kIdle ? "idle" : "streaming"); }

// Polls the parent's "killing the victim now" note without blocking. The parent sends it just
// before the SIGKILL, so it is readable whenever an error caused by the kill can be seen.
class KillWatch {
 public:
  explicit KillWatch(Channel& parent) : parent_(parent) {}
  bool killed() {
    if (!killed_ && parent_.readable()) {
      char note = 0;
      EXPECT_TRUE(parent_.recv(&note, 1, kOpTimeout));
      killed_ = true;
      since_ = Deadline(kDetectBound);
    }
    return killed_;
  }
  bool expired() const { return killed_ && since_.expired(); }
  long long sinceKillMs() const { return killed_ ? since_.elapsed().count() : -1; }

 private:
  Channel& parent_;
  bool killed_ = false;
  Deadline since_{kDetectBound};
};

bool isPeerError(int rc) { return rc == loader::kRemoteError || rc == loader::kSystemError; }

// Tests `pending` in order; when it is empty, posts more with `more` (streaming) or fails
// (idle: every request completed although the dead peer never took part in them).
void expectFailureAfterKill(NetPlugin& plugin, Channel& parent, std::deque<void*> pending,
                            const std::function<int(void**)>& more) {
  KillWatch watch(parent);
  Deadline overall(kOpTimeout * 3);
  int sizes[loader::kMaxRecvs];
  for (;;) {
    int rc = loader::kSuccess;
    if (pending.empty()) {
      ASSERT_TRUE(more) << "every in-flight request completed successfully although the peer "
                        << (watch.killed() ? "was killed" : "never served them");
      void* req = nullptr;
      rc = more(&req);
      if (rc == loader::kSuccess && req != nullptr) pending.push_back(req);
    } else {
      int done = 0;
      rc = plugin.test(pending.front(), &done, sizes);
      if (rc == loader::kSuccess && done != 0) pending.pop_front();
    }
    if (rc != loader::kSuccess) {
      // Checked after the error: the note is readable from the moment of the kill on.
      ASSERT_TRUE(watch.killed()) << "the plugin returned " << rc << " before the peer was killed";
      EXPECT_TRUE(isPeerError(rc)) << "error after peer death was " << rc
                                   << ", expected ncclRemoteError(6) or ncclSystemError(2)";
      EXPECT_LT(watch.sinceKillMs(), kDetectBound.count());
      std::printf("[   INFO   ] peer death reported with rc %d after %lld ms\n", rc,
                  watch.sinceKillMs());
      return;
    }
    watch.killed();  // starts the clock once the note is there
    ASSERT_FALSE(watch.expired()) << "no error within " << kDetectBound.count()
                                  << " ms of the peer's SIGKILL (" << pending.size()
                                  << " requests pending)";
    ASSERT_FALSE(overall.expired()) << "the parent never reported the kill";
  }
}

// A new operation on the failed comm fails: an error from isend/irecv, or a request that test()
// fails, within kDetectBound. Never a success.
void expectStickyFailure(NetPlugin& plugin, void* comm, bool sender, char* buf, void* mh) {
  constexpr size_t kSize = 4096;
  Deadline deadline(kDetectBound);
  void* req = nullptr;
  int rc = loader::kSuccess;
  while (req == nullptr && !deadline.expired()) {
    if (sender) {
      rc = plugin.isend(comm, buf, kSize, kTag, mh, &req);
    } else {
      void* data = buf;
      size_t cap = kSize;
      int tag = kTag;
      rc = plugin.irecv(comm, 1, &data, &cap, &tag, &mh, &req);
    }
    if (rc != loader::kSuccess) return;  // failed at post time: fine
  }
  ASSERT_NE(req, nullptr) << "posting on the failed comm kept returning NULL for 10 s";
  Completion c = waitRequest(plugin, req, deadline);
  EXPECT_NE(c.rc, kTimedOut) << "a request posted on the failed comm neither failed nor completed";
  EXPECT_FALSE(c.done && c.rc == loader::kSuccess)
      << (sender ? "isend" : "irecv") << " on a comm whose peer is dead reported success";
}

void survivor(PeerIo& io, bool survivorSends, Mode mode) {
  auto plugin = openPlugin(io.version);
  ASSERT_TRUE(plugin);
  void* comm = nullptr;
  if (survivorSends) {
    ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm));
  } else {
    ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm));
  }
  HostBuffer buf(2 * kLarge);
  fillPattern(buf.data(), buf.size(), 99);
  auto mr = std::make_unique<MemReg>(*plugin, comm, buf.data(), buf.size());
  ASSERT_TRUE(mr->ok());
  // One complete message first: the path works before the kill.
  if (survivorSends) {
    ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comm, buf.data(), 1 << 20, mr->handle()));
  } else {
    ASSERT_NO_FATAL_FAILURE(recvOne(*plugin, comm, buf.data(), 1 << 20, mr->handle(), 1 << 20));
  }
  auto post = [&](size_t offset, size_t size, void** req) {
    *req = nullptr;
    if (survivorSends)
      return plugin->isend(comm, buf.data() + offset, size, kTag, mr->handle(), req);
    void* data = buf.data() + offset;
    size_t cap = size;
    int tag = kTag;
    void* mh = mr->handle();
    return plugin->irecv(comm, 1, &data, &cap, &tag, &mh, req);
  };
  std::deque<void*> pending;
  std::function<int(void**)> more;
  if (mode == Mode::kIdle) {
    Deadline deadline(kOpTimeout);
    for (size_t i = 0; i < 2; ++i) {  // the victim takes part in at most the first of these
      void* req = nullptr;
      while (req == nullptr && !deadline.expired()) {
        ASSERT_EQ(post(i * kLarge, kLarge, &req), loader::kSuccess);
      }
      ASSERT_NE(req, nullptr);
      pending.push_back(req);
    }
  } else {
    more = [&](void** req) { return post(0, kStreamSize, req); };
  }
  const char ready = 'R';
  ASSERT_TRUE(io.parent->send(&ready, 1));
  ASSERT_NO_FATAL_FAILURE(expectFailureAfterKill(*plugin, *io.parent, std::move(pending), more));
  // The buffer's tail: abandoned requests of a dead comm never complete into it.
  char* tail = buf.data() + buf.size() - 4096;
  ASSERT_NO_FATAL_FAILURE(expectStickyFailure(*plugin, comm, survivorSends, tail, mr->handle()));
  mr.reset();  // deregMr on the failed comm must not fail either
  Deadline close(kDetectBound);
  int rc = survivorSends ? plugin->closeSend(comm) : plugin->closeRecv(comm);
  std::printf("[   INFO   ] close after peer death returned %d in %lld ms\n", rc,
              static_cast<long long>(close.elapsed().count()));
  EXPECT_LT(close.elapsed(), kDetectBound) << "close after peer death";
}

void victim(PeerIo& io, bool victimSends, Mode mode) {
  auto plugin = openPlugin(io.version);
  ASSERT_TRUE(plugin);
  void* comm = nullptr;
  if (victimSends) {
    ASSERT_NO_FATAL_FAILURE(connectPeer(*plugin, *io.peer, &comm));
  } else {
    ASSERT_NO_FATAL_FAILURE(acceptPeer(*plugin, *io.peer, &comm));
  }
  HostBuffer buf(kLarge);
  MemReg mr(*plugin, comm, buf.data(), buf.size());
  ASSERT_TRUE(mr.ok());
  if (victimSends) {
    ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comm, buf.data(), 1 << 20, mr.handle()));
  } else {
    ASSERT_NO_FATAL_FAILURE(recvOne(*plugin, comm, buf.data(), 1 << 20, mr.handle(), 1 << 20));
  }
  const char ready = 'R';
  if (mode == Mode::kIdle) {
    // Its side of the first large transfer only, then silence: no more plugin calls.
    void* req = nullptr;
    Deadline deadline(kOpTimeout);
    if (victimSends) {
      ASSERT_NO_FATAL_FAILURE(
          postSend(*plugin, comm, buf.data(), kLarge, kTag, mr.handle(), deadline, &req));
    } else {
      void* data = buf.data();
      size_t cap = kLarge;
      int tag = kTag;
      void* mh = mr.handle();
      ASSERT_NO_FATAL_FAILURE(postRecv(*plugin, comm, 1, &data, &cap, &tag, &mh, deadline, &req));
    }
    ASSERT_TRUE(io.parent->send(&ready, 1));
    char never = 0;
    io.parent->recv(&never, 1, kChildWatchdog);  // SIGKILLed while waiting here
    ADD_FAILURE() << "victim was not killed";
    return;
  }
  ASSERT_TRUE(io.parent->send(&ready, 1));
  for (;;) {  // stream until SIGKILLed
    if (victimSends) {
      ASSERT_NO_FATAL_FAILURE(sendOne(*plugin, comm, buf.data(), kStreamSize, mr.handle()));
    } else {
      ASSERT_NO_FATAL_FAILURE(
          recvOne(*plugin, comm, buf.data(), kStreamSize, mr.handle(), kStreamSize));
    }
  }
}

using FailureParam = std::tuple<int, bool, Mode>;  // version, victim sends, mode

class PeerFailure : public ::testing::TestWithParam<FailureParam> {};

TEST_P(PeerFailure, SurvivorSeesErrorWithinBound) {
  const int version = std::get<0>(GetParam());
  const bool victimSends = std::get<1>(GetParam());
  const Mode mode = std::get<2>(GetParam());
  PeerPair pair(
      version, [&](PeerIo& io) { survivor(io, !victimSends, mode); },
      [&](PeerIo& io) { victim(io, victimSends, mode); });
  killBWhenBothReady(pair);
}

std::string failureName(const ::testing::TestParamInfo<FailureParam>& info) {
  const auto [version, victimSends, mode] = info.param;
  return "v" + std::to_string(version) + (victimSends ? "_SenderDies" : "_ReceiverDies") +
         (mode == Mode::kIdle ? "_Idle" : "_Streaming");
}

INSTANTIATE_TEST_SUITE_P(
    Versions, PeerFailure,
    ::testing::Combine(::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                       ::testing::Bool(), ::testing::Values(Mode::kIdle, Mode::kStreaming)),
    failureName);

}  // namespace
}  // namespace pact::abi_test
