// The PACT_* registry: defaults, valid values, and one exact error message per malformed value.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "transport/params.h"

namespace pact {
namespace {

TEST(Params, DefaultsWhenUnset) {
  auto p = Params::load({});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->net_devices.empty());
  EXPECT_EQ(p->epoch, 0u);
  EXPECT_EQ(p->log_level, log::Level::kWarn);
  EXPECT_EQ(p->max_recvs, 8);
  EXPECT_EQ(p->peer_timeout, std::chrono::seconds(30));
  EXPECT_EQ(p->liveness_interval, std::chrono::milliseconds(1));
}

TEST(Params, ParsesValidValues) {
  auto p = Params::load({{"PACT_NET_DEVICES", "lo, eth0,mlx5_0:1"},
                         {"PACT_EPOCH", "18446744073709551615"},
                         {"PACT_LOG_LEVEL", "debug"},
                         {"PACT_MAX_RECVS", "1"},
                         {"PACT_PEER_TIMEOUT", "250ms"},
                         {"PACT_LIVENESS_INTERVAL", "500us"}});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->net_devices, (std::vector<std::string>{"lo", "eth0", "mlx5_0:1"}));
  EXPECT_EQ(p->epoch, UINT64_MAX);
  EXPECT_EQ(p->log_level, log::Level::kDebug);
  EXPECT_EQ(p->max_recvs, 1);
  EXPECT_EQ(p->peer_timeout, std::chrono::milliseconds(250));
  EXPECT_EQ(p->liveness_interval, std::chrono::microseconds(500));
  EXPECT_TRUE(Params::load({{"PACT_NET_DEVICES", "all"}})->net_devices.empty());
}

struct Bad {
  const char* name;
  const char* value;
  const char* message;
};

class ParamsBad : public ::testing::TestWithParam<Bad> {};

TEST_P(ParamsBad, ErrorNamesVariableValueAndAllowed) {
  const Bad& b = GetParam();
  auto p = Params::load({{b.name, b.value}});
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status(), Status::kInvalidArgument);
  EXPECT_EQ(p.error().message, b.message);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ParamsBad,
    ::testing::Values(
        Bad{"PACT_EPOCH", "abc", "invalid PACT_EPOCH='abc': expected an unsigned 64-bit integer"},
        Bad{"PACT_EPOCH", "-1", "invalid PACT_EPOCH='-1': expected an unsigned 64-bit integer"},
        Bad{"PACT_EPOCH", "18446744073709551616",
            "invalid PACT_EPOCH='18446744073709551616': expected an unsigned 64-bit integer"},
        Bad{"PACT_EPOCH", "", "invalid PACT_EPOCH='': expected an unsigned 64-bit integer"},
        Bad{"PACT_LOG_LEVEL", "loud",
            "invalid PACT_LOG_LEVEL='loud': expected none, error, warn, info, debug or trace"},
        Bad{"PACT_MAX_RECVS", "0", "invalid PACT_MAX_RECVS='0': expected an integer from 1 to 8"},
        Bad{"PACT_MAX_RECVS", "9", "invalid PACT_MAX_RECVS='9': expected an integer from 1 to 8"},
        Bad{"PACT_PEER_TIMEOUT", "10",
            "invalid PACT_PEER_TIMEOUT='10': expected a duration with unit us, ms or s (e.g. 200ms)"},
        Bad{"PACT_PEER_TIMEOUT", "5 min",
            "invalid PACT_PEER_TIMEOUT='5 min': expected a duration with unit us, ms or s (e.g. 200ms)"},
        Bad{"PACT_LIVENESS_INTERVAL", "ms",
            "invalid PACT_LIVENESS_INTERVAL='ms': expected a duration with unit us, ms or s (e.g. 200ms)"},
        Bad{"PACT_NET_DEVICES", "lo,,eth0",
            "invalid PACT_NET_DEVICES='lo,,eth0': an empty device name in the list (expected "
            "comma-separated device names, or 'all')"},
        Bad{"PACT_FAULT", "delay=lane99:5ms",
            "invalid PACT_FAULT='delay=lane99:5ms': 'delay=lane99:5ms': expected a lane from 0 to 15"},
        Bad{"PACT_FAULT", "delay=lane0:5",
            "invalid PACT_FAULT='delay=lane0:5': 'delay=lane0:5': expected a duration with unit us, ms "
            "or s (e.g. 200ms)"},
        Bad{"PACT_FAULT", "lane_fail=lane1",
            "invalid PACT_FAULT='lane_fail=lane1': 'lane_fail=lane1': expected lane_fail=laneN:K"},
        Bad{"PACT_FAULT", "lane_fail=lane0:x",
            "invalid PACT_FAULT='lane_fail=lane0:x': 'lane_fail=lane0:x': expected the pieces posted "
            "before the lane fails (an unsigned integer)"},
        Bad{"PACT_FAULT", "delay=5ms",
            "invalid PACT_FAULT='delay=5ms': 'delay=5ms': expected delay=laneN:DURATION"},
        Bad{"PACT_FAULT", "seed=x", "invalid PACT_FAULT='seed=x': 'seed=x': expected an unsigned integer seed"},
        Bad{"PACT_FAULT", "drop",
            "invalid PACT_FAULT='drop': 'drop': expected key=value"},
        Bad{"PACT_FAULT", "drop=1.5",
            "invalid PACT_FAULT='drop=1.5': 'drop=1.5': expected a probability from 0 to 1"},
        Bad{"PACT_FAULT", "corrupt=-0.1",
            "invalid PACT_FAULT='corrupt=-0.1': 'corrupt=-0.1': expected a probability from 0 to 1"},
        Bad{"PACT_FAULT", "dup=0.1,dup=0.2",
            "invalid PACT_FAULT='dup=0.1,dup=0.2': 'dup=0.2': given twice"},
        Bad{"PACT_FAULT", "kill_after=0",
            "invalid PACT_FAULT='kill_after=0': 'kill_after=0': expected a duration with unit us, ms "
            "or s (e.g. 200ms)"},
        Bad{"PACT_FAULT", "epoch_skew=-1",
            "invalid PACT_FAULT='epoch_skew=-1': 'epoch_skew=-1': expected an unsigned integer"},
        Bad{"PACT_FAULT", "flood=1",
            "invalid PACT_FAULT='flood=1': 'flood=1': unknown fault; expected drop, dup, corrupt, "
            "reject, lose_remote_done, stall, delay, lane_fail, epoch_skew, kill_after or seed"},
        Bad{"PACT_AUTH_KEY_FILE", "/nonexistent/pact.key",
            "invalid PACT_AUTH_KEY_FILE='/nonexistent/pact.key': cannot read: No such file or directory "
            "(expected a readable file of 16 to 4096 bytes (the shared secret), or empty)"},
        Bad{"PACT_AUTH_KEY_FILE", PACT_SOURCE_ROOT "/tests/unit/data/short.key",
            "invalid PACT_AUTH_KEY_FILE='" PACT_SOURCE_ROOT "/tests/unit/data/short.key': is 5 bytes; "
            "at least 16 are needed (expected a readable file of 16 to 4096 bytes (the shared "
            "secret), or empty)"},
        Bad{"PACT_NET_DEVICES", "eth0;rm -rf",
            "invalid PACT_NET_DEVICES='eth0;rm -rf': device name 'eth0;rm -rf' has a character "
            "outside [A-Za-z0-9_.:-] (expected comma-separated device names, or 'all')"}));

TEST(Params, FaultSpecParses) {
  auto p = Params::load({{"PACT_FAULT", "delay=lane1:250ms, seed=7"}});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->fault.active());
  EXPECT_EQ(p->fault.delayLane, 1);
  EXPECT_EQ(p->fault.delay, std::chrono::milliseconds(250));
  EXPECT_EQ(p->fault.seed, 7u);
  EXPECT_EQ(p->fault.describe(), "delay=lane1:250ms,seed=7");
  EXPECT_FALSE(Params::load({})->fault.active());
  auto lane = Params::load({{"PACT_FAULT", "lane_fail=lane1:6"}});
  ASSERT_TRUE(lane.ok()) << lane.error().message;
  EXPECT_TRUE(lane->fault.active());
  EXPECT_FALSE(lane->fault.onPieces());
  EXPECT_EQ(lane->fault.failLane, 1);
  EXPECT_EQ(lane->fault.failAfter, 6u);
  EXPECT_EQ(lane->fault.describe(), "lane_fail=lane1:6,seed=1");
}

TEST(Params, FullFaultSpecParsesAndDescribesItself) {
  const char* spec =
      "drop=0.01,delay=lane0:5ms,dup=0.001,corrupt=0.001,reject=0.05,lose_remote_done=0.01,"
      "epoch_skew=1,kill_after=200ms,seed=7";
  auto p = Params::load({{"PACT_FAULT", spec}});
  ASSERT_TRUE(p.ok()) << p.error().message;
  const FaultSpec& f = p->fault;
  EXPECT_DOUBLE_EQ(f.drop, 0.01);
  EXPECT_DOUBLE_EQ(f.dup, 0.001);
  EXPECT_DOUBLE_EQ(f.corrupt, 0.001);
  EXPECT_DOUBLE_EQ(f.reject, 0.05);
  EXPECT_DOUBLE_EQ(f.loseRemoteDone, 0.01);
  EXPECT_EQ(f.epochSkew, 1u);
  EXPECT_EQ(f.killAfter, std::chrono::milliseconds(200));
  EXPECT_EQ(f.describe(),
            "drop=0.01,dup=0.001,corrupt=0.001,reject=0.05,lose_remote_done=0.01,delay=lane0:5ms,"
            "epoch_skew=1,kill_after=200ms,seed=7");
  EXPECT_TRUE(Params::load({{"PACT_FAULT", "drop=0"}}).ok());
  EXPECT_FALSE(Params::load({{"PACT_FAULT", "drop=0"}})->fault.active());
}

TEST(FaultDice, IsDeterministicPerSeedAndMatchesTheProbability) {
  FaultDice a(7, 1), b(7, 1), c(8, 1);
  int hitsA = 0, same = 0;
  for (int i = 0; i < 100000; ++i) {
    const bool x = a.roll(0.1), y = b.roll(0.1), z = c.roll(0.1);
    hitsA += x;
    same += x == y;
    (void)z;
  }
  EXPECT_EQ(same, 100000);
  EXPECT_NEAR(hitsA, 10000, 600);
  EXPECT_FALSE(a.roll(0));
  EXPECT_TRUE(a.roll(1));
  FaultDice d(7, 1);
  FaultDice e(8, 1);
  EXPECT_NE(d.next(), e.next());
}

TEST(Params, UnknownPactNamesAreReportedForTheTypoWarning) {
  std::vector<std::string> unknown;
  auto p = Params::load({{"PACT_EPOHC", "1"}, {"PACT_EPOCH", "2"}}, &unknown);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(unknown, std::vector<std::string>{"PACT_EPOHC"});
}

TEST(Params, EffectiveListsEveryRegisteredVariable) {
  auto p = Params::load({{"PACT_PEER_TIMEOUT", "1500ms"}});
  ASSERT_TRUE(p.ok());
  auto eff = p->effective();
  ASSERT_EQ(eff.size(), Params::table().size());
  for (size_t i = 0; i < eff.size(); ++i) EXPECT_EQ(eff[i].first, Params::table()[i].name);
  bool found = false;
  for (const auto& [k, v] : eff)
    if (k == "PACT_PEER_TIMEOUT") found = (v == "1500ms");
  EXPECT_TRUE(found);
}

TEST(SizeParser, Suffixes) {
  EXPECT_EQ(*SizeParser::parse("4K"), 4096u);
  EXPECT_EQ(*SizeParser::parse("512k"), 512u << 10);
  EXPECT_EQ(*SizeParser::parse("3M"), 3u << 20);
  EXPECT_EQ(*SizeParser::parse("2G"), 2ull << 30);
  EXPECT_EQ(*SizeParser::parse("17"), 17u);
  EXPECT_FALSE(SizeParser::parse("1T").ok());
  EXPECT_FALSE(SizeParser::parse("K").ok());
  EXPECT_FALSE(SizeParser::parse("99999999999999999999G").ok());
}

TEST(ParamsDoc, DocsParamsMdMatchesTheRegistry) {
  std::ifstream f(std::string(PACT_SOURCE_ROOT) + "/docs/params.md");
  ASSERT_TRUE(f.good()) << "docs/params.md is missing";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), Params::markdown())
      << "docs/params.md is stale: regenerate it with build/perf/pact-info --params-md > docs/params.md";
}

}  // namespace
}  // namespace pact

namespace pact {
namespace {
TEST(Params, AuthKeyFileIsReadAndNeverShown) {
  auto p = Params::load({{"PACT_AUTH_KEY_FILE", PACT_SOURCE_ROOT "/tests/unit/data/test.key"}});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_TRUE(p->auth_key.enabled());
  EXPECT_EQ(p->auth_key.secret, "0123456789abcdef0123");  // the trailing newline is not part of it
  for (const auto& [name, value] : p->effective()) {
    if (name == "PACT_AUTH_KEY_FILE") {
      EXPECT_EQ(value, PACT_SOURCE_ROOT "/tests/unit/data/test.key");
    }
    EXPECT_EQ(value.find("0123456789abcdef"), std::string::npos) << name;
  }
  EXPECT_FALSE(Params::load({})->auth_key.enabled());
}
}  // namespace
}  // namespace pact
