#include "telemetry/exposition.h"

#include "telemetry/tcp_info.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace pact::telemetry {

std::string escapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {

// HELP text: backslash and newline escaped (quotes stay).
std::string escapeHelp(const char* doc) {
  std::string out;
  for (const char* p = doc; *p != '\0'; ++p) {
    if (*p == '\\')
      out += "\\\\";
    else if (*p == '\n')
      out += "\\n";
    else
      out += *p;
  }
  return out;
}

// The unsigned integer in a sysfs file, or false.
bool readCounter(const std::string& path, uint64_t* v) {
  std::ifstream in(path);
  unsigned long long x = 0;
  if (!(in >> x)) return false;
  *v = x;
  return true;
}

// The regular files of a directory, sorted (none when it does not exist).
std::vector<std::string> filesOf(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A metric-name part from a file name: [a-z0-9_] only.
std::string namePart(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : '_';
  return out;
}

}  // namespace

std::string nicText(const std::vector<std::string>& devices, const std::string& sysRoot) {
  // family -> (help, device label -> value), families in name order.
  std::map<std::string, std::pair<std::string, std::map<std::string, uint64_t>>> families;
  const std::set<std::string> unique(devices.begin(), devices.end());
  for (const std::string& dev : unique) {
    const size_t colon = dev.find(':');
    struct Source {
      const char* prefix;
      std::string dir;
      const char* help;  // where the value comes from, for HELP
    };
    std::vector<Source> sources;
    if (colon == std::string::npos) {
      sources.push_back({"pact_netdev_", sysRoot + "/class/net/" + dev + "/statistics", "/sys/class/net/DEV/statistics/"});
    } else {
      const std::string port = sysRoot + "/class/infiniband/" + dev.substr(0, colon) + "/ports/" + dev.substr(colon + 1);
      sources.push_back({"pact_ib_port_", port + "/counters", "/sys/class/infiniband/DEV/ports/PORT/counters/"});
      sources.push_back({"pact_ib_hw_", port + "/hw_counters", "/sys/class/infiniband/DEV/ports/PORT/hw_counters/"});
    }
    for (const Source& src : sources)
      for (const std::string& f : filesOf(src.dir)) {
        uint64_t v = 0;
        if (!readCounter(src.dir + "/" + f, &v)) continue;
        auto& fam = families[src.prefix + namePart(f) + "_total"];
        fam.first = std::string("the kernel's ") + src.help + f;
        fam.second[dev] = v;
      }
  }
  std::string out;
  for (const auto& [name, fam] : families) {
    out += "# HELP " + name + " " + fam.first + "\n# TYPE " + name + " counter\n";
    for (const auto& [dev, v] : fam.second) out += name + "{device=\"" + escapeLabelValue(dev) + "\"} " + std::to_string(v) + "\n";
  }
  return out;
}

namespace {

// `key="value",...` of a series, without braces.
std::string labelText(const Labels& labels) {
  std::string out;
  for (const Label& l : labels) out += (out.empty() ? "" : ",") + l.key + "=\"" + escapeLabelValue(l.value) + "\"";
  return out;
}

}  // namespace

std::string prometheusText(const Registry& registry, bool perComm) {
  // Read everything under the registry's lock first, then format. A series is a scope and a label
  // set: the live sets that carry it summed, plus the counters of those gone (Registry::Retired).
  // Per comm (perComm), a comm's sets carry comm="ID" and the closed ones' counters comm="closed".
  // Every set of a scope has the process's one shared catalog of it (shared.h).
  struct Scoped {
    const Catalog* catalog = nullptr;
    std::map<std::string, std::vector<uint64_t>> series;  // by label text
    void add(const Catalog& c, const std::string& labels, const std::vector<uint64_t>& v) {
      catalog = &c;
      auto& sum = series[labels];
      sum.resize(v.size());
      for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
  };
  std::map<Scope, Scoped> byScope;
  std::set<std::string> devices;  // what the device sets name
  auto withComm = [&](const Labels& labels, const std::string& comm) {
    const std::string t = labelText(labels);
    return comm.empty() ? t : t + (t.empty() ? "" : ",") + "comm=\"" + comm + "\"";
  };
  registry.forEach(nullptr, [&](const CounterSet& s) {
    if (s.catalog().scope == Scope::kDevice)
      for (const Label& l : s.labels())
        if (l.key == "device") devices.insert(l.value);
    const std::string comm = perComm && s.comm() != 0 ? std::to_string(s.comm()) : "";
    byScope[s.catalog().scope].add(s.catalog(), withComm(s.labels(), comm), s.values());
  });
  registry.forEachRetired([&](const Labels& labels, const Registry::Retired& r) {
    byScope[r.catalog->scope].add(*r.catalog, withComm(labels, perComm && r.ofComm ? "closed" : ""), r.values);
  });
  std::string out;
  for (const Catalog* documented : Registry::catalogs()) {
    auto it = byScope.find(documented->scope);
    if (it == byScope.end()) continue;
    const Catalog* c = it->second.catalog;
    for (size_t i = 0; i < c->counters.size(); ++i) {
      const CounterInfo& info = c->counters[i];
      const std::string name = std::string("pact_") + scopeName(c->scope) + "_" + info.name + (info.gauge ? "" : "_total");
      // A family's counters told apart by kind stand together: HELP and TYPE before the first.
      const bool continues = info.kind != nullptr && i > 0 && std::string(c->counters[i - 1].name) == info.name;
      if (!continues) {
        out += "# HELP " + name + " " + escapeHelp(info.doc) + "\n";
        out += "# TYPE " + name + (info.gauge ? " gauge\n" : " counter\n");
      }
      const std::string kind = info.kind != nullptr ? std::string("kind=\"") + info.kind + "\"" : "";
      for (const auto& [labels, values] : it->second.series) {
        const std::string all = labels + (!labels.empty() && !kind.empty() ? "," : "") + kind;
        out += name + (all.empty() ? "" : "{" + all + "}") + " " + std::to_string(values[i]) + "\n";
      }
    }
  }
  const std::vector<std::string> named(devices.begin(), devices.end());
  return out + nicText(named) + tcpText(named);
}

}  // namespace pact::telemetry
