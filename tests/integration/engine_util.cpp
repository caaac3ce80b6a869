#include "tests/integration/engine_util.h"
#include "tests/common/scoped_env.h"

#include <signal.h>
#include <stdlib.h>

namespace pact::test {

namespace {

constexpr std::chrono::milliseconds kNoteWait{20000};

}  // namespace

pact_engine_t makeEngine(const char* name, const char* listenIp, bool progressThread,
                         uint64_t creditBudget) {
  pact_engine_config_t c;
  pact_engine_config_init(&c);
  c.name = name;
  c.listen_ip = listenIp;
  c.credit_budget = creditBudget;
  c.progress_thread = progressThread ? 1 : 0;
  pact_engine_t e = nullptr;
  EXPECT_EQ(pact_engine_create(&c, &e), PACT_OK) << pact_last_error();
  return e;
}

Rank connectRank(const std::string& name, Channel& parent, size_t ranks) {
  Rank r;
  r.engine = makeEngine(name.c_str(), "127.0.0.1");
  Address a{};
  if (r.engine == nullptr || pact_engine_address(r.engine, a.text, sizeof a.text) != PACT_OK ||
      !parent.sendValue(a)) {
    ADD_FAILURE() << name << ": no engine address: " << pact_last_error();
    return r;
  }
  std::vector<pact_peer_t> peers(ranks);
  for (size_t k = 0; k < ranks; ++k) {
    Address other{};
    if (!parent.recvValue(&other, kNoteWait)) {
      ADD_FAILURE() << name << ": no address for rank " << k;
      return r;
    }
    const pact_status_t st = pact_connect(r.engine, other.text, 20000, &peers[k]);
    if (st != PACT_OK) {
      ADD_FAILURE() << name << ": connect to rank " << k << ": " << pact_status_string(st) << ": "
                    << pact_last_error();
      return r;
    }
  }
  r.peers = std::move(peers);
  return r;
}

Side::~Side() {
  if (engine == nullptr) return;
  for (pact_xfer_t x : xfers) (void)pact_xfer_release(engine, x);
  // Released transfers go once no UCX operation touches their blocks any more.
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stats().open_transfers != 0 && std::chrono::steady_clock::now() < limit)
    EXPECT_EQ(pact_progress(engine, 1), PACT_OK);
  if (mr != nullptr) {
    EXPECT_EQ(pact_mem_deregister(engine, mr), PACT_OK) << pact_last_error();
    EXPECT_EQ(stats().open_registrations, 0u);
  }
  pact_engine_destroy(engine);
}

std::vector<pact_block_t> Side::blocks(const std::vector<uint64_t>& lengths, uint64_t offset) const {
  std::vector<pact_block_t> out;
  for (uint64_t n : lengths) {
    out.push_back({mr, offset, n});
    offset += n;
  }
  return out;
}

pact_stats_t Side::stats() const {
  pact_stats_t s{};
  EXPECT_EQ(pact_stats(engine, &s), PACT_OK);
  return s;
}

pact_xfer_info_t Side::waitFinal(pact_xfer_t xfer, int timeoutMs) const {
  pact_xfer_info_t info{};
  const pact_status_t st = pact_xfer_wait(engine, xfer, timeoutMs, &info);
  EXPECT_EQ(st, PACT_OK) << pact_last_error();
  EXPECT_TRUE(info.final);
  return info;
}

CheckingHook& Side::checkCommits() {
  EXPECT_EQ(pact_set_commit_hook(engine, &CheckingHook::call, &hook), PACT_OK) << pact_last_error();
  return hook;
}

void Side::note(uint32_t what) const { EXPECT_TRUE(channel->sendValue(what)); }

bool Side::await(uint32_t what, int timeoutMs) const {
  uint32_t got = 0;
  if (!channel->recvValue(&got, std::chrono::milliseconds(timeoutMs))) return false;
  EXPECT_EQ(got, what);
  return got == what;
}

void killOnNote(Channel& from, ForkPeer& victim, ForkPeer& survivor) {
  uint32_t go = 0;
  ASSERT_TRUE(from.recvValue(&go, kNoteWait));
  victim.kill(SIGKILL);
  victim.wait(std::chrono::milliseconds(5000));
  survivor.wait(std::chrono::milliseconds(20000));
}

int roundsFromEnv(const char* name, int fallback) {
  const char* env = std::getenv(name);
  const int n = env != nullptr ? std::atoi(env) : fallback;
  return n > 0 ? n : fallback;
}

bool awaitGrant(pact_engine_t e, pact_peer_t peer) {
  uint64_t granted = 0, used = 0;
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (pact_peer_credit(e, peer, &granted, &used) == PACT_OK && granted == 0) {
    if (std::chrono::steady_clock::now() > limit) return false;
    (void)pact_progress(e, 1);
  }
  return granted != 0;
}

bool Side::awaitProgressing(uint32_t what, int timeoutMs) const {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (!channel->readable(std::chrono::milliseconds(0))) {
    if (std::chrono::steady_clock::now() > limit) return false;
    EXPECT_EQ(pact_progress(engine, 1), PACT_OK);
  }
  return await(what, 0);
}

void runPair(const PairOptions& o, const SideBody& receiver, const SideBody& sender,
             const ParentBody& parent) {
  auto [rx, tx] = Channel::pair();
  auto [pr, cr] = Channel::pair();
  auto [ps, cs] = Channel::pair();
  ForkPeer r = ForkPeer::start(
      "receiver",
      [&] {
        const ScopedEnv env(o.receiverEnv);
        Side side;
        side.channel = &rx;
        side.parent = &cr;
        side.engine = makeEngine("receiver", "127.0.0.1", o.progressThread, o.creditBudget);
        ASSERT_NE(side.engine, nullptr);
        Address a{};
        PACT_OK_OR_FAIL(pact_engine_address(side.engine, a.text, sizeof a.text));
        ASSERT_TRUE(rx.sendValue(a));
        if (o.expectRefused) {
          EXPECT_EQ(pact_peer_wait(side.engine, "sender", 1500, &side.peer), PACT_ERR_TIMED_OUT);
          uint32_t done = 0;
          EXPECT_TRUE(rx.recvValue(&done, kNoteWait));
          return;
        }
        PACT_OK_OR_FAIL(pact_peer_wait(side.engine, "sender", 20000, &side.peer));
        // The bodies start with each side's credit grant in: a send before it would go the
        // advertised way even when eager (the tests that count eager offers rely on it).
        ASSERT_TRUE(awaitGrant(side.engine, side.peer)) << "no credit grant from the sender";
        side.memory.assign(o.memory, 0);
        PACT_OK_OR_FAIL(pact_mem_register(side.engine, side.memory.data(), side.memory.size(), &side.mr));
        receiver(side);
      },
      {o.timeout, {&tx, &pr, &ps, &cs}});
  ForkPeer s = ForkPeer::start(
      "sender",
      [&] {
        const ScopedEnv env(o.senderEnv);
        Side side;
        side.channel = &tx;
        side.parent = &cs;
        side.engine = makeEngine("sender", nullptr, o.progressThread);
        ASSERT_NE(side.engine, nullptr);
        Address a{};
        ASSERT_TRUE(tx.recvValue(&a, kNoteWait));
        if (o.expectRefused) {
          const auto t0 = std::chrono::steady_clock::now();
          EXPECT_EQ(pact_connect(side.engine, a.text, 20000, &side.peer), PACT_ERR_REFUSED);
          EXPECT_NE(std::string(pact_last_error()).find(o.refusal), std::string::npos)
              << pact_last_error();
          EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
          EXPECT_TRUE(tx.sendValue(uint32_t{1}));
          return;
        }
        PACT_OK_OR_FAIL(pact_connect(side.engine, a.text, 20000, &side.peer));
        ASSERT_TRUE(awaitGrant(side.engine, side.peer)) << "no credit grant from the receiver";
        side.memory.assign(o.memory, 0);
        PACT_OK_OR_FAIL(pact_mem_register(side.engine, side.memory.data(), side.memory.size(), &side.mr));
        sender(side);
      },
      {o.timeout, {&rx, &pr, &cr, &ps}});
  rx.close();
  tx.close();
  cr.close();
  cs.close();
  if (parent) {
    Children c{r, s, pr, ps};
    parent(c);
  }
  waitAll({&r, &s}, o.timeout + std::chrono::seconds(5));
  const bool killedR = r.outcome().killedBy(9), killedS = s.outcome().killedBy(9);
  if (!(parent && killedR)) {
    EXPECT_TRUE(r.outcome().ok()) << "receiver " << r.outcome().describe();
  }
  if (!(parent && killedS)) {
    EXPECT_TRUE(s.outcome().ok()) << "sender " << s.outcome().describe();
  }
}

}  // namespace pact::test
