#include "common/params.h"

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>

extern char** environ;

namespace pact {

std::string_view trimSpace(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string formatDuration(Microseconds v) {
  const auto us = v.count();
  if (us == 0) return "0";
  if (us % 1000000 == 0) return std::to_string(us / 1000000) + "s";
  if (us % 1000 == 0) return std::to_string(us / 1000) + "ms";
  return std::to_string(us) + "us";
}

namespace {

std::string formatValue(uint64_t v) { return std::to_string(v); }
std::string formatValue(int v) { return std::to_string(v); }
std::string formatValue(const FaultSpec& v) { return v.describe(); }
std::string formatValue(const auth::Key& v) { return v.path; }  // never the secret
std::string formatValue(log::Level v) { return log::levelName(v); }
std::string formatValue(Microseconds v) { return formatDuration(v); }
std::string formatValue(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& d : v) out += (out.empty() ? "" : ",") + d;
  return out.empty() ? "all (loopback excluded)" : out;
}

constexpr std::string_view kPrefix = "PACT_";

}  // namespace

Result<uint64_t> parseUnsigned(std::string_view s) {
  s = trimSpace(s);
  if (s.empty()) return Error{Status::kInvalidArgument, "empty"};
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return Error{Status::kInvalidArgument, "not a number"};
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return Error{Status::kInvalidArgument, "out of range"};
    v = v * 10 + d;
  }
  return v;
}

Result<uint64_t> U64Parser::parse(std::string_view s) {
  auto v = parseUnsigned(s);
  if (!v.ok()) return Error{Status::kInvalidArgument, allowed()};
  return v;
}

Result<std::vector<std::string>> DeviceListParser::parse(std::string_view s) {
  std::vector<std::string> out;
  s = trimSpace(s);
  if (s.empty() || s == "all") return out;
  while (!s.empty()) {
    auto comma = s.find(',');
    std::string_view tok = trimSpace(s.substr(0, comma));
    if (tok.empty()) return Error{Status::kInvalidArgument, "an empty device name in the list"};
    for (char c : tok)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
            c == ':'))
        return Error{Status::kInvalidArgument,
                     "device name '" + std::string(tok) + "' has a character outside [A-Za-z0-9_.:-]"};
    out.emplace_back(tok);
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

Result<Microseconds> DurationParser::parse(std::string_view s) {
  s = trimSpace(s);
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  auto num = parseUnsigned(s.substr(0, i));
  std::string_view unit = s.substr(i);
  uint64_t mult = 0;
  if (unit == "us") mult = 1;
  else if (unit == "ms") mult = 1000;
  else if (unit == "s") mult = 1000000;
  if (!num.ok() || mult == 0 || *num > UINT64_MAX / mult / 2)
    return Error{Status::kInvalidArgument, allowed()};
  return Microseconds(static_cast<int64_t>(*num * mult));
}

Result<uint64_t> SizeParser::parse(std::string_view s) {
  s = trimSpace(s);
  uint64_t mult = 1;
  if (!s.empty()) {
    switch (std::toupper(static_cast<unsigned char>(s.back()))) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      default: break;
    }
    if (mult != 1) s.remove_suffix(1);
  }
  auto num = parseUnsigned(s);
  if (!num.ok() || *num > UINT64_MAX / mult) return Error{Status::kInvalidArgument, allowed()};
  return *num * mult;
}

Result<log::Level> LogLevelParser::parse(std::string_view s) {
  s = trimSpace(s);
  for (int l = 0; l <= static_cast<int>(log::Level::kTrace); ++l) {
    auto level = static_cast<log::Level>(l);
    if (s == log::levelName(level)) return level;
  }
  return Error{Status::kInvalidArgument, allowed()};
}

const std::vector<ParamInfo>& Params::table() {
  static const std::string builtin = Profile{}.describe();
  static const std::vector<ParamInfo> t = {
#define PACT_PARAM(field, name, parser, def, doc) {name, def, parser::allowed(), doc},
#include "common/params.def"
#undef PACT_PARAM
  // The class family after every scalar variable, wherever params.def lists it (effective()
  // keeps the same order).
#define PACT_TC_CLASS(suffix, doc)                                                           \
  {"PACT_TC_" suffix, std::string_view(suffix) == "DEFAULT" ? builtin.c_str() : "PACT_TC_DEFAULT", \
   "a service profile (see the profile keys)", doc},
#include "common/params.def"
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
#include "common/params.def"
#undef PACT_PARAM
  auto classes = ClassTable::load(env);
  if (!classes.ok()) return classes.error();
  p.classes = std::move(classes.value());
  if (unknown) {
    for (const auto& [k, v] : env) {
      bool known = k.compare(0, ClassTable::kPrefix.size(), ClassTable::kPrefix) == 0;
      for (const auto& info : table()) known = known || k == info.name;
      if (!known && k.compare(0, kPrefix.size(), kPrefix) == 0) unknown->push_back(k);
    }
  }
  return p;
}

const Result<Params>& Params::global() {
  static const Result<Params> r = [] {
    std::vector<std::string> unknown;
    auto p = load(processPactEnv(), &unknown);
    for (const auto& name : unknown)
      PACT_WARN("unknown environment variable %s ignored (typo? see pact-info --help)", name.c_str());
    return p;
  }();
  return r;
}

std::vector<std::pair<std::string, std::string>> Params::effective() const {
  std::vector<std::pair<std::string, std::string>> out = {
#define PACT_PARAM(field, name, parser, def, doc) {name, formatValue(field)},
#include "common/params.def"
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
    << "Generated from `src/common/params.def` (`pact-info --params-md`); a unit test checks that "
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

EnvMap processPactEnv() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.compare(0, kPrefix.size(), kPrefix) != 0) continue;
    auto eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

bool envIsSet(const char* name) { return std::getenv(name) != nullptr; }

std::string envValue(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

}  // namespace pact
