// Connection setup.
// Case 2: NCCL's GDR probe pattern: listen, then connect and accept alternated in ONE thread,
//         with a NULL devComm pointer and with a pointer to NULL; then a transfer in that thread.
// Case 13: peers started with different PACT_EPOCH values must be refused promptly, on at least
//          the refusing side, and neither side may get a comm. Same non-zero epochs connect.
// Authentication (PACT_AUTH_KEY_FILE): another key, or a key on one side only, is refused
//          promptly on BOTH sides with no comm; the same key connects.
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "tests/abi/harness.h"
#include "tests/common/scoped_env.h"
#include "tests/common/temp_file.h"

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

// The environment one side of a handshake runs with.
using SideEnv = std::vector<std::pair<std::string, std::string>>;
std::vector<std::unique_ptr<test::ScopedEnv>> apply(const SideEnv& env) {
  std::vector<std::unique_ptr<test::ScopedEnv>> out;
  for (const auto& [k, v] : env) out.push_back(std::make_unique<test::ScopedEnv>(k, v));
  return out;
}

void acceptSide(PeerIo& io, const SideEnv& sideEnv) {
  auto env = apply(sideEnv);
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

void connectSide(PeerIo& io, const SideEnv& sideEnv) {
  auto env = apply(sideEnv);
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

void runHandshakePair(int version, const SideEnv& acceptEnv, const SideEnv& connectEnv,
                      SideResult* a, SideResult* b) {
  PeerPair pair(
      version, [acceptEnv](PeerIo& io) { acceptSide(io, acceptEnv); },
      [connectEnv](PeerIo& io) { connectSide(io, connectEnv); });
  const auto budget = kObserveWindow + kOpTimeout;
  EXPECT_TRUE(pair.controlA().recvValue(a, budget)) << "no report from the accepting side";
  EXPECT_TRUE(pair.controlB().recvValue(b, budget)) << "no report from the connecting side";
  pair.expectSuccess();
}

class Epoch : public ::testing::TestWithParam<int> {};

TEST_P(Epoch, MismatchIsRefusedPromptly) {
  SideResult acc, con;
  runHandshakePair(GetParam(), {{"PACT_EPOCH", "1"}}, {{"PACT_EPOCH", "2"}}, &acc, &con);
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

// PACT_FAULT=epoch_skew=1 makes the connector a peer on a skewed epoch: refused like a mismatch.
TEST_P(Epoch, InjectedEpochSkewIsRefused) {
  SideResult acc, con;
  runHandshakePair(GetParam(), {}, {{"PACT_FAULT", "epoch_skew=1"}}, &acc, &con);
  const std::string report = describe("accept", acc) + "; " + describe("connect (skewed)", con);
  EXPECT_FALSE(acc.gotComm) << report;
  EXPECT_FALSE(con.gotComm) << report;
  EXPECT_TRUE((acc.rc != loader::kSuccess && acc.elapsedMs < kRefuseBound.count()) ||
              (con.rc != loader::kSuccess && con.elapsedMs < kRefuseBound.count()))
      << report;
}

// Control: the same non-zero epoch on both sides connects, so the refusal above is about the
// mismatch and not about PACT_EPOCH itself.
TEST_P(Epoch, SameEpochConnects) {
  SideResult acc, con;
  runHandshakePair(GetParam(), {{"PACT_EPOCH", "7"}}, {{"PACT_EPOCH", "7"}}, &acc, &con);
  EXPECT_TRUE(acc.gotComm) << describe("accept", acc);
  EXPECT_TRUE(con.gotComm) << describe("connect", con);
}

INSTANTIATE_TEST_SUITE_P(Versions, Epoch,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

class Auth : public ::testing::TestWithParam<int> {
 protected:
  // Both sides must fail promptly and neither may get a comm.
  void expectRefusedOnBothSides(const SideEnv& acceptEnv, const SideEnv& connectEnv) {
    SideResult acc, con;
    runHandshakePair(GetParam(), acceptEnv, connectEnv, &acc, &con);
    const std::string report = describe("accept", acc) + "; " + describe("connect", con);
    std::printf("[   INFO   ] auth refusal: %s\n", report.c_str());
    EXPECT_FALSE(acc.gotComm) << report;
    EXPECT_FALSE(con.gotComm) << report;
    EXPECT_NE(acc.rc, loader::kSuccess) << report;
    EXPECT_NE(con.rc, loader::kSuccess) << report;
    EXPECT_LT(acc.elapsedMs, kRefuseBound.count()) << report;
    EXPECT_LT(con.elapsedMs, kRefuseBound.count()) << report;
  }
  const test::TempFile fileA_{"pact test key number one"}, fileB_{"pact test key number two"};
  const std::string& keyA_ = fileA_.path();
  const std::string& keyB_ = fileB_.path();
};

TEST_P(Auth, SameKeyConnects) {
  SideResult acc, con;
  runHandshakePair(GetParam(), {{"PACT_AUTH_KEY_FILE", keyA_}}, {{"PACT_AUTH_KEY_FILE", keyA_}},
                   &acc, &con);
  EXPECT_TRUE(acc.gotComm) << describe("accept", acc);
  EXPECT_TRUE(con.gotComm) << describe("connect", con);
}

TEST_P(Auth, AnotherKeyIsRefusedOnBothSides) {
  expectRefusedOnBothSides({{"PACT_AUTH_KEY_FILE", keyA_}}, {{"PACT_AUTH_KEY_FILE", keyB_}});
}

TEST_P(Auth, AKeyOnOneSideOnlyIsRefusedOnBothSides) {
  expectRefusedOnBothSides({{"PACT_AUTH_KEY_FILE", keyA_}}, {});
  expectRefusedOnBothSides({}, {{"PACT_AUTH_KEY_FILE", keyA_}});
}

INSTANTIATE_TEST_SUITE_P(Versions, Auth,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

}  // namespace
}  // namespace pact::abi_test
