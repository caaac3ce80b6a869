#include "telemetry/exposition.h"

#include <map>
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

struct Sample {
  std::string labels;
  uint64_t value;
};

}  // namespace

std::string prometheusText(const Registry& registry) {
  // Read everything under the registry's lock first, then format: samples grouped by catalog and
  // counter, in the catalogs' documented order.
  std::map<const Catalog*, std::vector<std::pair<std::string, std::vector<uint64_t>>>> byCatalog;
  registry.forEach(nullptr, [&](const CounterSet& s) {
    std::string labels = "{object=\"" + escapeLabelValue(s.object()) + "\",set=\"" + std::to_string(s.id()) + "\"}";
    byCatalog[&s.catalog()].emplace_back(std::move(labels), s.values());
  });
  std::string out;
  for (const Catalog* c : Registry::catalogs()) {
    auto it = byCatalog.find(c);
    if (it == byCatalog.end()) continue;
    for (size_t i = 0; i < c->counters.size(); ++i) {
      const CounterInfo& info = c->counters[i];
      const std::string name = std::string("pact_") + scopeName(c->scope) + "_" + info.name + (info.gauge ? "" : "_total");
      out += "# HELP " + name + " " + escapeHelp(info.doc) + "\n";
      out += "# TYPE " + name + (info.gauge ? " gauge\n" : " counter\n");
      for (const auto& [labels, values] : it->second) out += name + labels + " " + std::to_string(values[i]) + "\n";
    }
  }
  return out;
}

}  // namespace pact::telemetry
