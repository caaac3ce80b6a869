// Device discovery: the host's network ports as UCT sees them (UCT_DEVICE_TYPE_NET resources),
// completed with facts from sysfs (PCI path, link speed, MAC/port GUID) and the interface address
// used for the connection bootstrap. Filtered like UCX_NET_DEVICES; loopback only when named.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace pact::ucx {

// A UCT memory domain that owns one of a device's transports, as UCX reports it.
struct MemoryDomain {
  std::string name;           // "tcp", "mlx5_0", ...
  uint64_t regMemTypes = 0;   // UCS_BIT(ucs_memory_type_t) it can register
  bool dmabuf = false;        // UCT_MD_FLAG_REG_DMABUF (UCX >= 1.14 headers; false when built without)
};

struct DeviceInfo {
  std::string name;            // UCT device name: "eth0", "lo", "mlx5_0:1"
  std::vector<std::string> transports;  // UCT transports on it: "tcp", "rc_mlx5", "ud_verbs", ...
  std::string netdev;          // the kernel net interface that carries its IP ("eth0", "ib0")
  std::string pciPath;         // sysfs device directory; empty when the port has no PCI device
  uint64_t guid = 0;           // unique per port: port GUID (IB) or MAC (Ethernet) or ifindex
  int port = 0;                // IB port number; 0 for Ethernet/loopback
  int speedMbps = 0;           // link speed; 0 = the link reports none (NCCL then assumes 10 Gb/s)
  std::string speedSource;     // where speedMbps came from ("sysfs", "ib rate", "uct model")
  float latencyUs = 0;         // UCT's latency model for the port's first transport
  std::string ipAddress;       // address the bootstrap listens on (IPv4 or IPv6 text)
  bool loopback = false;
  bool rdma = false;           // has an RC or UD transport
  std::vector<MemoryDomain> domains;  // the memory domains of its transports
  // The host's UCT transports that move CUDA memory (cuda_copy, cuda_ipc, gdr_copy: those UCX
  // lists, which it does only where it found a CUDA driver), the same for every device: a class
  // that sets UCX_TLS keeps them (transport/service.h).
  std::vector<std::string> cudaTransports;
  // A virtual device fused from several ports: their names (UCX gets them all) and indices.
  std::vector<std::string> members;
  std::vector<int> memberIndices;
  // Each member's ipAddress, in member order (where rail probes go out); a port: its own.
  std::vector<std::string> memberAddresses;
  // The UCX_NET_DEVICES value of this device's UCP context.
  std::string ucxDevices() const;
};

// Fuses ports into one virtual device: summed speed, slowest latency, the first port's address
// for the bootstrap. UCX stripes the comm's traffic over the member rails.
DeviceInfo fuseDevices(const std::vector<const DeviceInfo*>& ports, const std::vector<int>& indices);

// What the default choice (no PACT_NET_DEVICES) knows of a port UCX lists.
struct PortFacts {
  std::string name;       // UCT device name ("mlx5_0:1", "eth0", "docker0")
  bool rdma = false;      // RC or UD on it
  bool loopback = false;
  bool bridge = false;    // the kernel says so (/sys/class/net/IF/bridge)
  std::string netdev;     // an RDMA port's IP interface ("ib0", or a RoCE port's "eth2")
};
// The ports pact takes when PACT_NET_DEVICES names none, as indices into ports, in NCCL's
// convention (its IB transport's ports first, its socket transport's interfaces after, never
// docker* or lo): RDMA ports first, then the other interfaces, each by name (not one that is an
// RDMA port's own IP interface: the port carries it already); never loopback,
// bridges, or container and virtual-network interfaces (docker*, veth*, virbr*, br-*, cni*,
// flannel*, cali*, vxlan*, tun*, tap*, ifb*, lxc*, podman*, kube*). Those are taken only when
// nothing else is (a namespace whose only ports are veths), and *note then says so.
std::vector<size_t> defaultPorts(const std::vector<PortFacts>& ports, std::string* note);

// Each interface of this host that is up, by name: its IPv4 address, else its first IPv6 one.
std::map<std::string, std::string> interfaceAddresses();

// filter (PACT_NET_DEVICES): exactly the named ones, in that order; empty: those the user's
// UCX_NET_DEVICES names (as launch scripts set it), else defaultPorts. Each device's UCP context is
// pinned to it (Context::create), so a device named in PACT_NET_DEVICES but left out of the
// user's UCX_NET_DEVICES is still used, with one warning naming the two.
Result<std::vector<DeviceInfo>> discoverDevices(const std::vector<std::string>& filter);

}  // namespace pact::ucx
