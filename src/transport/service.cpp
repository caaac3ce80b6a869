#include "transport/service.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "common/clock.h"
#include "transport/params.h"
#include "ucx/ucx_status.h"
#include "ucx/worker.h"

namespace pact::transport {

namespace {

// The service mapping, one row per service (UCX 1.13 transport aliases: `rc` = rc_mlx5 and
// rc_verbs with ud as wire-up auxiliary, `ud` = ud_mlx5 and ud_verbs; `sm` = every shared-memory
// transport, `self` = the loopback to the own worker). `family` is the UCT transport name prefix
// the device must list for the service to be available.
struct ServiceRow {
  Service service;
  const char* family;  // nullptr: any device
  const char* tls;     // nullptr: no TLS setting (UCX chooses)
};
constexpr ServiceRow kServiceTable[] = {
    {Service::kAuto, nullptr, nullptr},
    {Service::kRc, "rc_", "rc,sm,self"},
    {Service::kUd, "ud_", "ud,sm,self"},
};
// fallback=tcp on a device that has RDMA, but not the family asked for. A device without any
// RDMA transport gets no TLS setting instead: UCX can only choose TCP and shared memory there,
// and the class shares the context of the `auto` classes.
constexpr const char* kFallbackTls = "tcp,sm,self";

// UCX's tcp transport set up for bulk data, for every context that can carry data over tcp. With
// peer failure detection on (UCP_ERR_HANDLING_MODE_PEER, which pact needs) UCX sends a rendezvous
// message as active-message fragments of one send segment each, received through receive
// segments, rather than by a zero-copy get; UCX's 8 KiB send segments cost UCX 1.22 two thirds of
// its tcp bandwidth and 1.13 up to a third in NCCL's slot pattern. Socket buffers stay the
// kernel's: fixed 4 MiB ones were faster on loopback but hid a slow rail's speed from the lane
// steering behind seconds of buffered bytes. Measured in docs/performance.md; latency unchanged.
constexpr uint64_t kTcpTxSeg = 32 << 10;
constexpr uint64_t kTcpRxSeg = 256 << 10;
// Room for the headers beside a whole message in one segment (UCX's and the engine's offer
// frame: well under a KiB; a round figure keeps the settings few and readable).
constexpr uint64_t kWholeHeadroom = 64 << 10;

// The tcp segments of a context: the bulk sizes above, grown so that an active message of
// `whole` bytes (an engine's eager offer: its class's `eager`) travels in one send segment and
// lands in one receive segment. UCX sends a larger message in fragments that the receiver copies
// into a buffer of its own before the handler sees them (a second copy of every byte and an
// allocation per message); whole, the handler copies straight from the receive segment.
// pact-kv-c-bench, 6 interleaved rounds (docs/performance.md): 256 KiB single blocks 1.2x, 16 x
// 256 KiB 1.34x, 2 MiB 1.07x, 16 x 2 MiB 1.2x goodput.
std::pair<uint64_t, uint64_t> tcpSegments(uint64_t whole) {
  const uint64_t tx = whole == 0 ? kTcpTxSeg : std::max(kTcpTxSeg, whole + kWholeHeadroom);
  return {tx, std::max(kTcpRxSeg, 2 * tx)};
}

// Transports probeTransports leaves out for its "remote" view.
constexpr std::string_view kLocalOnly[] = {"sm",   "shm",   "mm",    "posix",     "sysv",    "cma",
                                           "knem", "xpmem", "self",  "cuda_copy", "cuda_ipc", "gdr_copy"};

const ServiceRow& rowFor(Service s) {
  for (const auto& r : kServiceTable)
    if (r.service == s) return r;
  return kServiceTable[0];
}

bool hasFamily(const ucx::DeviceInfo& d, const char* prefix) {
  return std::any_of(d.transports.begin(), d.transports.end(),
                     [prefix](const std::string& t) { return t.rfind(prefix, 0) == 0; });
}

std::string joined(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// A TLS list this mapping sets, with the device's CUDA transports added: without them UCX does
// not recognise device memory, and the plugin reports NCCL_PTR_CUDA (docs/gpu.md).
std::string withCuda(const char* tls, const ucx::DeviceInfo& device) {
  std::string out = tls;
  for (const auto& t : device.cudaTransports) out += "," + t;
  return out;
}

// Adds UCX_<key>=value unless the user set UCX_<key>; says what happened in *notes.
void addSetting(ServiceConfig& c, std::vector<std::string>& notes, const std::string& key,
                const std::string& value) {
  const std::string env = "UCX_" + key;
  if (envIsSet(env.c_str())) {
    notes.push_back(env + "=" + envValue(env.c_str()) + " (set by the user; wins over " + value +
                    ")");
    return;
  }
  c.ucxSettings.emplace_back(key, value);
  notes.push_back(env + "=" + value);
}

// The TLS list a context gets: the one set here, else the user's UCX_TLS, else "" (all).
std::string effectiveTls(const ServiceConfig& c) {
  for (const auto& [k, v] : c.ucxSettings)
    if (k == "TLS") return v;
  return envIsSet("UCX_TLS") ? envValue("UCX_TLS") : "";
}

// Whether a UCX_TLS value lets tcp carry data: all, a list naming tcp, or an exclusion list
// ("^sm,self") that does not name it.
bool tlsHasTcp(const std::string& tls) {
  if (tls.empty() || tls == "all") return true;
  const bool exclude = tls[0] == '^';
  std::istringstream in(exclude ? tls.substr(1) : tls);
  bool named = false;
  for (std::string t; std::getline(in, t, ',');) named = named || t == "tcp";
  return exclude ? !named : named;
}

}  // namespace

std::string contextKey(const Profile& profile, const ServiceConfig& config) {
  // A class of another priority gets contexts (workers, connections) of its own: on one TCP
  // connection the bulk class's bytes already queued would go first whatever pact schedules.
  return std::string(serviceName(profile.service)) + "|" + config.key +
         (profile.priority != 0 ? "|priority=" + std::to_string(profile.priority) : "");
}

Result<ServiceConfig> serviceFor(const Profile& profile, const ucx::DeviceInfo& device,
                                 std::string_view className, bool eagerWhole, bool yields) {
  ServiceConfig c;
  std::vector<std::string> notes;
  const ServiceRow& row = rowFor(profile.service);
  const std::string asked = std::string("service=") + serviceName(profile.service);
  const bool available = row.family == nullptr || (device.rdma && hasFamily(device, row.family));
  const std::string tls = device.transports.empty() ? "none" : joined(device.transports, ",");

  if (!available) {
    const std::string what = "traffic class " + std::string(className) + " asked for " + asked +
                             " but device " + device.name + " has no " +
                             (device.rdma ? std::string(row.family) + "* transport" : "RDMA transport") +
                             " (transports: " + tls + ")";
    if (profile.fallback == Fallback::kFail)
      return Error{Status::kUnsupported, what + " and fallback=fail"};
    if (device.rdma) {
      addSetting(c, notes, "TLS", withCuda(kFallbackTls, device));
      c.fallbackWarning = what + "; using " + kFallbackTls + " (fallback=tcp)";
    } else {
      notes.push_back("UCX chooses among TCP and shared memory (fallback=tcp)");
      c.fallbackWarning = what + "; using TCP and shared memory (fallback=tcp)";
    }
  } else if (row.tls != nullptr) {
    addSetting(c, notes, "TLS", withCuda(row.tls, device));
  } else {
    notes.push_back("UCX chooses the transports");
  }

  // Fabric QoS applies to the RDMA transports only.
  std::vector<std::string> ignoredQos;
  const bool qosApplies = device.rdma && available;
  if (profile.tc >= 0) {
    if (qosApplies) addSetting(c, notes, "IB_TRAFFIC_CLASS", std::to_string(profile.tc));
    else ignoredQos.push_back("tc=" + std::to_string(profile.tc));
  }
  if (profile.sl >= 0) {
    if (qosApplies) addSetting(c, notes, "IB_SL", std::to_string(profile.sl));
    else ignoredQos.push_back("sl=" + std::to_string(profile.sl));
  }
  if (!ignoredQos.empty()) {
    const std::string q = joined(ignoredQos, " and ");
    notes.push_back(q + " ignored (no RDMA transport)");
    if (c.fallbackWarning.empty())
      c.fallbackWarning = "traffic class " + std::string(className) + " asked for " + q +
                          " but device " + device.name + " has no RDMA transport; ignored";
    else
      c.fallbackWarning += "; " + q + " ignored";
  }

  // tcp carries data unless the TLS list (set here, else the user's UCX_TLS) leaves it out. A
  // tcp key on a context without tcp is one UCX warns about ("invalid configurations") at every
  // worker creation, and UCX 1.13's warning crashes after a plugin reload.
  if (hasFamily(device, "tcp") && tlsHasTcp(effectiveTls(c))) {
    const auto [tx, rx] = tcpSegments(eagerWhole ? profile.eager : 0);
    addSetting(c, notes, "TCP_TX_SEG_SIZE", formatSize(tx));
    addSetting(c, notes, "TCP_RX_SEG_SIZE", formatSize(rx));
    if (yields) addSetting(c, notes, "TCP_SNDBUF", formatSize(kYieldingSndbuf));
    // Rail failover (transport/rail_set.h): a receive UCX matched on a rail whose link then went out
    // cannot be cancelled. Its message is reported once its pieces came again on another rail
    // (net::Request::settled); with UCX 1.13 and 1.14 the connection's keepalive also ends the
    // receive within about 3 s, so its request slot comes back. Not with later UCX: 1.22 turns
    // these into keepalives of its own that fail a peer busy elsewhere (and never ends such a
    // receive anyway).
    if (const auto v = ucx::version(); device.members.size() > 1 && v.major == 1 && v.minor <= 14) {
      addSetting(c, notes, "TCP_KEEPIDLE", "1s");
      addSetting(c, notes, "TCP_KEEPINTVL", "1s");
      addSetting(c, notes, "TCP_KEEPCNT", "2");
    }
  }

  std::vector<std::string> keyParts;
  for (const auto& [k, v] : c.ucxSettings) keyParts.push_back(k + "=" + v);
  c.key = keyParts.empty() ? "ucx-default" : joined(keyParts, ";");
  c.summary = asked + ": " + joined(notes, ", ");
  return c;
}

Result<std::vector<ClassService>> servicesFor(const ClassTable& classes,
                                              const ucx::DeviceInfo& device) {
  std::vector<ClassService> out;
  for (auto& e : classes.entries()) {
    auto c = serviceFor(e.profile, device, e.name);
    if (!c.ok()) return c.error();
    out.push_back(ClassService{std::move(e), std::move(c.value())});
  }
  return out;
}

namespace {

// The TLS list for the "remote" view: the effective one (ours, else the user's, else all)
// without shared memory and self. Empty when nothing would be left.
std::string remoteTls(const ServiceConfig& config) {
  const std::string tls = effectiveTls(config);
  if (tls.empty() || tls == "all") return "^sm,self";
  if (tls[0] == '^') return tls + ",sm,self";
  std::vector<std::string> kept;
  std::istringstream in(tls);
  for (std::string t; std::getline(in, t, ',');)
    if (std::find(std::begin(kLocalOnly), std::end(kLocalOnly), t) == std::end(kLocalOnly))
      kept.push_back(t);
  return joined(kept, ",");
}

// "lane[0]:  0:tcp/lo.0 md[0]  -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0 wireup"
// becomes "lane[0]: tcp/lo.0 (rma_bw#0 am am_bw#0 wireup)"; other lines are dropped.
std::vector<std::string> laneLines(const std::string& info) {
  std::vector<std::string> out;
  std::istringstream in(info);
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find("lane[");
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at));
    std::vector<std::string> w;
    for (std::string s; words >> s;) w.push_back(s);
    auto arrow = std::find(w.begin(), w.end(), "->");
    if (w.size() < 2 || arrow == w.end() || arrow + 1 == w.end()) {
      out.push_back(line.substr(at));
      continue;
    }
    std::string tl = w[1].substr(w[1].find(':') + 1);  // "0:tcp/lo.0" -> "tcp/lo.0"
    std::vector<std::string> uses(arrow + 2, w.end());
    out.push_back(w[0] + " " + tl + " (" + joined(uses, " ") + ")");
  }
  return out;
}

// One view: context with settings, two workers, an endpoint from one to the other.
Result<std::vector<std::string>> probeOnce(const ucx::DeviceInfo& device,
                                           const ucx::Context::Settings& settings) {
  auto ctx = ucx::Context::create(device.ucxDevices(), "pact-probe", settings);
  if (!ctx.ok()) return ctx.error();
  auto server = ucx::Worker::create(*ctx);
  if (!server.ok()) return server.error();
  auto client = ucx::Worker::create(*ctx);
  if (!client.ok()) return client.error();
  bool peerFailure = false;
  auto ep = ucx::Endpoint::create(client->get(), server->address(), nullptr, nullptr, &peerFailure);
  if (!ep.ok()) return ep.error();
  // The flush completes once wire-up has settled; both workers must progress for that.
  ucp_request_param_t param{};
  void* req = ucp_ep_flush_nbx(ep->get(), &param);
  if (UCS_PTR_IS_PTR(req)) {
    const auto deadline = now() + std::chrono::seconds(1);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && now() < deadline) {
      client->progress();
      server->progress();
    }
    ucx::freeRequest(req);  // released by UCX when it completes, if it has not yet
  }
  auto lines = laneLines(ep->describe());
  ep->close(true);
  return lines;
}

}  // namespace

Result<std::string> probeTransports(const ucx::DeviceInfo& device, const ServiceConfig& config) {
  std::string out;
  auto addView = [&out](const char* view, const std::vector<std::string>& lines) {
    for (const auto& l : lines) out += std::string(view) + " " + l + "\n";
    if (lines.empty()) out += std::string(view) + " (no lanes)\n";
  };
  auto local = probeOnce(device, config.ucxSettings);
  if (!local.ok()) return local.error();

  const std::string tls = remoteTls(config);
  if (tls.empty()) {
    out += "remote (no network transport in the TLS list)\n";
  } else {
    ucx::Context::Settings settings;
    for (const auto& s : config.ucxSettings)
      if (s.first != "TLS") settings.push_back(s);
    settings.emplace_back("TLS", tls);
    auto remote = probeOnce(device, settings);
    if (remote.ok()) addView("remote", *remote);
    else out += "remote (" + remote.error().message + ")\n";
  }
  addView("same-host", *local);
  if (!out.empty()) out.pop_back();
  return out;
}

}  // namespace pact::transport
