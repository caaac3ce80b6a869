// The service mapping (profile + device -> UCX settings of the class's context), fallbacks,
// the user's UCX_* winning, context keys, and probeTransports over the real loopback device.
#include <gtest/gtest.h>
#include <ucs/debug/log_def.h>

#include <cstdarg>
#include <cstdio>

#include "common/clock.h"
#include "tests/common/scoped_env.h"
#include "transport/service.h"
#include "ucx/worker.h"

namespace pact::transport {
namespace {

using Settings = std::vector<std::pair<std::string, std::string>>;
using test::ScopedEnv;

ucx::DeviceInfo rdmaDevice() {
  ucx::DeviceInfo d;
  d.name = "mlx5_0:1";
  d.transports = {"rc_verbs", "rc_mlx5", "ud_verbs", "ud_mlx5", "dc_mlx5"};
  d.rdma = true;
  return d;
}

ucx::DeviceInfo tcpDevice() {
  ucx::DeviceInfo d;
  d.name = "eth0";
  d.transports = {"tcp"};
  return d;
}

ucx::DeviceInfo loopback() {
  ucx::DeviceInfo d;
  d.name = "lo";
  d.transports = {"tcp"};
  d.loopback = true;
  return d;
}

// The unit suite runs with UCX_TLS set; the mapping tests need the user's UCX_* unset.
class ServiceMap : public ::testing::Test {
 protected:
  void SetUp() override {
    clean_.set("UCX_TLS", std::nullopt).set("UCX_IB_SL", std::nullopt)
        .set("UCX_IB_TRAFFIC_CLASS", std::nullopt).set("UCX_TCP_TX_SEG_SIZE", std::nullopt)
        .set("UCX_TCP_RX_SEG_SIZE", std::nullopt);
  }
  ScopedEnv clean_;
};

ServiceConfig mapOk(const Profile& p, const ucx::DeviceInfo& d) {
  auto c = serviceFor(p, d, "T");
  EXPECT_TRUE(c.ok()) << c.error().message;
  return c.ok() ? *c : ServiceConfig{};
}

struct Row {
  const char* profile;
  bool rdma;
  Settings settings;
  const char* key;
  const char* summary;
  const char* warning;
};

// What every context that carries data over tcp gets (service.cpp, tcpSegments with no whole message).
const Settings kTcp = {{"TCP_TX_SEG_SIZE", "32K"}, {"TCP_RX_SEG_SIZE", "256K"}};
constexpr const char* kTcpKey = "TCP_TX_SEG_SIZE=32K;TCP_RX_SEG_SIZE=256K";
#define kTcpNotes "UCX_TCP_TX_SEG_SIZE=32K, UCX_TCP_RX_SEG_SIZE=256K"

class ServiceTable : public ServiceMap, public ::testing::WithParamInterface<Row> {};

TEST_P(ServiceTable, MapsProfileAndDeviceToUcxSettings) {
  const Row& r = GetParam();
  auto profile = Profile::parse(r.profile);
  ASSERT_TRUE(profile.ok()) << profile.error().message;
  ServiceConfig c = mapOk(*profile, r.rdma ? rdmaDevice() : tcpDevice());
  EXPECT_EQ(c.ucxSettings, r.settings);
  EXPECT_EQ(c.key, r.key);
  EXPECT_EQ(c.summary, r.summary);
  EXPECT_EQ(c.fallbackWarning, r.warning);
}

INSTANTIATE_TEST_SUITE_P(
    Table, ServiceTable,
    ::testing::Values(
        Row{"service=auto", true, {}, "ucx-default", "service=auto: UCX chooses the transports", ""},
        Row{"rc", true, {{"TLS", "rc,sm,self"}}, "TLS=rc,sm,self",
            "service=rc: UCX_TLS=rc,sm,self", ""},
        Row{"ud", true, {{"TLS", "ud,sm,self"}}, "TLS=ud,sm,self",
            "service=ud: UCX_TLS=ud,sm,self", ""},
        Row{"rc,tc=106,sl=3", true,
            {{"TLS", "rc,sm,self"}, {"IB_TRAFFIC_CLASS", "106"}, {"IB_SL", "3"}},
            "TLS=rc,sm,self;IB_TRAFFIC_CLASS=106;IB_SL=3",
            "service=rc: UCX_TLS=rc,sm,self, UCX_IB_TRAFFIC_CLASS=106, UCX_IB_SL=3", ""},
        Row{"service=auto,sl=0", true, {{"IB_SL", "0"}}, "IB_SL=0",
            "service=auto: UCX chooses the transports, UCX_IB_SL=0", ""},
        Row{"service=auto", false, kTcp, kTcpKey,
            "service=auto: UCX chooses the transports, " kTcpNotes, ""},
        Row{"rc", false, kTcp, kTcpKey,
            "service=rc: UCX chooses among TCP and shared memory (fallback=tcp), " kTcpNotes,
            "traffic class T asked for service=rc but device eth0 has no RDMA transport "
            "(transports: tcp); using TCP and shared memory (fallback=tcp)"},
        Row{"ud,tc=5", false, kTcp, kTcpKey,
            "service=ud: UCX chooses among TCP and shared memory (fallback=tcp), tc=5 ignored (no "
            "RDMA transport), " kTcpNotes,
            "traffic class T asked for service=ud but device eth0 has no RDMA transport "
            "(transports: tcp); using TCP and shared memory (fallback=tcp); tc=5 ignored"},
        Row{"service=auto,tc=5,sl=1", false, kTcp, kTcpKey,
            "service=auto: UCX chooses the transports, tc=5 and sl=1 ignored (no RDMA transport), " kTcpNotes,
            "traffic class T asked for tc=5 and sl=1 but device eth0 has no RDMA transport; "
            "ignored"},
        Row{"service=auto,fallback=fail", false, kTcp, kTcpKey,
            "service=auto: UCX chooses the transports, " kTcpNotes, ""}));

TEST_F(ServiceMap, FallbackFailIsAnError) {
  auto p = Profile::parse("rc,fallback=fail");
  ASSERT_TRUE(p.ok());
  auto c = serviceFor(*p, tcpDevice(), "KV");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status(), Status::kUnsupported);
  EXPECT_EQ(c.error().message,
            "traffic class KV asked for service=rc but device eth0 has no RDMA transport "
            "(transports: tcp) and fallback=fail");
  EXPECT_TRUE(serviceFor(*p, rdmaDevice(), "KV").ok());
}

TEST_F(ServiceMap, RdmaDeviceWithoutTheFamilyFallsBackToTcp) {
  ucx::DeviceInfo d = rdmaDevice();
  d.transports = {"rc_verbs"};
  ServiceConfig c = mapOk(*Profile::parse("ud,sl=2"), d);
  EXPECT_EQ(c.ucxSettings, (Settings{{"TLS", "tcp,sm,self"}}));
  EXPECT_EQ(c.fallbackWarning,
            "traffic class T asked for service=ud but device mlx5_0:1 has no ud_* transport "
            "(transports: rc_verbs); using tcp,sm,self (fallback=tcp); sl=2 ignored");
  auto fail = serviceFor(*Profile::parse("ud,fallback=fail"), d, "3");
  ASSERT_FALSE(fail.ok());
  EXPECT_EQ(fail.error().message,
            "traffic class 3 asked for service=ud but device mlx5_0:1 has no ud_* transport "
            "(transports: rc_verbs) and fallback=fail");
}

TEST_F(ServiceMap, EqualSettingsShareAKey) {
  const auto dev = rdmaDevice();
  // Fields that do not change the UCX settings do not split contexts.
  EXPECT_EQ(mapOk(*Profile::parse("rc,lanes=4,unordered"), dev).key,
            mapOk(*Profile::parse("rc,verify=xxh3,timeout=1s"), dev).key);
  EXPECT_EQ(mapOk(Profile{}, dev).key, mapOk(*Profile::parse("lanes=2"), dev).key);
  EXPECT_NE(mapOk(*Profile::parse("rc"), dev).key, mapOk(*Profile::parse("ud"), dev).key);
  EXPECT_NE(mapOk(*Profile::parse("rc"), dev).key, mapOk(*Profile::parse("rc,sl=1"), dev).key);
  // Without RDMA, a falling-back class shares the auto context.
  EXPECT_EQ(mapOk(*Profile::parse("rc"), tcpDevice()).key, mapOk(Profile{}, tcpDevice()).key);
}

TEST_F(ServiceMap, TheUsersUcxSettingsWin) {
  ScopedEnv user;
  user.set("UCX_TLS", "dc_x,self").set("UCX_IB_SL", "7");
  ServiceConfig c = mapOk(*Profile::parse("rc,tc=1,sl=2"), rdmaDevice());
  EXPECT_EQ(c.ucxSettings, (Settings{{"IB_TRAFFIC_CLASS", "1"}}));
  EXPECT_EQ(c.key, "IB_TRAFFIC_CLASS=1");
  EXPECT_EQ(c.summary,
            "service=rc: UCX_TLS=dc_x,self (set by the user; wins over rc,sm,self), "
            "UCX_IB_TRAFFIC_CLASS=1, UCX_IB_SL=7 (set by the user; wins over 2)");
}

TEST_F(ServiceMap, TcpBulkSettingsOnlyWhereTcpCarriesDataAndTheUserHasNotSetThem) {
  ucx::DeviceInfo both = rdmaDevice();
  both.transports.push_back("tcp");
  // rc/ud leave tcp out of the TLS list: nothing to tune. auto and the tcp fallback keep it.
  EXPECT_EQ(mapOk(*Profile::parse("rc"), both).ucxSettings, (Settings{{"TLS", "rc,sm,self"}}));
  EXPECT_EQ(mapOk(Profile{}, both).ucxSettings, kTcp);
  EXPECT_EQ(mapOk(Profile{}, rdmaDevice()).ucxSettings, Settings{});
  ucx::DeviceInfo rcOnly = both;
  rcOnly.transports = {"rc_verbs", "tcp"};
  Settings fallback = {{"TLS", "tcp,sm,self"}};
  fallback.insert(fallback.end(), kTcp.begin(), kTcp.end());
  EXPECT_EQ(mapOk(*Profile::parse("ud"), rcOnly).ucxSettings, fallback);
  {  // the user's UCX_TLS leaves tcp out: nothing to tune
    ScopedEnv tls("UCX_TLS", "sm,self");
    EXPECT_EQ(mapOk(Profile{}, tcpDevice()).ucxSettings, Settings{});
    tls.set("UCX_TLS", "^tcp");
    EXPECT_EQ(mapOk(Profile{}, tcpDevice()).ucxSettings, Settings{});
    tls.set("UCX_TLS", "^sm");
    EXPECT_EQ(mapOk(Profile{}, tcpDevice()).ucxSettings, kTcp);
    tls.set("UCX_TLS", "tcp,self");
    EXPECT_EQ(mapOk(Profile{}, tcpDevice()).ucxSettings, kTcp);
  }
  ScopedEnv user;
  user.set("UCX_TCP_RX_SEG_SIZE", "32K");
  ServiceConfig c = mapOk(Profile{}, tcpDevice());
  EXPECT_EQ(c.ucxSettings, (Settings{{"TCP_TX_SEG_SIZE", "32K"}}));
  EXPECT_NE(c.summary.find("UCX_TCP_RX_SEG_SIZE=32K (set by the user; wins over 256K)"),
            std::string::npos) << c.summary;
}

// The engine's contexts carry each eager offer whole: tcp segments that hold the class's `eager`
// bytes and headers, received into a segment twice that size; no eager, the bulk sizes.
TEST_F(ServiceMap, EngineTcpSegmentsHoldAWholeEagerOffer) {
  auto whole = [&](const char* profile) {
    auto p = Profile::parse(profile);
    EXPECT_TRUE(p.ok());
    auto c = serviceFor(*p, tcpDevice(), "KV", true);
    EXPECT_TRUE(c.ok());
    return c.ok() ? c->ucxSettings : Settings{};
  };
  EXPECT_EQ(whole("service=auto"), (Settings{{"TCP_TX_SEG_SIZE", "320K"}, {"TCP_RX_SEG_SIZE", "640K"}}));
  EXPECT_EQ(whole("eager=1M"), (Settings{{"TCP_TX_SEG_SIZE", "1088K"}, {"TCP_RX_SEG_SIZE", "2176K"}}));
  EXPECT_EQ(whole("eager=0"), kTcp) << "no eager offers: the bulk segments";
  EXPECT_EQ(mapOk(Profile{}, tcpDevice()).ucxSettings, kTcp) << "the plugin: the bulk segments";
  // Different segments are different contexts.
  auto p = Profile::parse("eager=64K");
  EXPECT_NE(serviceFor(*p, tcpDevice(), "KV", true)->key, serviceFor(Profile{}, tcpDevice(), "KV", true)->key);
  ScopedEnv user;
  user.set("UCX_TCP_TX_SEG_SIZE", "8K");
  EXPECT_EQ(whole("service=auto"), (Settings{{"TCP_RX_SEG_SIZE", "640K"}})) << "the user's value wins";
}

TEST_F(ServiceMap, ServicesForEveryClass) {
  auto t = ClassTable::load({{"PACT_TC_DEFAULT", "ud"}, {"PACT_TC_4", "rc"}});
  ASSERT_TRUE(t.ok());
  auto all = servicesFor(*t, rdmaDevice());
  ASSERT_TRUE(all.ok()) << all.error().message;
  ASSERT_EQ(all->size(), 6u);
  EXPECT_EQ((*all)[0].entry.name, "DEFAULT");
  EXPECT_EQ((*all)[0].config.key, "TLS=ud,sm,self");
  EXPECT_EQ((*all)[1].entry.name, "4");
  EXPECT_EQ((*all)[1].config.key, "TLS=rc,sm,self");
  EXPECT_EQ((*all)[2].config.key, "TLS=ud,sm,self");  // KV inherits DEFAULT
  auto bad = ClassTable::load({{"PACT_TC_CKPT", "rc,fallback=fail"}});
  ASSERT_TRUE(bad.ok());
  auto failed = servicesFor(*bad, tcpDevice());
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.error().message.find("traffic class CKPT asked for service=rc"), std::string::npos);
}

// With a CUDA driver UCX lists the transports that move device memory; every service that sets
// UCX_TLS keeps them (an RDMA user's service=rc must not lose GPU memory), on an RDMA device and in
// the tcp fallback alike. Without one, the lists are as before and name no CUDA transport.
TEST_F(ServiceMap, EveryServiceKeepsTheCudaTransportsWhereUcxHasThem) {
  const std::vector<std::string> cuda = {"cuda_copy", "cuda_ipc", "gdr_copy"};
  auto tlsOf = [](const ServiceConfig& c) {
    for (const auto& [k, v] : c.ucxSettings)
      if (k == "TLS") return v;
    return std::string("(UCX chooses)");
  };
  for (const char* service : {"auto", "rc", "ud"})
    for (bool withDriver : {true, false})
      for (bool rdma : {true, false}) {
        ucx::DeviceInfo d = rdma ? rdmaDevice() : tcpDevice();
        if (!rdma) d.transports = {"tcp"};
        if (rdma) d.transports.push_back("tcp");  // the tcp fallback of an RDMA port
        if (withDriver) d.cudaTransports = cuda;
        auto p = Profile::parse(std::string("service=") + service);
        ASSERT_TRUE(p.ok());
        // rc and ud on a device without them fall back to tcp: a TLS list only where RDMA exists.
        auto c = serviceFor(*p, d, "T");
        ASSERT_TRUE(c.ok()) << c.error().message;
        const std::string tls = tlsOf(*c);
        const std::string where = std::string(service) + (withDriver ? " with" : " without") +
                                  " a driver on " + d.name + ": " + tls;
        if (tls == "(UCX chooses)") {  // UCX picks every transport, CUDA ones included
          EXPECT_TRUE(std::string(service) == "auto" || !rdma) << where;
          continue;
        }
        for (const auto& t : cuda)
          EXPECT_EQ(tls.find(t) != std::string::npos, withDriver) << where;
        EXPECT_NE(c->summary.find(tls), std::string::npos) << "pact-info shows the list: " << c->summary;
      }
  auto rc = Profile::parse("service=rc");
  ucx::DeviceInfo d = rdmaDevice();
  d.cudaTransports = cuda;
  EXPECT_EQ(serviceFor(*rc, d, "T")->key, "TLS=rc,sm,self,cuda_copy,cuda_ipc,gdr_copy");
}

TEST(ContextSettings, AppliedWithUcpConfigModify) {
  auto bad = ucx::Context::create("", "t", {{"RNDV_THRESH", "not-a-size"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("config_modify(RNDV_THRESH=not-a-size)"), std::string::npos)
      << bad.error().message;
  EXPECT_TRUE(ucx::Context::create("lo", "t", {{"TLS", "tcp"}, {"RNDV_THRESH", "64K"}}).ok());
}

// UCX 1.13 accepts a transport-prefixed key through ucp_config_modify and then drops it with a
// warning "invalid configurations: ..." at worker creation: the tcp settings must not be among
// the dropped ones on either UCX.
std::string g_ucxWarnings;
ucs_log_func_rc_t keepWarnings(const char*, unsigned, const char*, ucs_log_level_t level,
                               const ucs_log_component_config_t*, const char* fmt, va_list ap) {
  if (level <= UCS_LOG_LEVEL_WARN) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    g_ucxWarnings += std::string(buf) + "\n";
  }
  return UCS_LOG_FUNC_RC_CONTINUE;
}

TEST(ContextSettings, TcpKeysAreAppliedNotDropped) {
  ScopedEnv env;
  env.set("UCX_TCP_TX_SEG_SIZE", std::nullopt).set("UCX_TCP_RX_SEG_SIZE", std::nullopt);
  auto ctx = ucx::Context::create("lo", "t", {{"TLS", "tcp"}, {"TCP_TX_SEG_SIZE", "32K"},
                                              {"TCP_RX_SEG_SIZE", "256K"}});
  ASSERT_TRUE(ctx.ok()) << ctx.error().message;
  g_ucxWarnings.clear();
  ucs_log_push_handler(keepWarnings);
  auto worker = ucx::Worker::create(*ctx);
  ucs_log_pop_handler();
  ASSERT_TRUE(worker.ok()) << worker.error().message;
  EXPECT_EQ(g_ucxWarnings.find("SEG_SIZE"), std::string::npos) << g_ucxWarnings;
}

TEST(ProbeTransports, LoopbackUnderUcxTlsTcpSelectsTcp) {
  ScopedEnv env("UCX_TLS", "tcp");
  ServiceConfig c = mapOk(Profile{}, loopback());
  const auto start = now();
  auto lanes = probeTransports(loopback(), c);
  ASSERT_TRUE(lanes.ok()) << lanes.error().message;
  EXPECT_LT(now() - start, std::chrono::seconds(5));
  EXPECT_NE(lanes->find("remote lane[0]: tcp/lo"), std::string::npos) << *lanes;
  EXPECT_NE(lanes->find("same-host lane[0]: tcp/lo"), std::string::npos) << *lanes;
  EXPECT_EQ(lanes->find("sysv"), std::string::npos) << *lanes;
}

TEST(ProbeTransports, SettingsOverrideTheEnvironmentAndRemoteViewDropsSharedMemory) {
  ScopedEnv env("UCX_TLS", "tcp");
  ServiceConfig c;
  c.ucxSettings = {{"TLS", "tcp,sysv,self"}};
  auto lanes = probeTransports(loopback(), c);
  ASSERT_TRUE(lanes.ok()) << lanes.error().message;
  EXPECT_NE(lanes->find("remote lane[0]: tcp/lo"), std::string::npos) << *lanes;
  EXPECT_NE(lanes->find("same-host lane[0]: sysv/memory"), std::string::npos) << *lanes;
  c.ucxSettings = {{"TLS", "sm,self"}};
  lanes = probeTransports(loopback(), c);
  ASSERT_TRUE(lanes.ok()) << lanes.error().message;
  EXPECT_NE(lanes->find("remote (no network transport in the TLS list)"), std::string::npos)
      << *lanes;
}

}  // namespace
}  // namespace pact::transport
