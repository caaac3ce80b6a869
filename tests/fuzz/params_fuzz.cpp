// libFuzzer target: the PACT_* registry (every value parser, the PACT_TC_* profiles, PACT_FAULT).
// The input is split into NAME=VALUE lines; any environment must load or be refused with a
// message naming a variable, never crash.
#include <map>
#include <string>

#include "transport/params.h"
#include "tests/fuzz/fuzz_main.h"

std::vector<std::vector<uint8_t>> pact::fuzz::seeds() {
  auto s = [](const std::string& t) { return std::vector<uint8_t>(t.begin(), t.end()); };
  return {s("PACT_TC_DEFAULT=unordered,lanes=4,chunk=512K\nPACT_TC_3=rc,tc=3,sl=1\n"),
          s("PACT_FAULT=delay=lane0:5ms,seed=7\nPACT_EPOCH=12\n"),
          s("PACT_NET_DEVICES=lo,eth0\nPACT_PEER_TIMEOUT=200ms\nPACT_TC_KV=credits=256M,verify=crc32c\n")};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  pact::EnvMap env;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::vector<std::string> unknown;
  auto p = pact::Params::load(env, &unknown);
  if (!p.ok() && p.error().message.find("PACT_") == std::string::npos) __builtin_trap();
  if (p.ok()) (void)p->effective();
  return 0;
}
