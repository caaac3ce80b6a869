// Virtual devices: fusing ports keeps a fact-based, unique identity and sums the bandwidth.
#include <gtest/gtest.h>

#include "ucx/devices.h"

namespace pact::ucx {
namespace {

DeviceInfo port(const char* name, uint64_t guid, int speed, float lat, const char* ip) {
  DeviceInfo d;
  d.name = name;
  d.netdev = name;
  d.guid = guid;
  d.speedMbps = speed;
  d.latencyUs = lat;
  d.ipAddress = ip;
  d.transports = {"tcp"};
  return d;
}

TEST(FuseDevices, SumsSpeedKeepsSlowestLatencyAndListsMembers) {
  DeviceInfo a = port("pa0", 0x1111, 10000, 5.0f, "10.77.0.1");
  DeviceInfo b = port("pa1", 0x2222, 25000, 7.5f, "10.77.1.1");
  b.transports = {"tcp", "rc_mlx5"};
  b.rdma = true;
  DeviceInfo v = fuseDevices({&a, &b}, {0, 1});
  EXPECT_EQ(v.name, "pa0+pa1");
  EXPECT_EQ(v.speedMbps, 35000);
  EXPECT_FLOAT_EQ(v.latencyUs, 7.5f);
  EXPECT_EQ(v.members, (std::vector<std::string>{"pa0", "pa1"}));
  EXPECT_EQ(v.memberIndices, (std::vector<int>{0, 1}));
  EXPECT_EQ(v.ucxDevices(), "pa0,pa1");
  EXPECT_EQ(v.ipAddress, "10.77.0.1");
  EXPECT_TRUE(v.rdma);
  EXPECT_EQ(v.transports, (std::vector<std::string>{"tcp", "rc_mlx5"}));
  EXPECT_NE(v.guid, a.guid);
  EXPECT_NE(v.guid, b.guid);
  EXPECT_NE(v.guid, fuseDevices({&b, &a}, {1, 0}).guid);  // order matters: another rail order
  EXPECT_EQ(a.ucxDevices(), "pa0");
}

}  // namespace
}  // namespace pact::ucx
