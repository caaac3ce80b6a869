// Case 1: getProperties of every device, for every ABI version, as NCCL's topology code reads
// it. Runs with PACT_NET_DEVICES=lo UCX_NET_DEVICES=lo (set by meson), so device 0 is loopback.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>

#include "tests/abi/harness.h"

namespace pact::abi_test {
namespace {

constexpr size_t kMaxNetSize = size_t{1} << 40;  // NCCL_MAX_NET_SIZE_BYTES

void checkDevice(int version, int dev, const loader::Properties& p) {
  SCOPED_TRACE("v" + std::to_string(version) + " dev " + std::to_string(dev) + " '" + p.name + "'");
  EXPECT_FALSE(p.name.empty()) << "name is the topology key and must be set";
  // Speed comes from the link; a link without one (loopback, virtio) reports 0, which NCCL reads
  // as its own default, rather than a made-up constant.
  EXPECT_GE(p.speed, 0) << "speed (Mbps)";
  if (p.name == "lo") {
    EXPECT_EQ(p.speed, 0) << "loopback has no link speed";
  }
  EXPECT_TRUE(std::isfinite(p.latency)) << "latency";
  EXPECT_GE(p.latency, 0.0f) << "latency (us)";
  EXPECT_GT(p.maxComms, 0) << "maxComms";
  EXPECT_GT(p.maxRecvs, 1) << "maxRecvs (multi-receive is part of the design)";
  EXPECT_LE(p.maxRecvs, loader::kMaxRecvs) << "maxRecvs above what NCCL groups";
  EXPECT_NE(p.ptrSupport & loader::kPtrHost, 0) << "ptrSupport " << p.ptrSupport << " lacks HOST";
  EXPECT_EQ(p.netDeviceType, 0) << "netDeviceType must be HOST";
  EXPECT_GT(p.maxP2pBytes, 0u) << "maxP2pBytes";
  EXPECT_LE(p.maxP2pBytes, kMaxNetSize) << "maxP2pBytes";
  EXPECT_GT(p.maxCollBytes, 0u) << "maxCollBytes";
  EXPECT_LE(p.maxCollBytes, kMaxNetSize) << "maxCollBytes";
  if (version >= 11) {
    EXPECT_GE(p.maxMultiRequestSize, 1) << "maxMultiRequestSize";
    EXPECT_EQ(p.railId, -1) << "railId";
    EXPECT_EQ(p.planeId, -1) << "planeId";
  }
  if (version >= 9) {
    EXPECT_EQ(p.vNdevs, 1) << "vProps.ndevs of a physical device";
    EXPECT_EQ(p.vDevs[0], dev) << "vProps.devs[0] of a physical device";
  }
}

class Properties : public ::testing::TestWithParam<int> {};

TEST_P(Properties, EveryDeviceIsSane) {
  const int version = GetParam();
  runInChild("properties", [version] {
    auto plugin = openPlugin(version);
    ASSERT_TRUE(plugin);
    ASSERT_NE(plugin->name(), nullptr);
    EXPECT_GT(std::strlen(plugin->name()), 0u) << "plugin name";
    int ndev = 0;
    ASSERT_EQ(plugin->devices(&ndev), loader::kSuccess);
    ASSERT_GE(ndev, 1);
    std::set<std::string> names;
    std::set<uint64_t> guids;
    for (int dev = 0; dev < ndev; ++dev) {
      loader::Properties p;
      ASSERT_EQ(plugin->getProperties(dev, &p), loader::kSuccess) << "getProperties(" << dev << ")";
      checkDevice(version, dev, p);
      EXPECT_TRUE(names.insert(p.name).second) << "duplicate device name '" << p.name << "'";
      EXPECT_TRUE(guids.insert(p.guid).second)
          << "duplicate guid " << p.guid << " (dev " << dev << ")";
      if (dev == 0) {
        EXPECT_NE(p.name.find("lo"), std::string::npos)
            << "with PACT_NET_DEVICES=lo device 0 should be loopback, got '" << p.name << "'";
      }
    }
    // The properties must be stable: NCCL calls getProperties from several threads and times.
    loader::Properties again;
    ASSERT_EQ(plugin->getProperties(0, &again), loader::kSuccess);
    loader::Properties first;
    ASSERT_EQ(plugin->getProperties(0, &first), loader::kSuccess);
    EXPECT_EQ(again.name, first.name);
    EXPECT_EQ(again.guid, first.guid);
    EXPECT_EQ(again.speed, first.speed);
    // Out-of-range devices are refused rather than read out of bounds.
    loader::Properties bad;
    EXPECT_NE(plugin->getProperties(ndev, &bad), loader::kSuccess) << "getProperties(ndev)";
    EXPECT_NE(plugin->getProperties(-1, &bad), loader::kSuccess) << "getProperties(-1)";
  });
}

INSTANTIATE_TEST_SUITE_P(Versions, Properties,
                         ::testing::Range(loader::kOldestVersion, loader::kNewestVersion + 1),
                         versionName);

}  // namespace
}  // namespace pact::abi_test
