// Connection setup.
// Case 2: NCCL's GDR probe pattern: listen, then connect and accept alternated in ONE thread,
//         with a NULL devComm pointer and with a pointer to NULL; then a transfer in that thread.
// Case 13: peers started with different PACT_EPOCH values must be refused promptly, on at least
//          the refusing side, and neither side may get a comm. Same non-zero epochs connect.
#include <cstdio>
#include <cstring>

#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"

namespace pact::abi_test {
namespace {

class Handshake : public ::testing::TestWithParam<int> {};

TEST_P(Handshake, OneThreadConnectAccept) {
  const int version = GetParam();
  runInChild("one-thread", [version] {
    auto plugin = openPlugin(version);
    ASSERT_TRUE(plugin);
    for (bool nullDevHandlePtr : {true, false}) {
      SCOPED_TRACE(nullDevHandlePtr ? "NULL devComm pointer" : "pointer to a NULL devComm");
      void* sc = nullptr;
      void* rc = nullptr;
      ASSERT_NO_FATAL_FAILURE(connectLoopback(*plugin, 0, nullDevHandlePtr, &sc, &rc));
      EXPECT_NO_FATAL_FAILURE(transferInOneThread(*plugin, sc, rc, 100, 1));
      EXPECT_NO_FATAL_FAILURE(transferInOneThread(*plugin, sc, rc, (4 << 20) + 3, 2));
      EXPECT_EQ(plugin->closeSend(sc), loader::kSuccess) << "closeSend";
      EXPECT_EQ(plugin->closeRecv(rc), loader::kSuccess) << "closeRecv";
    }
  });
}

// A listenComm that is closed before any accept must not disturb later connections.
TEST_P(Handshake, CloseListenWithoutAccept) {
  const int version = GetParam();
  runInChild("close-listen", [version] {
    auto plugin = openPlugin(version);
    ASSERT_TRUE(plugin);
    char handle[loader::kHandleSize] = {};
    void* lc = nullptr;
    ASSERT_EQ(plugin->listen(0, handle, &lc), loader::kSuccess);
    ASSERT_NE(lc, nullptr);
    EXPECT_EQ(plugin->closeListen(lc), loader::kSuccess);
    void* sc = nullptr;
    void* rc = nullptr;
    ASSERT_NO_FATAL_FAILURE(connectLoopback(*plugin, 0, false, &sc, &rc));
    EXPECT_NO_FATAL_FAILURE(transferInOneThread(*plugin, sc, rc, 4096, 3));
    EXPECT_EQ(plugin->closeSend(sc), loader::kSuccess);
    EXPECT_EQ(plugin->closeRecv(rc), loader::kSuccess);
  });
}

INSTANTIATE_TEST_SUITE_P(Versions, Handshake,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

// ---- epochs -------------------------------------------------------------------------------

// What one side of an epoch handshake saw; sent to the parent over the control channel.
struct SideResult {
  int rc = 0;            // last connect/accept result
  bool gotComm = false;  // a comm was returned
  bool gaveUp = false;   // still pending when the observation window ended
  long long elapsedMs = 0;
};

constexpr auto kRefuseBound = std::chrono::milliseconds(10000);  // "promptly"
constexpr auto kObserveWindow = std::chrono::milliseconds(10500);

void epochAcceptSide(PeerIo& io, const char* epoch) {
  test::ScopedEnv env("PACT_EPOCH", std::string(epoch));
  auto plugin = openPlugin(io.version);
  ASSERT_TRUE(plugin);
  char handle[loader::kHandleSize] = {};
  void* lc = nullptr;
  ASSERT_EQ(plugin->listen(0, handle, &lc), loader::kSuccess);
  ASSERT_TRUE(io.peer->send(handle, sizeof handle));
  SideResult r;
  Deadline window(kObserveWindow);
  void* comm = nullptr;
  while (comm == nullptr && r.rc == loader::kSuccess && !window.expired()) {
    r.rc = plugin->accept(lc, &comm);
  }
  r.elapsedMs = window.elapsed().count();
  r.gotComm = comm != nullptr;
  r.gaveUp = comm == nullptr && r.rc == loader::kSuccess;
  ASSERT_TRUE(io.parent->sendValue(r));
  notifyDone(*io.peer);  // neither side closes before the other has finished its loop
  awaitDone(*io.peer);
  if (comm != nullptr) {
    EXPECT_EQ(plugin->closeRecv(comm), loader::kSuccess);
  }
  EXPECT_EQ(plugin->closeListen(lc), loader::kSuccess);
}

void epochConnectSide(PeerIo& io, const char* epoch) {
  test::ScopedEnv env("PACT_EPOCH", std::string(epoch));
  auto plugin = openPlugin(io.version);
  ASSERT_TRUE(plugin);
  char handle[loader::kHandleSize];
  ASSERT_TRUE(io.peer->recv(handle, sizeof handle, kOpTimeout));
  SideResult r;
  Deadline window(kObserveWindow);
  void* comm = nullptr;
  while (comm == nullptr && r.rc == loader::kSuccess && !window.expired()) {
    r.rc = plugin->connect(0, handle, &comm);
  }
  r.elapsedMs = window.elapsed().count();
  r.gotComm = comm != nullptr;
  r.gaveUp = comm == nullptr && r.rc == loader::kSuccess;
  ASSERT_TRUE(io.parent->sendValue(r));
  notifyDone(*io.peer);
  awaitDone(*io.peer);
  if (comm != nullptr) {
    EXPECT_EQ(plugin->closeSend(comm), loader::kSuccess);
  }
}

std::string describe(const char* side, const SideResult& r) {
  std::string s = std::string(side) + ": ";
  if (r.gotComm) return s + "got a comm after " + std::to_string(r.elapsedMs) + " ms";
  if (r.gaveUp) return s + "still pending after " + std::to_string(r.elapsedMs) + " ms";
  return s + "returned " + std::to_string(r.rc) + " after " + std::to_string(r.elapsedMs) + " ms";
}

void runEpochPair(int version, const char* acceptEpoch, const char* connectEpoch, SideResult* a,
                  SideResult* b) {
  PeerPair pair(
      version, [acceptEpoch](PeerIo& io) { epochAcceptSide(io, acceptEpoch); },
      [connectEpoch](PeerIo& io) { epochConnectSide(io, connectEpoch); });
  const auto budget = kObserveWindow + kOpTimeout;
  EXPECT_TRUE(pair.controlA().recvValue(a, budget)) << "no report from the accepting side";
  EXPECT_TRUE(pair.controlB().recvValue(b, budget)) << "no report from the connecting side";
  pair.expectSuccess();
}

class Epoch : public ::testing::TestWithParam<int> {};

TEST_P(Epoch, MismatchIsRefusedPromptly) {
  SideResult acc, con;
  runEpochPair(GetParam(), "1", "2", &acc, &con);
  const std::string report =
      describe("accept (epoch 1)", acc) + "; " + describe("connect (epoch 2)", con);
  RecordProperty("epoch_mismatch", report);
  std::printf("[   INFO   ] epoch mismatch: %s\n", report.c_str());
  EXPECT_FALSE(acc.gotComm) << report;
  EXPECT_FALSE(con.gotComm) << report;
  const bool accRefused = acc.rc != loader::kSuccess && acc.elapsedMs < kRefuseBound.count();
  const bool conRefused = con.rc != loader::kSuccess && con.elapsedMs < kRefuseBound.count();
  EXPECT_TRUE(accRefused || conRefused) << "no side refused within 10 s: " << report;
}

// Control: the same non-zero epoch on both sides connects, so the refusal above is about the
// mismatch and not about PACT_EPOCH itself.
TEST_P(Epoch, SameEpochConnects) {
  SideResult acc, con;
  runEpochPair(GetParam(), "7", "7", &acc, &con);
  EXPECT_TRUE(acc.gotComm) << describe("accept", acc);
  EXPECT_TRUE(con.gotComm) << describe("connect", con);
}

INSTANTIATE_TEST_SUITE_P(Versions, Epoch,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

}  // namespace
}  // namespace pact::abi_test
