#include "transport/params.h"

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>


namespace pact {

namespace {

std::string formatValue(uint64_t v) { return std::to_string(v); }
std::string formatValue(int v) { return std::to_string(v); }
std::string formatValue(const FaultSpec& v) { return v.describe(); }
std::string formatValue(const auth::Key& v) { return v.path; }  // never the secret
std::string formatValue(log::Level v) { return log::levelName(v); }
std::string formatValue(const std::string& v) { return v; }
std::string formatValue(GpuFlush v) { return gpuFlushName(v); }
std::string formatValue(Microseconds v) { return formatDuration(v); }
std::string formatValue(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& d : v) out += (out.empty() ? "" : ",") + d;
  return out.empty() ? "all (loopback excluded)" : out;
}

}  // namespace

const std::vector<ParamInfo>& Params::table() {
  static const std::string builtin = Profile{}.describe();
  static const std::vector<ParamInfo> t = {
#define PACT_PARAM(field, name, parser, def, doc) {name, def, parser::allowed(), doc},
#include "transport/params.def"
#undef PACT_PARAM
  // The class family after every scalar variable, wherever params.def lists it (effective()
  // keeps the same order).
#define PACT_TC_CLASS(suffix, doc)                                                           \
  {"PACT_TC_" suffix, std::string_view(suffix) == "DEFAULT" ? builtin.c_str() : "PACT_TC_DEFAULT", \
   "a service profile (see the profile keys)", doc},
#include "transport/params.def"
#undef PACT_TC_CLASS
  };
  return t;
}

Result<Params> Params::load(const EnvMap& env, std::vector<std::string>* unknown) {
  Params p;
  // A parser that names the offending token ("'tok': expected ...") has its message kept; one
  // that answers with its allowed() text gets "expected <allowed>"; any other reason is followed
  // by what is allowed ("cannot read: ... (expected ...)").
  auto one = [&env](const char* name, const char* def, auto parse, const char* allowed,
                    auto& field) -> std::optional<Error> {
    auto it = env.find(name);
    std::string_view text = it == env.end() ? std::string_view(def) : std::string_view(it->second);
    auto r = parse(text);
    if (r.ok()) {
      field = std::move(r.value());
      return std::nullopt;
    }
    const std::string& why = r.error().message;
    return Error{Status::kInvalidArgument,
                 std::string("invalid ") + name + "='" + std::string(text) + "': " +
                     (why.rfind('\'', 0) == 0 ? why
                      : why == allowed         ? std::string("expected ") + allowed
                                               : why + " (expected " + allowed + ")")};
  };
#define PACT_PARAM(field, name, parser, def, doc)                                   \
  if (auto e = one(name, def, parser::parse, parser::allowed(), p.field)) return *e;
#include "transport/params.def"
#undef PACT_PARAM
  auto classes = ClassTable::load(env);
  if (!classes.ok()) return classes.error();
  p.classes = std::move(classes.value());
  if (unknown) {
    for (const auto& [k, v] : env) {
      bool known = k.compare(0, ClassTable::kPrefix.size(), ClassTable::kPrefix) == 0;
      for (const auto& info : table()) known = known || k == info.name;
      if (!known && k.compare(0, kPactPrefix.size(), kPactPrefix) == 0) unknown->push_back(k);
    }
  }
  return p;
}

Result<Params> Params::fromProcessEnv() {
  std::vector<std::string> unknown;
  auto p = load(processPactEnv(), &unknown);
  for (const auto& name : unknown)
    PACT_WARN("unknown environment variable %s ignored (typo? see pact-info --help)", name.c_str());
  return p;
}

std::vector<std::pair<std::string, std::string>> Params::effective() const {
  std::vector<std::pair<std::string, std::string>> out = {
#define PACT_PARAM(field, name, parser, def, doc) {name, formatValue(field)},
#include "transport/params.def"
#undef PACT_PARAM
  };
  for (auto& row : classes.effective()) out.push_back(std::move(row));
  return out;
}

std::string Params::profileHelp() {
  std::string out = std::string(profileGrammar()) + "\n\nProfile keys:\n";
  for (const auto& k : profileKeys())
    out += std::string("  ") + k.key + " (default '" + k.defaultValue + "'; " + k.allowed +
           ")\n      " + k.doc + "\n";
  return out;
}

std::string Params::markdown() {
  std::ostringstream o;
  o << "# PACT_* environment variables\n\n"
    << "Generated from `src/transport/params.def` (`pact-info --params-md`); a unit test checks that "
       "this file matches the registry. A malformed value is an error at init that names the "
       "variable; an unknown `PACT_*` name draws a warning.\n\n"
    << "| variable | default | allowed | meaning |\n|---|---|---|---|\n";
  for (const auto& p : table())
    o << "| `" << p.name << "` | `" << p.defaultValue << "` | " << p.allowed << " | " << p.doc
      << " |\n";
  o << "\n## Service profiles (PACT_TC_*)\n\n"
    << profileGrammar()
    << " See [traffic-classes.md](traffic-classes.md).\n\n"
    << "| key | default | allowed | meaning |\n|---|---|---|---|\n";
  for (const auto& k : profileKeys())
    o << "| `" << k.key << "` | `" << k.defaultValue << "` | " << k.allowed << " | " << k.doc
      << " |\n";
  return o.str();
}

}  // namespace pact
