// pact-info: what pact sees on this host: devices and their NCCL properties, and the effective
// value of every PACT_* variable. --help documents each variable; --params-md prints
// docs/params.md. A malformed PACT_* variable prints the same one-line error the plugin logs and
// exits non-zero.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "common/params.h"
#include "pact_config.h"
#include "transport/net.h"

namespace {

std::string variablesHelp() {
  std::string out = "\nEnvironment variables (the PACT_* registry):\n";
  for (const auto& p : pact::Params::table()) {
    out += std::string("  ") + p.name + " (default '" + p.defaultValue + "'; " + p.allowed + ")\n      " +
           p.doc + "\n";
  }
  return out;
}

void printDevices(pact::transport::Net& net) {
  std::printf("devices: %d\n", net.deviceCount());
  for (int d = 0; d < net.deviceCount(); ++d) {
    pact::transport::Properties p;
    if (net.properties(d, &p) != pact::Status::kOk) continue;
    const auto& info = net.devices()[static_cast<size_t>(d)];
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
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pact-info: devices, properties and effective configuration of pact"};
  app.footer(variablesHelp());
  bool paramsMd = false;
  bool noDevices = false;
  app.add_flag("--params-md", paramsMd, "print docs/params.md (generated from the registry) and exit");
  app.add_flag("--no-devices", noDevices, "skip device discovery");
  CLI11_PARSE(app, argc, argv);

  if (paramsMd) {
    std::cout << pact::Params::markdown();
    return 0;
  }
  const auto& params = pact::Params::global();
  if (!params.ok()) {
    std::fprintf(stderr, "pact-info: %s\n", params.error().message.c_str());
    return 2;
  }
  pact::log::setLevel(params->log_level);
  std::printf("pact %s\nconfiguration:\n", PACT_VERSION);
  for (const auto& [name, value] : params->effective())
    std::printf("  %-24s %s\n", name.c_str(), value.c_str());
  if (noDevices) return 0;
  auto net = pact::transport::Net::create(*params);
  if (!net.ok()) {
    std::fprintf(stderr, "pact-info: %s\n", net.error().message.c_str());
    return 2;
  }
  printDevices(**net);
  return 0;
}
