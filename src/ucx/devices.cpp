#include "ucx/devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <uct/api/uct.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <string_view>

#include "common/log.h"
#include "common/parse.h"
#include "pact_config.h"
#include "ucx/ucx_status.h"

namespace pact::ucx {

namespace {

std::string readLine(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

std::string realPath(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

struct UctResource {
  std::string tl, dev;
  uct_component_h component;
  std::string mdName;
  MemoryDomain domain;
};

MemoryDomain describeDomain(uct_md_h md, const char* name) {
  MemoryDomain d;
  d.name = name;
  uct_md_attr_t attr{};
  if (uct_md_query(md, &attr) != UCS_OK) return d;
  d.regMemTypes = attr.cap.reg_mem_types;
#if PACT_UCX_HAVE_DMABUF
  d.dmabuf = (attr.cap.flags & UCT_MD_FLAG_REG_DMABUF) != 0;
#endif
  return d;
}

void addDomain(std::vector<MemoryDomain>& to, const MemoryDomain& d) {
  for (const auto& have : to)
    if (have.name == d.name) return;
  to.push_back(d);
}

// Every NET-type UCT resource, with the component and memory domain that own it.
// cuda (may be null): the names of the transports that move CUDA memory, whatever their device.
std::vector<UctResource> queryUct(std::vector<std::string>* cuda) {
  std::vector<UctResource> out;
  uct_component_h* comps = nullptr;
  unsigned ncomps = 0;
  if (uct_query_components(&comps, &ncomps) != UCS_OK) return out;
  for (unsigned c = 0; c < ncomps; ++c) {
    uct_component_attr_t cattr{};
    cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(comps[c], &cattr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(cattr.md_resource_count);
    cattr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    cattr.md_resources = mds.data();
    if (uct_component_query(comps[c], &cattr) != UCS_OK) continue;
    for (const auto& mdr : mds) {
      uct_md_config_t* mdcfg = nullptr;
      if (uct_md_config_read(comps[c], nullptr, nullptr, &mdcfg) != UCS_OK) continue;
      uct_md_h md = nullptr;
      ucs_status_t st = uct_md_open(comps[c], mdr.md_name, mdcfg, &md);
      uct_config_release(mdcfg);
      if (st != UCS_OK) continue;
      uct_tl_resource_desc_t* res = nullptr;
      unsigned nres = 0;
      if (uct_md_query_tl_resources(md, &res, &nres) == UCS_OK) {
        const MemoryDomain domain = describeDomain(md, mdr.md_name);
        for (unsigned r = 0; r < nres; ++r) {
          const std::string tl = res[r].tl_name;
          if (res[r].dev_type == UCT_DEVICE_TYPE_NET)
            out.push_back({tl, res[r].dev_name, comps[c], mdr.md_name, domain});
          else if (cuda != nullptr && (tl.rfind("cuda", 0) == 0 || tl.rfind("gdr", 0) == 0) &&
                   std::find(cuda->begin(), cuda->end(), tl) == cuda->end())
            cuda->push_back(tl);
        }
        uct_release_tl_resource_list(res);
      }
      uct_md_close(md);
    }
  }
  uct_release_component_list(comps);
  return out;
}

// UCT's own latency model (us) and bandwidth (MB/s -> Mbps) for one resource, from a real iface.
void uctModel(const UctResource& r, float* latencyUs, int* bwMbps) {
  ucs_async_context_t* async = nullptr;
  if (ucs_async_context_create(UCS_ASYNC_MODE_THREAD_SPINLOCK, &async) != UCS_OK) return;
  uct_worker_h worker = nullptr;
  uct_md_config_t* mdcfg = nullptr;
  uct_md_h md = nullptr;
  uct_iface_config_t* icfg = nullptr;
  uct_iface_h iface = nullptr;
  if (uct_worker_create(async, UCS_THREAD_MODE_SINGLE, &worker) == UCS_OK &&
      uct_md_config_read(r.component, nullptr, nullptr, &mdcfg) == UCS_OK &&
      uct_md_open(r.component, r.mdName.c_str(), mdcfg, &md) == UCS_OK &&
      uct_md_iface_config_read(md, r.tl.c_str(), nullptr, nullptr, &icfg) == UCS_OK) {
    uct_iface_params_t p{};
    p.field_mask = UCT_IFACE_PARAM_FIELD_OPEN_MODE | UCT_IFACE_PARAM_FIELD_DEVICE;
    p.open_mode = UCT_IFACE_OPEN_MODE_DEVICE;
    p.mode.device.tl_name = r.tl.c_str();
    p.mode.device.dev_name = r.dev.c_str();
    if (uct_iface_open(md, worker, &p, icfg, &iface) == UCS_OK) {
      uct_iface_attr_t attr{};
      if (uct_iface_query(iface, &attr) == UCS_OK) {
        *latencyUs = static_cast<float>(attr.latency.c * 1e6);
        double bw = attr.bandwidth.dedicated + attr.bandwidth.shared;
        *bwMbps = static_cast<int>(bw * 8 / 1e6);
      }
      uct_iface_close(iface);
    }
  }
  if (icfg) uct_config_release(icfg);
  if (md) uct_md_close(md);
  if (mdcfg) uct_config_release(mdcfg);
  if (worker) uct_worker_destroy(worker);
  ucs_async_context_destroy(async);
}

uint64_t parseHexGroups(const std::string& s, size_t maxBytes) {
  uint64_t v = 0;
  size_t digits = 0;
  for (char c : s) {
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10
          : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) continue;
    if (digits++ < maxBytes * 2) v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

void fillEthernet(DeviceInfo& d) {
  const std::string sys = "/sys/class/net/" + d.netdev;
  d.pciPath = realPath(sys + "/device");
  int speed = std::atoi(readLine(sys + "/speed").c_str());
  if (speed > 0) {
    d.speedMbps = speed;
    d.speedSource = "sysfs";
  }
  uint64_t mac = parseHexGroups(readLine(sys + "/address"), 6);
  int ifindex = std::atoi(readLine(sys + "/ifindex").c_str());
  d.guid = mac != 0 ? mac : (0xfe00000000000000ull | static_cast<uint64_t>(ifindex));
  d.loopback = readLine(sys + "/type") == "772";  // ARPHRD_LOOPBACK
}

void fillInfiniband(DeviceInfo& d) {
  auto colon = d.name.find(':');
  std::string hca = d.name.substr(0, colon);
  d.port = colon == std::string::npos ? 1 : std::atoi(d.name.c_str() + colon + 1);
  const std::string sys = "/sys/class/infiniband/" + hca;
  const std::string portDir = sys + "/ports/" + std::to_string(d.port);
  d.pciPath = realPath(sys + "/device");
  // "100 Gb/sec (4X EDR)"
  double gbps = std::atof(readLine(portDir + "/rate").c_str());
  if (gbps > 0) {
    d.speedMbps = static_cast<int>(gbps * 1000);
    d.speedSource = "ib rate";
  }
  std::string gid = readLine(portDir + "/gids/0");  // low 64 bits = port GUID
  d.guid = gid.size() >= 19 ? parseHexGroups(gid.substr(gid.size() - 19), 8)
                            : parseHexGroups(readLine(sys + "/node_guid"), 8) + d.port;
  std::string nd = readLine(portDir + "/gid_attrs/ndevs/0");
  d.netdev = nd;
}

}  // namespace

std::map<std::string, std::string> interfaceAddresses() {
  std::map<std::string, std::string> out;  // ifname -> first IPv4 (else IPv6) address
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || !(a->ifa_flags & IFF_UP)) continue;
    char text[INET6_ADDRSTRLEN] = {};
    int fam = a->ifa_addr->sa_family;
    if (fam == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    else if (fam == AF_INET6 && !out.count(a->ifa_name))
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, text, sizeof text);
    else
      continue;
    if (fam == AF_INET || !out.count(a->ifa_name)) out[a->ifa_name] = text;
  }
  freeifaddrs(list);
  return out;
}

std::string DeviceInfo::ucxDevices() const {
  if (members.empty()) return name;
  std::string out;
  for (const auto& m : members) out += (out.empty() ? "" : ",") + m;
  return out;
}

DeviceInfo fuseDevices(const std::vector<const DeviceInfo*>& ports, const std::vector<int>& indices) {
  DeviceInfo v;
  for (const DeviceInfo* p : ports) {
    v.name += (v.name.empty() ? "" : "+") + p->name;
    for (const auto& t : p->transports)
      if (std::find(v.transports.begin(), v.transports.end(), t) == v.transports.end())
        v.transports.push_back(t);
    v.speedMbps += p->speedMbps;
    v.latencyUs = std::max(v.latencyUs, p->latencyUs);
    v.rdma = v.rdma || p->rdma;
    for (const auto& dom : p->domains) addDomain(v.domains, dom);
    v.loopback = v.loopback || p->loopback;
    v.cudaTransports = p->cudaTransports;
    v.members.push_back(p->name);
    v.memberAddresses.push_back(p->ipAddress);
  }
  const DeviceInfo& first = *ports.front();
  v.netdev = first.netdev;
  v.pciPath = first.pciPath;
  v.port = first.port;
  v.ipAddress = first.ipAddress;
  v.speedSource = "sum of members";
  // Distinct from every port's: the high byte marks a virtual device, the rest mixes the members.
  uint64_t g = 0;
  for (const DeviceInfo* p : ports) g = (g * 1099511628211ull) ^ p->guid;
  v.guid = 0x7e00000000000000ull | (g & 0x00ffffffffffffffull);
  v.memberIndices = indices;
  return v;
}

std::vector<size_t> defaultPorts(const std::vector<PortFacts>& ports, std::string* note) {
  static constexpr std::string_view kNotData[] = {"docker", "veth", "virbr", "br-",  "cni", "flannel", "cali",
                                                  "vxlan",  "tun",  "tap",   "ifb",  "lxc", "podman",  "kube"};
  auto virtualNet = [](const PortFacts& p) {
    if (p.bridge) return true;
    for (std::string_view prefix : kNotData)
      if (p.name.rfind(prefix, 0) == 0) return true;
    return false;
  };
  std::vector<size_t> rdma, ethernet, skipped;
  for (size_t i = 0; i < ports.size(); ++i) {
    const PortFacts& p = ports[i];
    const bool ofRdmaPort = std::any_of(ports.begin(), ports.end(),
                                        [&](const PortFacts& o) { return o.rdma && !o.netdev.empty() && o.netdev == p.name; });
    if (p.loopback || (!p.rdma && ofRdmaPort)) continue;
    (p.rdma ? rdma : virtualNet(p) ? skipped : ethernet).push_back(i);
  }
  auto byName = [&](size_t a, size_t b) { return ports[a].name < ports[b].name; };
  std::sort(rdma.begin(), rdma.end(), byName);
  std::sort(ethernet.begin(), ethernet.end(), byName);
  std::sort(skipped.begin(), skipped.end(), byName);
  std::vector<size_t> out = rdma;
  out.insert(out.end(), ethernet.begin(), ethernet.end());
  std::string names;
  for (size_t i : skipped) names += (names.empty() ? "" : ", ") + ports[i].name;
  if (out.empty() && !skipped.empty()) {
    out = skipped;
    if (note) *note = "no RDMA port and no interface but bridges, container or virtual-network ones (" + names +
                      "): taking those (PACT_NET_DEVICES picks ports)";
  } else if (note && !skipped.empty()) {
    *note = "left out bridges, container and virtual-network interfaces: " + names + " (PACT_NET_DEVICES names them)";
  }
  return out;
}

Result<std::vector<DeviceInfo>> discoverDevices(const std::vector<std::string>& given) {
  // The user's UCX_NET_DEVICES, as PACT_NET_DEVICES is read; empty when unset, "all" or not a
  // plain list (an exclusion).
  const std::string ucxValue = envValue("UCX_NET_DEVICES");
  auto parsed = DeviceListParser::parse(ucxValue);
  const std::vector<std::string> ucxDevices = parsed.ok() ? std::move(*parsed) : std::vector<std::string>{};
  std::vector<std::string> filter = given;
  if (filter.empty() && !ucxDevices.empty()) {
    filter = ucxDevices;
    PACT_INFO("devices: UCX_NET_DEVICES=%s chooses them (PACT_NET_DEVICES is unset)", ucxValue.c_str());
  } else if (!ucxDevices.empty()) {
    std::string outside;
    for (const auto& name : filter)
      if (std::find(ucxDevices.begin(), ucxDevices.end(), name) == ucxDevices.end())
        outside += (outside.empty() ? "" : ", ") + name;
    static std::atomic<bool> warned{false};  // once per process (the plugin and each engine discover)
    if (!outside.empty() && !warned.exchange(true))
      PACT_WARN("PACT_NET_DEVICES names %s, which UCX_NET_DEVICES=%s leaves out: pact uses the devices "
                "PACT_NET_DEVICES names, each over its own port (UCX_NET_DEVICES does not apply to them)",
                outside.c_str(), ucxValue.c_str());
  }
  std::vector<std::string> cuda;
  std::vector<UctResource> resources = queryUct(&cuda);
  std::sort(cuda.begin(), cuda.end());
  std::map<std::string, DeviceInfo> byName;
  std::map<std::string, UctResource> firstResource;
  for (const auto& r : resources) {
    DeviceInfo& d = byName[r.dev];
    d.name = r.dev;
    d.cudaTransports = cuda;
    if (std::find(d.transports.begin(), d.transports.end(), r.tl) == d.transports.end())
      d.transports.push_back(r.tl);
    if (r.tl.rfind("rc", 0) == 0 || r.tl.rfind("ud", 0) == 0 || r.tl.rfind("dc", 0) == 0)
      d.rdma = true;
    addDomain(d.domains, r.domain);
    firstResource.emplace(r.dev, r);
  }
  const auto addrs = interfaceAddresses();
  std::vector<DeviceInfo> out;
  auto add = [&](DeviceInfo d) {
    if (d.name.find(':') != std::string::npos) fillInfiniband(d);
    else { d.netdev = d.name; fillEthernet(d); }
    int modelMbps = 0;
    uctModel(firstResource.at(d.name), &d.latencyUs, &modelMbps);
    // UCX's TCP model falls back to a fixed 100 Mb/s when the link has no speed, so only an RDMA
    // model (derived from the port's rate) is a fact; otherwise the speed stays unknown (0),
    // which NCCL treats as its own default.
    if (d.speedMbps <= 0 && d.rdma && modelMbps > 0) {
      d.speedMbps = modelMbps;
      d.speedSource = "uct model";
    }
    if (d.speedMbps <= 0) d.speedSource = "unknown: no link speed (virtual interface)";
    if (auto it = addrs.find(d.netdev); it != addrs.end()) d.ipAddress = it->second;
    out.push_back(std::move(d));
  };
  if (filter.empty()) {
    std::vector<PortFacts> facts;
    std::vector<const DeviceInfo*> listed;
    for (auto& [name, d] : byName) {
      DeviceInfo probe = d;
      probe.netdev = name;
      const bool ib = name.find(':') != std::string::npos;
      if (ib) fillInfiniband(probe);
      else fillEthernet(probe);
      facts.push_back({name, d.rdma, probe.loopback, !ib && !realPath("/sys/class/net/" + name + "/bridge").empty(),
                       ib ? probe.netdev : std::string()});
      listed.push_back(&d);
    }
    std::string note;
    for (size_t i : defaultPorts(facts, &note)) add(*listed[i]);
    if (!note.empty()) PACT_INFO("devices: %s", note.c_str());
  } else {
    for (const auto& want : filter) {
      auto it = byName.find(want);
      if (it == byName.end())
        return Error{Status::kInvalidArgument,
                     "PACT_NET_DEVICES names '" + want + "', which UCX does not list as a network device"};
      add(it->second);
    }
  }
  for (const auto& d : out)
    PACT_INFO("device %s: transports %zu, speed %d Mbps (%s), latency %.2f us, ip %s, pci %s",
              d.name.c_str(), d.transports.size(), d.speedMbps, d.speedSource.c_str(),
              static_cast<double>(d.latencyUs), d.ipAddress.empty() ? "-" : d.ipAddress.c_str(),
              d.pciPath.empty() ? "-" : d.pciPath.c_str());
  return out;
}

}  // namespace pact::ucx
