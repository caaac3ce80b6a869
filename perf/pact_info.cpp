// pact-info: what pact sees on this host: devices and their NCCL properties, the effective
// value of every PACT_* variable, and every traffic class with its resolved profile, its UCX
// service settings and the transports UCX actually selects for it on device 0. --help documents
// each variable and profile key; --params-md prints docs/params.md. A malformed PACT_* variable
// prints the same one-line error the plugin logs and exits non-zero.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <iostream>
#include <map>
#include <sstream>

#include "transport/params.h"
#include "pact_config.h"
#include "net/net.h"
#include "telemetry/counters.h"
#include "transport/service.h"

namespace {

std::string variablesHelp() {
  std::string out = "\nEnvironment variables (the PACT_* registry):\n";
  for (const auto& p : pact::Params::table()) {
    out += std::string("  ") + p.name + " (default '" + p.defaultValue + "'; " + p.allowed + ")\n      " +
           p.doc + "\n";
  }
  return out + "\n" + pact::Params::profileHelp();
}

void printClass(const pact::ClassTable::Entry& e) {
  std::printf("  %s (%s, %s)\n      profile     %s\n", e.name.c_str(), e.variable.c_str(),
              e.set ? "set" : e.name == "DEFAULT" ? "built-in" : "inherits DEFAULT",
              e.profile.describe().c_str());
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
    auto svc = pact::transport::serviceFor(e.profile, *device, e.name);
    if (!svc.ok()) {
      std::printf("      error       %s\n", svc.error().message.c_str());
      ok = false;
      continue;
    }
    const std::string key = pact::transport::contextKey(e.profile, *svc);
    std::printf("      service     %s\n      context     %s\n", svc->summary.c_str(), key.c_str());
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
      std::printf("    %-24s %-5s %s\n", i.name, i.gauge ? "gauge" : "count", i.doc);
  }
  Registry::process().forEach(nullptr, [](const CounterSet& s) {
    std::printf("  live %s %s:", scopeName(s.catalog().scope), s.object().c_str());
    for (size_t i = 0; i < s.catalog().counters.size(); ++i)
      std::printf(" %s=%llu", s.catalog().counters[i].name, static_cast<unsigned long long>(s.get(i)));
    std::printf("\n");
  });
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
        "      ucx transports %s, bootstrap address %s\n",
        d, p.name.c_str(), p.pciPath.empty() ? "(none)" : p.pciPath.c_str(),
        static_cast<unsigned long long>(p.guid), p.port, p.speedMbps, info.speedSource.c_str(),
        static_cast<double>(p.latencyUs), p.ptrSupport, p.maxComms, p.maxRecvs, p.regIsGlobal,
        p.maxP2pBytes, tls.c_str(), info.ipAddress.empty() ? "(none)" : info.ipAddress.c_str());
  }
  std::printf("maxComms %d: bound by %s\n", net.limits().maxComms, net.limits().reason.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pact-info: devices, properties and effective configuration of pact"};
  app.footer(variablesHelp());
  bool paramsMd = false;
  bool noDevices = false;
  bool noProbe = false;
  bool counters = false;
  app.add_flag("--params-md", paramsMd, "print docs/params.md (generated from the registry) and exit");
  app.add_flag("--no-devices", noDevices, "skip device discovery (and the traffic-class services)");
  app.add_flag("--no-probe", noProbe, "do not probe the transports UCX selects for each class");
  app.add_flag("--counters", counters, "print every counter pact keeps (per scope) and exit");
  CLI11_PARSE(app, argc, argv);

  if (paramsMd) {
    std::cout << pact::Params::markdown();
    return 0;
  }
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
