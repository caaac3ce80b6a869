// Params: the effective value of every PACT_* variable, parsed once from the environment by the
// single registry in params.def, with the traffic-class table (profile.h) beside it: so the
// registry sits in the transport core, on the parsing helpers of common (common/parse.h). An absent variable means its default; a present but malformed
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
#include "common/parse.h"
#include "common/status.h"
#include "transport/profile.h"

namespace pact {

// ---- the registry ------------------------------------------------------------------------------
struct ParamInfo {
  const char* name;
  const char* defaultValue;
  const char* allowed;
  const char* doc;
};


struct Params {
#define PACT_PARAM(field, name, parser, def, doc) typename parser::value_type field{};
#include "transport/params.def"
#undef PACT_PARAM
  // The PACT_TC_* family: every traffic class and its resolved service profile.
  ClassTable classes;

  // Parses every registered variable from env, then the PACT_TC_* family. Unknown PACT_* names
  // are returned in *unknown (the caller warns: a typo check); a PACT_TC_* name is never unknown
  // (a class that does not exist is an error).
  static Result<Params> load(const EnvMap& env, std::vector<std::string>* unknown = nullptr);
  // load() of the process environment, warning once about each unknown PACT_* name. The entry
  // points (the plugin's init, the C API, the tools) call it once and pass the result down.
  static Result<Params> fromProcessEnv();
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

}  // namespace pact
