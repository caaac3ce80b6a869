// pact-info: what pact sees on this host: devices and their NCCL properties, the effective
// value of every PACT_* variable, and every traffic class with its resolved profile, its UCX
// service settings and the transports UCX actually selects for it on device 0. --help documents
// each variable and profile key; --params-md prints docs/params.md. A malformed PACT_* variable
// prints the same one-line error the plugin logs and exits non-zero.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <iostream>
#include <map>
#include <sstream>
#include <vector>

#include "version.h"
#include "transport/params.h"
#include "pact_config.h"
#include "net/net.h"
#include "telemetry/counters.h"
#include "transport/service.h"
#include "transport/memory.h"
#include "cuda/driver.h"
#include "metrics_view.h"

namespace {

std::string variablesHelp() {
  std::string out = "\nEnvironment variables (the PACT_* registry):\n";
  for (const auto& p : pact::Params::table()) {
    out += std::string("  ") + p.name + " (default '" + p.defaultValue + "'; " + p.allowed + ")\n      " +
           p.doc + "\n";
  }
  return out + "\n" + pact::Params::profileHelp();
}

// "key=value" of every key of a profile, in describe()'s order.
std::vector<std::pair<std::string, std::string>> keyValues(const pact::Profile& p) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(p.describe());
  for (std::string kv; std::getline(in, kv, ',');) {
    const auto eq = kv.find('=');
    out.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return out;
}

// What each key that is not at its built-in value does on the class's face: an NCCL class (and
// DEFAULT, NCCL's class -1) on NCCL comms, an engine class on engine transfers.
void printKeysOnFace(const pact::ClassTable::Entry& e) {
  const pact::Face face = pact::ClassTable::isEngineClass(e.name) ? pact::Face::kEngine : pact::Face::kNccl;
  const auto builtin = keyValues(pact::Profile{});
  const char* label = face == pact::Face::kNccl ? "on NCCL" : "on engine";
  for (const auto& [key, value] : keyValues(e.profile)) {
    const auto def = std::find_if(builtin.begin(), builtin.end(), [&](const auto& b) { return b.first == key; });
    if (def != builtin.end() && def->second == value) continue;
    const pact::ProfileKeyInfo* k = pact::profileKey(key);
    if (k == nullptr) continue;
    const pact::FaceUse& use = k->on(face);
    std::string what = use.what;
    if (face == pact::Face::kNccl && key == "verify")
      what += " (CUDA buffers are read through a 1 MiB host staging buffer by the driver)";
    // DEFAULT's engine-only keys serve the engine classes; the plugin refuses them at init.
    if (use.refused) what = "refused at plugin init: " + what;
    std::printf("      %-11s %s=%s: %s\n", label, key.c_str(), value.c_str(), what.c_str());
    label = "";
  }
}

void printClass(const pact::ClassTable::Entry& e) {
  std::printf("  %s (%s, %s)\n      profile     %s\n", e.name.c_str(), e.variable.c_str(),
              e.set ? "set" : e.name == "DEFAULT" ? "built-in" : "inherits DEFAULT",
              e.profile.describe().c_str());
  printKeysOnFace(e);
}

// Every class with its service on device and the context it runs on (an NCCL class in the
// plugin, an engine class in each engine: both faces key contexts alike); probes each distinct
// context once. Returns false when a class cannot be served (fallback=fail): plugin init and
// engine creation would fail the same way.
bool printClasses(const pact::ClassTable& classes, const pact::ucx::DeviceInfo* device, bool probe) {
  if (device == nullptr) {
    std::printf("traffic classes:\n");
    for (const auto& e : classes.entries()) printClass(e);
    return true;
  }
  std::printf("traffic classes (service on device 0, %s):\n", device->name.c_str());
  bool ok = true;
  std::map<std::string, std::string> probed;  // context key -> first class probed with it
  for (const auto& e : classes.entries()) {
    printClass(e);
    // An engine class as the engine opens it (its eager offers whole: larger tcp segments);
    // DEFAULT and the NCCL classes as the plugin does.
    const bool yields = classes.yields(e.profile);
    auto svc = pact::transport::serviceFor(e.profile, *device, e.name, pact::ClassTable::isEngineClass(e.name), yields);
    if (!svc.ok()) {
      std::printf("      error       %s\n", svc.error().message.c_str());
      ok = false;
      continue;
    }
    const std::string key = pact::transport::contextKey(e.profile, *svc);
    std::printf("      service     %s\n      context     %s\n", svc->summary.c_str(), key.c_str());
    if (e.name == "DEFAULT") {  // the engine's DEFAULT carries eager offers too
      auto mine = pact::transport::serviceFor(e.profile, *device, e.name, true, yields);
      if (mine.ok() && mine->key != svc->key)
        std::printf("      engine      %s\n", pact::transport::contextKey(e.profile, *mine).c_str());
    }
    if (!svc->fallbackWarning.empty()) std::printf("      warning     %s\n", svc->fallbackWarning.c_str());
    if (!probe) continue;
    if (auto it = probed.find(key); it != probed.end()) {
      std::printf("      transports  same context as %s\n", it->second.c_str());
      continue;
    }
    probed.emplace(key, e.name);
    auto lanes = pact::transport::probeTransports(*device, *svc);
    if (!lanes.ok()) {
      std::printf("      transports  probe failed: %s\n", lanes.error().message.c_str());
      continue;
    }
    std::istringstream in(*lanes);
    const char* label = "transports";
    for (std::string line; std::getline(in, line); label = "")
      std::printf("      %-11s %s\n", label, line.c_str());
  }
  return ok;
}

// Every counter pact keeps (the registry's catalogs), and the live sets of this process.
void printCounters() {
  using namespace pact::telemetry;
  std::printf("counters (the registry; live through pact_stats, pact_comm_stats, pact_plugin_resources):\n");
  for (const Catalog* c : Registry::catalogs()) {
    std::printf("  %s:\n", scopeName(c->scope));
    for (const CounterInfo& i : c->counters)
      std::printf("    %-24s %-5s %s\n", (i.kind != nullptr ? std::string(i.name) + "{" + i.kind + "}" : std::string(i.name)).c_str(),
                  i.gauge ? "gauge" : "count", i.doc);
  }
  Registry::process().forEach(nullptr, [](const CounterSet& s) {
    std::printf("  live %s %s:", scopeName(s.catalog().scope), s.object().c_str());
    for (size_t i = 0; i < s.catalog().counters.size(); ++i)
      std::printf(" %s%s%s=%llu", s.catalog().counters[i].name, s.catalog().counters[i].kind != nullptr ? "/" : "",
                  s.catalog().counters[i].kind != nullptr ? s.catalog().counters[i].kind : "",
                  static_cast<unsigned long long>(s.get(i)));
    std::printf("\n");
  });
}

// What the CUDA driver and the loaded UCX say about GPU memory, with the reason for every "no".
void printGpu(const pact::Params& params) {
  const pact::cuda::Driver& d = pact::cuda::Driver::instance(params.cuda_driver);
  std::string ucx;
  const bool ucpCuda = pact::transport::ucpListsCuda(&ucx);
  std::printf("gpu memory:\n");
  if (d.available()) {
    std::printf("  cuda driver              %s: %d.%d, %d GPU(s)%s\n", d.path().c_str(),
                d.version() / 1000, d.version() % 1000 / 10, d.deviceCount(),
                d.hostBacked() ? " (TEST DOUBLE: device memory is host memory)" : "");
    for (int g = 0; g < d.deviceCount(); ++g) {
      auto f = d.device(g);
      if (!f.ok()) continue;
      std::printf("    gpu %d %s: dmabuf %s, GPUDirect RDMA %s, host flush option %s\n", g,
                  f->pciBusId.c_str(), f->dmabuf ? "yes" : "no", f->gdrRdma ? "yes" : "no",
                  f->hostFlush() ? "yes" : "no");
    }
    std::string why;
    std::printf("  dmabuf export            %s\n", d.canExportDmabuf(&why) ? "yes (cuMemGetHandleForAddressRange)" : ("no: " + why).c_str());
    std::printf("  driver flush             %s\n", d.canFlush(&why) ? "yes (cuFlushGPUDirectRDMAWrites)" : ("no: " + why).c_str());
  } else {
    std::printf("  cuda driver              no: %s\n", d.why().c_str());
  }
  std::printf("  ucx %-20s built with dmabuf headers %s, memory types %s; CUDA memory type %s\n",
              ucx.c_str(), PACT_UCX_HAVE_DMABUF ? "yes" : "no (UCX < 1.14)",
              PACT_UCX_HAVE_MEMORY_TYPES ? "yes" : "no",
              ucpCuda ? "yes" : "no (UCX without CUDA, or no driver for its cuda modules)");
}

void printDevices(pact::net::Net& net) {
  std::printf("devices: %d\n", net.deviceCount());
  for (int d = 0; d < net.deviceCount(); ++d) {
    pact::net::Properties p;
    if (net.properties(d, &p) != pact::Status::kOk) continue;
    const pact::ucx::DeviceInfo info = net.deviceInfo(d);
    std::string tls;
    for (const auto& t : info.transports) tls += (tls.empty() ? "" : ",") + t;
    std::printf(
        "  [%d] %s\n      pci %s\n      guid %#018llx port %d speed %d Mbps (%s) latency %.2f us\n"
        "      ptrSupport %#x maxComms %d maxRecvs %d regIsGlobal %d maxP2pBytes %zu\n"
        "      ucx transports %s, bootstrap address %s\n      ucx port (its contexts' UCX_NET_DEVICES) %s\n",
        d, p.name.c_str(), p.pciPath.empty() ? "(none)" : p.pciPath.c_str(),
        static_cast<unsigned long long>(p.guid), p.port, p.speedMbps, info.speedSource.c_str(),
        static_cast<double>(p.latencyUs), p.ptrSupport, p.maxComms, p.maxRecvs, p.regIsGlobal,
        p.maxP2pBytes, tls.c_str(), info.ipAddress.empty() ? "(none)" : info.ipAddress.c_str(),
        (info.ucxDevices() + (info.members.size() > 1 ? " (a context per rail, each pinned to its port)" : "")).c_str());
    std::string domains;
    for (const auto& md : info.domains)
      domains += (domains.empty() ? "" : ", ") + md.name + (md.regMemTypes & UCS_BIT(UCS_MEMORY_TYPE_CUDA) ? " (cuda)" : "") +
                 (md.dmabuf ? " (dmabuf)" : "");
    std::printf("      NCCL_PTR_CUDA %s\n      NCCL_PTR_DMABUF %s\n      GPU flush (PACT_GPU_FLUSH=auto) %s\n"
                "      ucx memory domains %s\n",
                p.memory.cuda() ? "yes" : ("no: " + p.memory.cudaWhy).c_str(),
                p.memory.dmabuf() ? "yes" : ("no: " + p.memory.dmabufWhy).c_str(),
                p.memory.flushMethod.c_str(), domains.c_str());
  }
  std::printf("maxComms %d: bound by %s\n", net.limits().maxComms, net.limits().reason.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pact-info: devices, properties and effective configuration of pact"};
  app.set_version_flag("--version", std::function<std::string()>([] { return pact::perf::versionText("pact-info"); }),
                       "pact's, UCX's and the ABIs' versions");
  app.footer(variablesHelp());
  bool paramsMd = false;
  bool noDevices = false;
  bool noProbe = false;
  bool counters = false;
  std::string metrics;
  app.add_flag("--params-md", paramsMd, "print docs/params.md (generated from the registry) and exit");
  app.add_flag("--no-devices", noDevices, "skip device discovery (and the traffic-class services)");
  app.add_flag("--no-probe", noProbe, "do not probe the transports UCX selects for each class");
  app.add_flag("--counters", counters, "print every counter pact keeps (per scope) and exit");
  app.add_option("--metrics", metrics,
                 "print a running process's counters as a table and exit: http://HOST:PORT (its "
                 "PACT_METRICS_PORT) or a PACT_METRICS_FILE");
  CLI11_PARSE(app, argc, argv);

  if (paramsMd) {
    std::cout << pact::Params::markdown();
    return 0;
  }
  if (!metrics.empty()) return pact::perf::printMetrics(metrics, stdout);
  if (counters) {
    pact::telemetry::processCounters();  // the process set is live in every process
    printCounters();
    return 0;
  }
  const auto params = pact::Params::fromProcessEnv();
  if (!params.ok()) {
    std::fprintf(stderr, "pact-info: %s\n", params.error().message.c_str());
    return 2;
  }
  pact::log::setLevel(params->log_level);
  std::printf("pact %s\nconfiguration:\n", PACT_VERSION);
  for (const auto& [name, value] : params->effective())
    std::printf("  %-24s %s\n", name.c_str(), value.c_str());
  std::printf("security:\n  authentication           %s\n",
              params->auth_key.enabled() ? ("on (HMAC-SHA256, key from " + params->auth_key.path + ")").c_str()
                                         : "off (PACT_AUTH_KEY_FILE unset)");
  if (params->fault.active())
    std::printf("FAULT INJECTION ACTIVE: %s (PACT_FAULT; a test hook, not for production)\n",
                params->fault.describe().c_str());
  printGpu(*params);
  if (noDevices) return printClasses(params->classes, nullptr, false) ? 0 : 2;
  auto net = pact::net::Net::create(*params);
  if (!net.ok()) {
    std::fprintf(stderr, "pact-info: %s\n", net.error().message.c_str());
    return 2;
  }
  printDevices(**net);
  std::optional<pact::ucx::DeviceInfo> first;
  if ((*net)->deviceCount() > 0) first = (*net)->deviceInfo(0);
  return printClasses(params->classes, first ? &*first : nullptr, !noProbe) ? 0
                                                                                               : 2;
}
