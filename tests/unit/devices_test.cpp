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
PortFacts port(const char* name, bool rdma = false, bool loopback = false, bool bridge = false, const char* netdev = "") {
  return PortFacts{name, rdma, loopback, bridge, netdev};
}

// The default choice over a fake GPU node's list (what UCX lists, in its order): the RDMA ports
// first, then Ethernet, by name; never lo, the Docker bridge, veths, libvirt's bridge, a bridge
// the kernel reports under any name, a flannel overlay, or mlx5_0's own IPoIB interface (ib0).
TEST(DefaultPorts, RdmaFirstThenEthernetNeverBridgesContainersOrLoopback) {
  const std::vector<PortFacts> node = {
      port("docker0", false, false, true), port("eth1"), port("ib0"), port("lo", false, true),
      port("mlx5_1:1", true), port("mlx5_0:1", true, false, false, "ib0"), port("veth3a1f"),
      port("virbr0", false, false, true), port("br0", false, false, true), port("eth0"), port("flannel.1"),
      port("bond0"),
  };
  std::string note;
  std::vector<std::string> chosen;
  for (size_t i : defaultPorts(node, &note)) chosen.push_back(node[i].name);
  EXPECT_EQ(chosen, (std::vector<std::string>{"mlx5_0:1", "mlx5_1:1", "bond0", "eth0", "eth1"}));
  EXPECT_EQ(note, "left out bridges, container and virtual-network interfaces: br0, docker0, flannel.1, veth3a1f, "
                  "virbr0 (PACT_NET_DEVICES names them)");
}

// A network namespace whose only ports are veths (and lo): those are taken, and the note says so;
// nothing at all gives nothing, with no note.
TEST(DefaultPorts, OnlyVirtualPortsAreTakenWhenNothingElseIs) {
  const std::vector<PortFacts> ns = {port("lo", false, true), port("veth1"), port("veth0")};
  std::string note;
  std::vector<std::string> chosen;
  for (size_t i : defaultPorts(ns, &note)) chosen.push_back(ns[i].name);
  EXPECT_EQ(chosen, (std::vector<std::string>{"veth0", "veth1"}));
  EXPECT_NE(note.find("taking those"), std::string::npos) << note;
  note.clear();
  EXPECT_TRUE(defaultPorts({port("lo", false, true)}, &note).empty());
  EXPECT_TRUE(note.empty());
}

}  // namespace pact::ucx
