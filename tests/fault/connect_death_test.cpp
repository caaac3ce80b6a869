// A peer that leaves or dies while or right after a connection is made never kills the other
// side (pact.h; issue #33): rounds of two engine processes, a listener and a connector, one of
// which leaves (destroys its engine as soon as its connect or peer wait returns) or is SIGKILLed,
// during the connect or soon after it. UCX 1.13 aborted a survivor whose endpoint was still being
// wired up (wireup_ep.c:241) when its peer left, and UCX 1.22's tcp transport one whose peer left
// or died while both sides opened connections to each other at once (stubs.c:107); the engine now
// wires every endpoint to a peer up inside the handshake, the accepting side after the connecting
// one (docs/engine.md, "A connection is wired up before it is used"). The survivor must go on
// progressing, see the peer lost (or never see it), and destroy its engine cleanly.
// CONNECT_DEATH_ROUNDS sets the number of rounds.
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>

#include <string>
#include <vector>

#include "tests/common/channel.h"
#include "tests/common/fork_peer.h"
#include "tests/integration/engine_util.h"

namespace pact::test {
namespace {

using std::chrono::milliseconds;

enum class Role : uint32_t { kListener, kConnector };
// kLeave: destroys its engine as soon as its connect (or peer wait) returned. kKillAfter: SIGKILLed
// from then on. kKillDuring: SIGKILLed at a varying point of the connect itself, where UCX's own
// wireup is under way on both sides.
enum class How : uint32_t { kLeave, kKillAfter, kKillDuring };

struct Plan {
  Role leaver;
  How how;
};

const char* nameOf(Role r) { return r == Role::kListener ? "listener" : "connector"; }

// The survivor: a send to the peer once it is one here, which must end PACT_ERR_PEER_LOST; when
// it never became a peer, progress a moment after the test process says the leaver is gone, for
// UCX to meet the dead connection.
void survive(pact_engine_t e, pact_peer_t peer, const char* peerName, Channel& parent) {
  std::vector<uint8_t> buffer(64, 7);
  pact_mr_t mr = nullptr;
  PACT_OK_OR_FAIL(pact_mem_register(e, buffer.data(), buffer.size(), &mr));
  const pact_key_t key{1, 1, 0, 0};
  const pact_block_t block{mr, 0, buffer.size()};
  pact_xfer_t x = 0;
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::chrono::steady_clock::time_point goneAt{};
  bool gone = false, seen = false;
  while (!seen && std::chrono::steady_clock::now() < limit) {
    EXPECT_EQ(pact_progress(e, 1), PACT_OK);
    if (peer == 0) (void)pact_peer_wait(e, peerName, 0, &peer);
    if (peer != 0 && x == 0) {
      const pact_status_t st = pact_send(e, peer, &key, &block, 1, 0, nullptr, &x);
      if (st != PACT_OK) {
        EXPECT_EQ(st, PACT_ERR_PEER_LOST) << pact_last_error();
        seen = true;
      }
    }
    pact_xfer_info_t info{};
    if (x != 0 && pact_xfer_query(e, x, &info) == PACT_OK && info.final) {
      EXPECT_EQ(info.result, PACT_ERR_PEER_LOST);
      seen = true;
    }
    if (!gone && parent.readable(milliseconds(0))) {
      uint32_t note = 0;
      ASSERT_TRUE(parent.recvValue(&note, milliseconds(0)));
      gone = true;
      goneAt = std::chrono::steady_clock::now();
    }
    // Fault timing, not a wait for an event: UCX meets the dead connection on its own schedule.
    if (gone && peer == 0 && std::chrono::steady_clock::now() - goneAt > milliseconds(300)) seen = true;
  }
  EXPECT_TRUE(seen) << "the " << peerName << " was never seen lost";
  if (x != 0) {
    EXPECT_EQ(pact_xfer_release(e, x), PACT_OK) << pact_last_error();
  }
  EXPECT_EQ(pact_mem_deregister(e, mr), PACT_OK) << pact_last_error();
}

void side(Role me, const Plan& plan, Channel& parent) {
  const bool leaver = plan.leaver == me;
  const char* other = nameOf(me == Role::kListener ? Role::kConnector : Role::kListener);
  pact_engine_t e = makeEngine(nameOf(me), me == Role::kListener ? "127.0.0.1" : nullptr);
  ASSERT_NE(e, nullptr);
  pact_peer_t peer = 0;
  pact_status_t st = PACT_OK;
  // A leaver killed during the connect tells the test process it is about to start it.
  const bool killedDuring = leaver && plan.how == How::kKillDuring;
  if (me == Role::kListener) {
    Address a{};
    PACT_OK_OR_FAIL(pact_engine_address(e, a.text, sizeof a.text));
    ASSERT_TRUE(parent.sendValue(a));
    if (killedDuring) {
      ASSERT_TRUE(parent.sendValue(uint32_t{1}));
    }
    // The surviving listener looks for the peer as it progresses (survive): one that left while
    // its connection was being wired up never becomes ready here.
    if (leaver) st = pact_peer_wait(e, other, 20000, &peer);
  } else {
    Address a{};
    ASSERT_TRUE(parent.recvValue(&a, milliseconds(20000)));
    if (killedDuring) {
      ASSERT_TRUE(parent.sendValue(uint32_t{1}));
    }
    st = pact_connect(e, a.text, 20000, &peer);
    if (st != PACT_OK) peer = 0;  // the listener died first: refused, lost or timed out
  }
  if (leaver) {
    // Leaving: as soon as the connection is there. Killed: whenever the kill comes.
    if (plan.how != How::kKillDuring) {
      EXPECT_EQ(st, PACT_OK) << pact_last_error();
    }
    if (plan.how == How::kKillAfter) {
      ASSERT_TRUE(parent.sendValue(uint32_t{1}));
    }
    while (plan.how != How::kLeave) (void)pact_progress(e, 100);
    pact_engine_destroy(e);
    return;
  }
  survive(e, peer, other, parent);
  pact_engine_destroy(e);
}

void runRound(int round) {
  const Plan plan{round % 2 == 0 ? Role::kListener : Role::kConnector, static_cast<How>(round / 2 % 3)};
  // Kills land from the start of the connect to well after it (fault timing, not a wait).
  const long delayUs = static_cast<long>(round) * 1777 % (plan.how == How::kKillDuring ? 12000 : 3000);
  SCOPED_TRACE("round " + std::to_string(round) + ": the " + nameOf(plan.leaver) +
               (plan.how == How::kLeave       ? " leaves"
                : plan.how == How::kKillAfter ? " is killed " + std::to_string(delayUs) + " us after its connect"
                                              : " is killed " + std::to_string(delayUs) + " us into its connect"));
  auto [pl, cl] = Channel::pair();
  auto [pc, cc] = Channel::pair();
  ForkPeer listener = ForkPeer::start("listener", [&] { side(Role::kListener, plan, cl); },
                                      {milliseconds(40000), {&pl, &pc, &cc}});
  ForkPeer connector = ForkPeer::start("connector", [&] { side(Role::kConnector, plan, cc); },
                                       {milliseconds(40000), {&pl, &cl, &pc}});
  cl.close();
  cc.close();
  Address a{};
  ASSERT_TRUE(pl.recvValue(&a, milliseconds(20000))) << "no listener address";
  ASSERT_TRUE(pc.sendValue(a));
  const bool listenerLeaves = plan.leaver == Role::kListener;
  Channel& toLeaver = listenerLeaves ? pl : pc;
  Channel& toSurvivor = listenerLeaves ? pc : pl;
  ForkPeer& leaver = listenerLeaves ? listener : connector;
  ForkPeer& survivor = listenerLeaves ? connector : listener;
  if (plan.how != How::kLeave) {
    uint32_t note = 0;
    ASSERT_TRUE(toLeaver.recvValue(&note, milliseconds(20000))) << leaver.wait(milliseconds(1000)).describe();
    const timespec pause{0, delayUs * 1000};
    nanosleep(&pause, nullptr);
    leaver.kill(SIGKILL);
  }
  leaver.wait(milliseconds(20000));
  if (plan.how != How::kLeave)
    EXPECT_TRUE(leaver.outcome().killedBy(SIGKILL)) << leaver.outcome().describe();
  else
    EXPECT_TRUE(leaver.outcome().ok()) << leaver.outcome().describe();
  (void)toSurvivor.sendValue(uint32_t{1});  // it may have seen the loss and ended already
  survivor.wait(milliseconds(30000));
  EXPECT_TRUE(survivor.outcome().ok()) << "the survivor: " << survivor.outcome().describe();
}

class ConnectDeath : public ::testing::TestWithParam<int> {};

TEST_P(ConnectDeath, APeerLeavingOrDyingWhileConnectingNeverKillsTheOther) { runRound(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Rounds, ConnectDeath, ::testing::Range(0, roundsFromEnv("CONNECT_DEATH_ROUNDS", 24)));

}  // namespace
}  // namespace pact::test
