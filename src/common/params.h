// Params: the effective value of every PACT_* variable, parsed once from the environment by the
// single registry in params.def. An absent variable means its default; a present but malformed
// value is an error whose message names the variable, the value and what is allowed.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/auth.h"
#include "common/fault.h"
#include "common/log.h"
#include "transport/profile.h"
#include "common/status.h"

namespace pact {

using Microseconds = std::chrono::microseconds;

// ---- value parsers: value_type, parse(), allowed() -------------------------------------------
struct DeviceListParser {
  using value_type = std::vector<std::string>;
  static Result<value_type> parse(std::string_view s);
  static const char* allowed() { return "comma-separated device names, or 'all'"; }
};
struct U64Parser {
  using value_type = uint64_t;
  static Result<uint64_t> parse(std::string_view s);
  static const char* allowed() { return "an unsigned 64-bit integer"; }
};
template <int kMin, int kMax>
struct CountParser {
  using value_type = int;
  static Result<int> parse(std::string_view s);
  static std::string allowedText() {
    return "an integer from " + std::to_string(kMin) + " to " + std::to_string(kMax);
  }
  static const char* allowed() {
    static const std::string text = allowedText();
    return text.c_str();
  }
};
struct DurationParser {
  using value_type = Microseconds;
  static Result<Microseconds> parse(std::string_view s);
  static const char* allowed() { return "a duration with unit us, ms or s (e.g. 200ms)"; }
};
struct SizeParser {
  using value_type = uint64_t;
  static Result<uint64_t> parse(std::string_view s);
  static const char* allowed() { return "a size in bytes with optional K, M or G suffix"; }
};
struct LogLevelParser {
  using value_type = log::Level;
  static Result<log::Level> parse(std::string_view s);
  static const char* allowed() { return "none, error, warn, info, debug or trace"; }
};

// Shared by the integer parsers: full-string unsigned decimal, overflow-checked.
Result<uint64_t> parseUnsigned(std::string_view s);
// Shared by every value parser: s without leading and trailing white space.
std::string_view trimSpace(std::string_view s);
// A duration as the registry writes it: "0", "30s", "200ms", "500us".
std::string formatDuration(Microseconds v);

template <int kMin, int kMax>
Result<int> CountParser<kMin, kMax>::parse(std::string_view s) {
  auto v = parseUnsigned(s);
  if (!v.ok() || *v < static_cast<uint64_t>(kMin) || *v > static_cast<uint64_t>(kMax))
    return Error{Status::kInvalidArgument, allowedText()};
  return static_cast<int>(*v);
}

// Range-checked counts used in params.def (a macro argument cannot hold a template comma).
using RecvCountParser = CountParser<1, 8>;
using TraceEventsParser = CountParser<16, (1 << 24)>;

// ---- the registry ------------------------------------------------------------------------------
struct ParamInfo {
  const char* name;
  const char* defaultValue;
  const char* allowed;
  const char* doc;
};

// Environment snapshot: PACT_* name -> value.
using EnvMap = std::map<std::string, std::string>;

struct Params {
#define PACT_PARAM(field, name, parser, def, doc) typename parser::value_type field{};
#include "common/params.def"
#undef PACT_PARAM
  // The PACT_TC_* family: every traffic class and its resolved service profile.
  ClassTable classes;

  // Parses every registered variable from env, then the PACT_TC_* family. Unknown PACT_* names
  // are returned in *unknown (the caller warns: a typo check); a PACT_TC_* name is never unknown
  // (a class that does not exist is an error).
  static Result<Params> load(const EnvMap& env, std::vector<std::string>* unknown = nullptr);
  // Parsed once from the process environment, on first use; later calls return the same result.
  static const Result<Params>& global();
  // Every registered variable, in registry order, then one row per PACT_TC_CLASS entry.
  static const std::vector<ParamInfo>& table();
  // Effective value of each registered variable, as text (for pact-info and logs), in table()
  // order; the PACT_TC_<n> row expands to each configured PACT_TC_<n> (ClassTable::effective).
  std::vector<std::pair<std::string, std::string>> effective() const;
  // The profile grammar and every profile key, for --help.
  static std::string profileHelp();
  // docs/params.md, generated from the registry.
  static std::string markdown();
};

// All PACT_* variables of the process environment.
EnvMap processPactEnv();
// Whether a (non-PACT) variable such as UCX_NET_DEVICES is set in the process environment, and
// its value ("" when unset): the user's UCX_* settings win over pact's.
bool envIsSet(const char* name);
std::string envValue(const char* name);

}  // namespace pact
